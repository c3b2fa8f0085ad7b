"""What judging an MBXP Python row twice costs, and what the job-wide memory count costs the sandbox's driver.

    .venv/bin/python bench/sandbox_judges.py [--rows 96] [--workers 2] [--procs 60] [--seconds 5] [--out bench/results]

Needs root (the sandbox's leased uids), like the sandbox tests.
- judges: the mixtral stand-in's MBXP Python rows (their canonical solutions, all passing), repeated
  to --rows, scored by mbxp.score_mbxp as shipped; then the same rows' sandbox jobs run apart: the
  in-process judge alone (what a row cost before the second judge) and the judge outside alone.
  Wall seconds per row for each, on --workers sandboxes at once.
- driver: one sandbox job of --procs idle processes for --seconds, with the job's memory cap on
  (the driver reads every process's /proc/<pid>/status each 50 ms tick) and off
  (Limits(job_memory_bytes=0)); the CPU seconds the job's processes used, the driver nearly alone.
Prints a table and writes the raw figures to --out/sandbox_judges-<utc>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402 - after the path fix

from harness.mlperf.codeexec import mbxp, sandbox  # noqa: E402
from harness.model.corpus import standin_rows  # noqa: E402


def rows(n: int) -> tuple[pd.DataFrame, list[str]]:
    mb = [r for r in standin_rows("mixtral-8x7b") if r["dataset"] == "MBXP"]
    picked = [mb[i % len(mb)] for i in range(n)]
    return pd.DataFrame({"id": [r["id"] for r in picked], "gt_output": [r["gt_output"] for r in picked]}), \
        [r["canonical_solution"] for r in picked]


def timed(fn):
    started = time.monotonic()
    out = fn()
    return out, time.monotonic() - started


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def judges(n: int, workers: int) -> dict:
    frame, texts = rows(n)
    scored, whole = timed(lambda: mbxp.score_mbxp(frame, texts, workers=workers))
    how = [(mbxp.postprocess(t, "python"), test, rid.split("_", 1)[1]) for t, test, rid in
           zip(texts, frame["gt_output"], frame["id"])]
    inside = [mbxp.build_job("python", s, test, ep, mbxp.MLCOMMONS_TIMEOUT_S, sandbox.new_nonce()) for s, test, ep in how]
    outside = [mbxp.outside_job(s, test, ep, mbxp.MLCOMMONS_TIMEOUT_S) for s, test, ep in how]
    _, t_in = timed(lambda: sandbox.run_many(inside, workers=workers))
    _, t_out = timed(lambda: sandbox.run_many(outside, workers=workers))
    return {"rows": n, "workers": workers, "passed": scored["passed"], "disputed": scored["disputed"],
            "score_mbxp_s": whole, "in_process_only_s": t_in, "outside_only_s": t_out}


def driver(procs: int, seconds: float) -> dict:
    src = (f"import ctypes, time\nfor i in range({procs - 1}):\n    if ctypes.CDLL(None).fork() == 0:\n"
           f"        time.sleep({seconds})\n        raise SystemExit\ntime.sleep({seconds})\n")
    out = {}
    for label, cap in (("on", sandbox.Limits().job_memory_bytes), ("off", 0)):
        before = children_cpu()
        res = sandbox.run_program(src, "python", timeout_s=seconds + 10,
                                  limits=sandbox.Limits(job_memory_bytes=cap, nproc=procs + 4))
        out[label] = {"status": res.status, "wall_s": res.wall_s, "cpu_s": children_cpu() - before}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--procs", type=int, default=60)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/sandbox_judges.py: run it as root (the sandbox leases uids)")
    j = judges(args.rows, args.workers)
    d = driver(args.procs, args.seconds)
    print(f"MBXP Python rows: {j['rows']} on {j['workers']} workers ({j['passed']} passed, {j['disputed']} disputed)")
    print(f"{'':32} {'wall s':>8} {'s/row':>8}")
    for label, key in (("score_mbxp (both judges)", "score_mbxp_s"), ("in-process judge alone", "in_process_only_s"),
                       ("outside judge alone", "outside_only_s")):
        print(f"{label:32} {j[key]:8.2f} {j[key] / j['rows']:8.3f}")
    print(f"\ndriver, {args.procs} idle processes for {args.seconds:g} s")
    for label, r in d.items():
        print(f"  memory cap {label:8} {r['status']:8} wall {r['wall_s']:6.2f} s  job CPU {r['cpu_s']:6.3f} s")
    load = os.getloadavg()
    doc = {"when": datetime.now(timezone.utc).isoformat(), "host": platform.node(), "cpus": os.cpu_count(),
           "loadavg": load, "args": vars(args), "judges": j, "driver": d}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"sandbox_judges-{datetime.now(timezone.utc).strftime('%Y-%m-%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(doc, indent=1))
    print(f"\nload average {load[0]:.2f}; raw results: {path}")


if __name__ == "__main__":
    main()
