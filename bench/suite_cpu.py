"""Where the test suite's CPU goes, by kind of process: BSD process accounting (exact CPU of every
process that exits) joined with each process's command line (sampled from /proc every 0.2 s).

Needs root and the `acct` tools (`accton`, `dump-acct`; Debian's `acct` package). Accounting is
machine-wide: run it on an otherwise idle machine.

    .venv/bin/python bench/suite_cpu.py                      # the README's test command (pytest -q)
    .venv/bin/python bench/suite_cpu.py -- tests/test_fullrun.py -n 0

Raw results: bench/results/suite_cpu-<UTC time>.json (every process: pid, command, CPU seconds) and
the printed table.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"

# First match wins: the server processes first, then perfdag's own entry points, then the test runner.
KINDS = [
    ("Triton Python-backend stub (the served model)", r"triton_python_backend_stub"),
    ("tritonserver", r"(^|/)tritonserver(\s|$)"),  # the executable, not a directory of that name
    ("transformers serve", r"transformers serve|bin/transformers\b"),
    ("LoadGen frontend (multiprocessing spawn)", r"multiprocessing\.spawn"),
    ("LoadGen driver", r"harness\.loadgen\.driver"),
    ("multiprocessing resource tracker", r"resource_tracker"),
    ("luigi command line (stages run in it)", r"-m luigi\b|bin/luigi "),
    ("perfdag command line: status", r"-m pipeline status\b"),
    ("perfdag command line: other commands", r"-m pipeline\b"),
    ("stage run in a Slurm job", r"tasks\.slurm\.entry"),
    ("echo servers", r"harness\.serving\.testing\."),
    ("code sandbox", r"_sandbox_init|bwrap|sandbox"),
    ("Slurm daemons and commands", r"\b(slurmd|slurmctld|slurmstepd|srun|sbatch|squeue|scontrol|sacct|scancel)\b"),
    ("pytest and its workers", r"pytest|execnet|exec\(eval\(sys\.stdin"),
]


def kind_of(cmd: str, comm: str) -> str:
    return next((k for k, rx in KINDS if re.search(rx, cmd)), f"other ({comm})")


def sample_cmdlines(seen: dict[int, str], stop: threading.Event) -> None:
    """pid -> command line, for every process alive at some sample (a pid reused later keeps its
    first command: rare within one run)."""
    while not stop.is_set():
        for p in psutil.process_iter():
            if p.pid in seen:
                continue
            with contextlib.suppress(psutil.Error):
                if cmd := " ".join(p.cmdline()):
                    seen[p.pid] = cmd
        stop.wait(0.2)


def accounted(pacct: Path) -> list[dict]:
    """Every process record: comm, CPU seconds (user + system), pid (dump-acct's v3 columns)."""
    out = subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) >= 11 and f[1] == "v3":
            rows.append({"comm": f[0], "cpu_s": (float(f[2]) + float(f[3])) / 100.0, "pid": int(f[9])})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pytest_args", nargs="*", help="arguments for pytest after --")
    ap.add_argument("--out", default="", help="results file (default bench/results/suite_cpu-<time>.json)")
    args = ap.parse_args()
    missing = [t for t in ("accton", "dump-acct") if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        print(f"error: needs root and the acct tools ({', '.join(missing) or 'present'}; as root: "
              "apt-get install acct)", file=sys.stderr)
        return 2
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    load = os.getloadavg()
    seen: dict[int, str] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample_cmdlines, args=(seen, stop), daemon=True)
    with tempfile.TemporaryDirectory(prefix="suite_cpu_") as tmp:
        pacct = Path(tmp) / "pacct"
        pacct.touch()
        subprocess.run(["accton", str(pacct)], check=True, capture_output=True)
        sampler.start()
        t0 = time.monotonic()
        try:
            rc = subprocess.run([sys.executable, "-m", "pytest", "-q", *args.pytest_args], cwd=REPO).returncode
        finally:
            wall = time.monotonic() - t0
            subprocess.run(["accton", "off"], capture_output=True)
            stop.set()
            sampler.join()
        rows = accounted(pacct)
    for r in rows:
        r["cmd"] = seen.get(r["pid"], "")[:400]
        r["kind"] = kind_of(r["cmd"], r["comm"])
    total = sum(r["cpu_s"] for r in rows)
    kinds = collections.defaultdict(list)
    for r in rows:
        kinds[r["kind"]].append(r["cpu_s"])
    doc = {"started": started, "load_at_start": load, "cpus": os.cpu_count(), "pytest_args": args.pytest_args,
           "pytest_rc": rc, "wall_s": round(wall, 1), "cpu_s": round(total, 1), "processes": rows}
    out = Path(args.out) if args.out else RESULTS / f"suite_cpu-{started}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=0))
    print(f"\npytest exit {rc}; wall {wall:.0f} s; {total:.0f} CPU-s in {len(rows)} processes; "
          f"{os.cpu_count()} CPUs; load at start {load[0]:.2f}\n")
    print("| kind of process | CPU-s | share | processes | median CPU-s each |")
    print("|---|---|---|---|---|")
    for kind, cpus in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
        if sum(cpus) >= 1:
            cpus.sort()
            print(f"| {kind} | {sum(cpus):.0f} | {100 * sum(cpus) / total:.1f}% | {len(cpus)} | {cpus[len(cpus) // 2]:.2f} |")
    print(f"\nraw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
