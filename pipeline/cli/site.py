"""`python -m pipeline site --out DIR`: the artifacts root's results as a static site; runs nothing.

Pages: Overview (each configuration's last night, its verdicts with their evidence, regressions first),
Trends (every night per configuration and metric, changes marked), Frontier (tokens/s per GPU, or per
system, against tokens/s per user, the Pareto front per night), Search history, Cost (cost per million
tokens at --price-per-gpu-hour; tokens/s per kW where power was measured) and Runs (every run record).
Each page reads one data file (DIR/data/<page>.json, useful on its own); plotly.js is copied into DIR:
the site opens from disk, with no network. Observations are read verified, as `history` reads them.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from harness.cache.store import ArtifactStore
from tasks.settings import artifacts_root, signing_key


def add_parser(sub) -> None:
    s = sub.add_parser("site", help="the root's nights, frontiers, searches, costs and runs as a static web site "
                                    "(opens from disk); runs nothing", description=__doc__)
    s.add_argument("--out", required=True, metavar="DIR", help="the site's directory (replaced whole)")
    s.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="USD",
                   help="for the Cost page: the price of one GPU-hour (of the system-hour where no GPU serves)")


def run(args) -> int:
    from harness.site.write import build  # plotly (the site's charts) stays off every other command's path

    store = ArtifactStore(artifacts_root(), signing_key=signing_key())
    generated = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    counts = build(store, Path(args.out), args.price_per_gpu_hour, generated)
    print(f"perfdag site: {Path(args.out) / 'index.html'} (" + ", ".join(f"{v} {k}" for k, v in counts.items()) + ")")
    return 0
