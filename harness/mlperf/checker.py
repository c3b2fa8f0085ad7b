"""Runs MLCommons' submission checker (from a checkout of mlcommons/inference the user points at;
its code never enters perfdag) on a results tree, and reads its verdict.

    cd <checkout>/tools/submission && python -m submission_checker.main --input <tree> --version vX.Y --csv F

Why the version matters: the checker compares the RNG seeds in the performance logs with the
seeds of the round it checks. LoadGen embeds one round's seeds (6.0.16 and later: v6.1; 6.0.0 to
6.0.15: v6.0), but perfdag sets the seeds of `loadgen.round` explicitly, so `pipeline submission`
checks that round. The checker's argparse default is an older round: perfdag always passes
--version. No luigi.
"""
from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

from harness.errors import InputError
from harness.mlperf.system_desc import git_output

CHECKER_DIR = Path("tools") / "submission"
MODULE = "submission_checker.main"


def checkout_commit(checkout: Path) -> str | None:
    return git_output(checkout, "rev-parse", "HEAD")


def check_checkout(checkout: str | Path) -> Path:
    path = Path(checkout).expanduser().resolve()
    if not (path / CHECKER_DIR / "submission_checker" / "main.py").is_file():
        raise InputError(f"--checker: {path} is not an mlcommons/inference checkout "
                         f"(no {CHECKER_DIR}/submission_checker/main.py); clone "
                         "https://github.com/mlcommons/inference and pass its directory")
    return path


def run_checker(checkout: str | Path, tree: Path, version: str, csv_path: Path, python: str | None = None,
                extra_args: list[str] | None = None, timeout_s: float = 1800) -> dict:
    """The checker's verdict on `tree`: passed (exit 0 and 'looks OK'), its ERROR and WARNING
    lines, the Results/NoResults counts, the CSV rows, the command and the checkout's commit."""
    path = check_checkout(checkout)
    cmd = [python or sys.executable, "-m", MODULE, "--input", str(Path(tree).resolve()), "--version", version,
           "--csv", str(Path(csv_path).resolve()), *(extra_args or [])]
    try:
        proc = subprocess.run(cmd, cwd=path / CHECKER_DIR, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise InputError(f"the checker did not finish within {timeout_s:.0f}s: {' '.join(cmd)}") from None
    text = proc.stdout + proc.stderr
    lines = text.splitlines()
    errors = [_message(ln) for ln in lines if " ERROR]" in ln]
    warnings = [_message(ln) for ln in lines if " WARNING]" in ln]
    crashed = "Traceback (most recent call last)" in text
    counts = {}
    m = re.search(r"Results=(\d+), NoResults=(\d+)", text)
    if m:
        counts = {"results": int(m.group(1)), "no_results": int(m.group(2))}
    rows = []
    if Path(csv_path).is_file():
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
    return {"passed": proc.returncode == 0 and "submission looks OK" in text and not crashed,
            "returncode": proc.returncode, "crashed": crashed, "errors": errors, "warnings": warnings,
            **counts, "rows": rows, "command": f"cd {path / CHECKER_DIR} && " + " ".join(cmd),
            "commit": checkout_commit(path), "version": version,
            "tail": "\n".join(lines[-15:]) if crashed else ""}


def _message(line: str) -> str:
    """A checker log line without its '[time file:line LEVEL]' prefix."""
    return line.split("] ", 1)[1] if "] " in line else line


def summary_lines(verdict: dict) -> list[str]:
    head = (f"MLCommons submission checker {verdict['version']} (commit {(verdict.get('commit') or '?')[:12]}): "
            + ("PASS, no errors" if verdict["passed"] and not verdict["errors"] else
               "PASS with ERROR lines" if verdict["passed"] else "FAIL"))
    out = [head]
    if "results" in verdict:
        out.append(f"  results {verdict['results']}, no results {verdict['no_results']}")
    warned = sorted({re.sub(r" for /\S+", " for <result>", w) for w in verdict["warnings"]})
    out += [f"  ERROR {e}" for e in verdict["errors"][:20]]
    out += [f"  WARNING {w}" for w in warned[:10]]
    if verdict.get("tail"):
        out.append("  " + verdict["tail"].replace("\n", "\n  "))
    return out
