"""`python -m pipeline status`: every stage's key, cached or missing, and why (like `dvc status`)."""
from __future__ import annotations

import json

from pipeline.status import print_status, stage_status
from tasks.settings import DEFAULT_PARAMS


def add_parser(sub) -> None:
    st = sub.add_parser("status", help="print every stage's key and whether it is cached; runs nothing")
    st.add_argument("--params-file", default=DEFAULT_PARAMS)
    st.add_argument("--overrides", default="")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--full", action="store_true", help="every differing field in full (default: a few lines per stage)")
    st.add_argument("--verify", action="store_true",
                    help="re-hash every published file (default: size and mtime, re-hash what moved)")


def run(args) -> int:
    rows = stage_status(args.params_file, args.overrides, verify=args.verify)
    print(json.dumps(rows, indent=2, default=str)) if args.json else print_status(rows, args.full)
    return 0
