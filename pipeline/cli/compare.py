"""`python -m pipeline compare RUN_OR_REPORT RUN_OR_REPORT`: two FullRuns side by side.

Each argument is a report (report.json or its FullRun directory), a FullRun key (its first
characters will do), or a run id under artifacts/runs/ whose run touched one FullRun.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.errors import InputError
from harness.reports.compare import compare, load, render
from tasks.settings import artifacts_root


def add_parser(sub) -> None:
    c = sub.add_parser("compare", help="two runs side by side: metrics and the parameters that differ; runs nothing",
                       description=__doc__)
    c.add_argument("a", metavar="RUN_OR_REPORT")
    c.add_argument("b", metavar="RUN_OR_REPORT")
    c.add_argument("--json", action="store_true", help="machine-readable output")


def resolve(arg: str, root: Path) -> Path:
    p = Path(arg)
    if p.is_file() and p.name == "report.json":
        return p.parent
    if p.is_dir() and (p / "report.json").is_file():
        return p
    run = root / "runs" / arg / "run.json"
    if run.is_file():
        stages = json.loads(run.read_text()).get("stages") or {}
        fullruns = sorted({e["key"][:16] for e in stages.values() if e.get("stage") == "FullRun"})
        if len(fullruns) != 1:
            raise InputError(f"run {arg} touched {len(fullruns)} FullRuns ({', '.join(fullruns) or 'none'}); "
                             "name one by its key or report")
        return root / "FullRun" / fullruns[0]
    matches = sorted(d for d in (root / "FullRun").glob(f"{arg}*") if (d / "report.json").is_file()) \
        if arg and not any(c in arg for c in "/*?[") else []
    if len(matches) == 1:
        return matches[0]
    raise InputError(f"{arg!r}: not a report.json, a FullRun directory, a FullRun key or a run id under {root / 'runs'}"
                     + (f" ({len(matches)} FullRuns start with it)" if matches else ""))


def command(args) -> int:
    root = artifacts_root()
    doc = compare(load(resolve(args.a, root)), load(resolve(args.b, root)))
    print(json.dumps(doc, indent=2, default=str) if args.json else render(doc))
    return 0
