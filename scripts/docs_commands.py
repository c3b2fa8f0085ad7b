"""Runs every shell command of README.md and docs/*.md as written, in a fresh clone after the Quick
start, with tiny settings; records what each did.

    .venv/bin/python scripts/docs_commands.py [--out FILE] [--page operations.md] [--keep]

The clone is made from this checkout's HEAD (`git clone`), installed with the README's own Quick
start install, and every command then runs in it in page order, sharing one artifacts root (so a
page's later commands find what its earlier ones built). Stage-building commands (luigi tasks,
`python -m pipeline` commands that take --overrides) get TINY appended to their --overrides: a
20-step model and short LoadGen runs, so the whole run takes minutes, not hours. A command passes
when it exits 0, or with a verdict (10 INVALID, 11 accuracy FAIL, 12 both, 13 a nightly regression:
it ran; tiny settings are not tuned to pass). Commands that cannot run here say why (GPU, a Slurm cluster or luigid host
of your own, a running endpoint, hours of work) and are not run. tests/test_docs_commands.py checks
every command's form and flags in the suite; this runs them, and takes ~30 min on 2 cores.
Results: bench/results/docs_commands-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from test_docs_commands import COMMANDS, Command  # noqa: E402  (the suite's own extraction)

# A search keeps its own probe sizes (Server probes under 459 queries can never pass early stopping,
# so a search over them only walks down); it is cut at 4 probes instead.
TINY = ("model.tiny.train_steps=20,quantize.calib_size=4,loadgen.min_duration_ms=1000,loadgen.min_query_count=16,"
        "search.max_probes=4")
VERDICTS = {0, 10, 11, 12, 13}  # 13: Nightly flagged a regression (tiny runs are often INVALID)
#: pipeline commands whose --overrides shape what they build or read
OVERRIDABLE = {"status", "history", "submission", "search", "frontier", "bench"}
INSTALL = "python3 -m venv .venv && .venv/bin/pip install -c constraints/cpu.txt -e '.[cpu]'"


def why_not(cmd: Command) -> str | None:
    """Why a command is not run here (None: it is)."""
    text = " ".join(cmd.argv)
    page = cmd.where.split(":")[0]
    rules = [
        (page == "docs/gpus.md", "needs a GPU and TensorRT-LLM's environment"),
        (cmd.argv[:3] == ["python3", "-m", "venv"] or "pip" in cmd.argv[0] and "[docs]" not in text,
         "the install: the script ran the Quick start's install"),
        ("luigid" in cmd.argv[0], "starts a long-lived scheduler daemon"),
        ("--scheduler-host" in cmd.argv, "needs a luigid host of your own"),
        ("RangeDailyBase" in text, "runs a nightly per day of a date range"),
        ("--full-size" in text or "params/submission/" in text, "full-size results trees: hours on CPU"),
        ("openai.endpoints=[http://127.0.0.1:8000]" in text, "needs an OpenAI server already running on port 8000"),
        (len(cmd.argv) > 1 and cmd.argv[1].startswith("bench/"), "a benchmark: run it on a quiet host, see Performance"),
        ("pytest" in text, "the suite: CI runs it"),
        ("scripts/docs_commands.py" in text, "this script"),
    ]
    return next((why for hit, why in rules if hit), None)


def shell_line(cmd: Command) -> str | None:
    """The command's line as written when it needs a shell (a pipe, subshell, redirect or ';'), else None."""
    path, _, number = cmd.where.rpartition(":")
    text = (REPO / path).read_text(encoding="utf-8").splitlines()[int(number) - 1].strip()
    if text.endswith("\\"):
        return None
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split, lex.commenters = True, "#"
    return text if {"|", "(", ")", ";", ">", ">>", "<"} & set(lex) else None


def tiny(argv: list[str]) -> list[str]:
    """argv with TINY appended to its --overrides, where it builds or reads stages."""
    name = Path(argv[0]).name
    luigi_task = name == "luigi" and "--module" in argv
    pipeline_cmd = argv[1:3] == ["-m", "pipeline"] and len(argv) > 3 and argv[3] in OVERRIDABLE
    if not (luigi_task or pipeline_cmd):
        return argv
    out = list(argv)
    if "--overrides" in out:
        i = out.index("--overrides") + 1
        out[i] = f"{out[i]},{TINY}"
    else:
        out += ["--overrides", TINY]
    return out


def write(out: str, stamp: str, load: float, results: list[dict], failed: int, finished: bool) -> dict:
    doc = {"started": stamp, "finished": finished,
           "clone_of": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip(),
           "tiny": TINY, "load_at_start": load, "commands": results,
           "ran": sum(r["ran"] for r in results), "failed": failed}
    Path(out).write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / f"docs_commands-{stamp}.json"))
    ap.add_argument("--page", action="append", help="only this page (README.md, operations.md, ...); repeatable")
    ap.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = ap.parse_args()

    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="perfdag-docs-"))
    clone = work / "perfdag"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    t0 = time.monotonic()
    subprocess.run(["bash", "-c", INSTALL], cwd=clone, check=True, stdout=subprocess.DEVNULL)
    print(f"fresh clone {clone}, installed in {time.monotonic() - t0:.0f} s", flush=True)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDAG_", "VIRTUAL_ENV"))}
    results, failed, done_lines = [], 0, set()
    for cmd in COMMANDS:
        page = Path(cmd.where.split(":")[0]).name
        if args.page and page not in args.page:
            continue
        line = shell_line(cmd)
        if line is not None:  # pipes, subshells, redirects: the line as written, through bash, once
            if cmd.where in done_lines:
                continue
            done_lines.add(cmd.where)
            cmd = Command(cmd.where, ["bash", "-c", line])
        row = {"where": cmd.where, "as_written": shlex.join(cmd.argv)}
        skip = why_not(cmd)
        if skip:
            results.append({**row, "ran": False, "why_not": skip})
            print(f"  skip {cmd.where}: {skip}", flush=True)
            continue
        if cmd.argv[0] == "export":
            env.update(a.split("=", 1) for a in cmd.argv[1:] if "=" in a)
            results.append({**row, "ran": True, "rc": 0, "seconds": 0.0})
            continue
        argv = tiny(cmd.argv)
        t = time.monotonic()
        proc = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=1800,
                              stdin=subprocess.DEVNULL)
        took = round(time.monotonic() - t, 1)
        ok = proc.returncode in VERDICTS if argv != cmd.argv else proc.returncode == 0
        failed += not ok
        results.append({**row, "ran": True, "run_as": shlex.join(argv), "rc": proc.returncode, "seconds": took,
                        "ok": ok, **({} if ok else {"tail": (proc.stdout[-1500:] + proc.stderr[-2500:])})})
        print(f"  {'ok  ' if ok else 'FAIL'} {cmd.where} rc={proc.returncode} {took:.0f}s: {shlex.join(cmd.argv)[:100]}",
              flush=True)
        write(args.out, stamp, load, results, failed, finished=False)
    subprocess.run([str(clone / ".venv/bin/python"), "-m", "pipeline", "servers", "stop", "--all"], cwd=clone,
                   env=env, capture_output=True, timeout=300)
    doc = write(args.out, stamp, load, results, failed, finished=True)
    print(f"{doc['ran']} run, {failed} failed, {len(results) - doc['ran']} not run here: {args.out}")
    if args.keep:
        print(f"clone kept: {clone}")
    else:
        subprocess.run(["rm", "-rf", str(work)])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
