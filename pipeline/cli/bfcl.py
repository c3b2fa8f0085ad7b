"""`python -m pipeline bfcl`: the bfcl-eval environment qwen3.6-27b's accuracy is scored in (its own venv:
bfcl-eval pins numpy, networkx and filelock apart from perfdag's), and the 995-sample accuracy set
built from bfcl-eval's own data."""
from __future__ import annotations

from pathlib import Path

from harness.mlperf.bfcl import env


def add_parser(sub) -> None:
    p = sub.add_parser("bfcl", help="make the bfcl-eval environment; build the BFCL v4 accuracy set", description=__doc__)
    verbs = p.add_subparsers(dest="verb", required=True)
    s = verbs.add_parser("setup", help=f"make a venv with bfcl-eval {env.VERSION} (about 2 GB)")
    s.add_argument("--dir", default=None, metavar="DIR", help=f"where (default: {env.default_dir()})")
    d = verbs.add_parser("dataset", help="write qwen3.6-27b's 995-sample accuracy set (JSON lines)")
    d.add_argument("--out", required=True, metavar="FILE")
    d.add_argument("--bfcl-python", default=None, metavar="PYTHON", help="a bfcl-eval environment's Python")


def run(args) -> int:
    if args.verb == "setup":
        env.setup(Path(args.dir) if args.dir else env.default_dir())
        return 0
    n = env.build_dataset(env.python(args.bfcl_python), Path(args.out))
    print(f"{n} samples -> {args.out}")
    return 0
