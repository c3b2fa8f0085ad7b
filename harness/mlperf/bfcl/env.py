"""The bfcl-eval environment: a venv of its own (bfcl-eval pins numpy, networkx, filelock and tenacity
apart from perfdag's, and imports every model vendor's client), where worker.py runs by path.

Which Python: the one given (`--bfcl-python`), else $PERFDAG_BFCL_PYTHON, else the venv that
`python -m pipeline bfcl setup` makes under ~/.cache/perfdag (XDG_CACHE_HOME respected).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.errors import InputError, MeasurementError

VERSION = "2026.3.23"
ENV_VAR = "PERFDAG_BFCL_PYTHON"
WORKER = Path(__file__).with_name("worker.py")
CONSTRAINTS = Path(__file__).with_name("environment.txt")
#: Seconds for the checker over the whole set (imports take 4-15 s; ~1,000 checks well under a second).
CHECK_TIMEOUT_S = 600


def scores(bench) -> bool:
    """Whether a benchmark's accuracy is BFCL's, judged in this environment (qwen3.6-27b)."""
    return bench.scorer == "qwen3_6_27b"


def default_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "perfdag" / f"bfcl-eval-{VERSION}"


def python(given: str | os.PathLike | None = None, field: str = "--bfcl-python") -> Path:
    """The bfcl-eval environment's Python, or an InputError saying how to make one."""
    if given:
        where, path = field, Path(given)
    elif os.environ.get(ENV_VAR):
        where, path = f"${ENV_VAR}", Path(os.environ[ENV_VAR])
    else:
        where, path = "the default bfcl-eval environment", default_dir() / "bin" / "python"
    path = Path(os.path.abspath(path.expanduser()))  # not resolved: a venv's python is a link out of it
    if not path.is_file():
        raise InputError(f"{where}: no Python at {path}. Scoring BFCL needs bfcl-eval {VERSION} in its own venv: "
                         f"run `python -m pipeline bfcl setup` (or set {ENV_VAR} to a Python that has it)")
    return path


def checked_python(given: str | os.PathLike | None = None, field: str = "--bfcl-python") -> Path:
    """python(), holding bfcl-eval VERSION: what a score keys is what scored it."""
    py = python(given, field)
    got = installed_version(py)
    if got != VERSION:
        raise InputError(f"{py}: has {'no bfcl-eval' if got is None else f'bfcl-eval {got}'}; perfdag scores with {VERSION} (its key says so): "
                         f"run `python -m pipeline bfcl setup`, or point {field} at an environment with {VERSION}")
    return py


def setup(target: Path, *, log=print) -> Path:
    """Make the venv at `target` with bfcl-eval and the versions it was tested with; its Python."""
    py = target / "bin" / "python"
    if py.is_file() and installed_version(py) == VERSION:
        log(f"bfcl-eval {VERSION} is already at {target}")
        return py
    log(f"making {target} (bfcl-eval {VERSION} and its pins, about 2 GB; a few minutes)")
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), f"bfcl-eval=={VERSION}",
                    "soundfile"], check=True)
    got = installed_version(py)
    if got != VERSION:
        raise MeasurementError(f"{target}: has {'no bfcl-eval' if got is None else f'bfcl-eval {got}'} after "
                               f"installing, expected {VERSION}")
    log(f"bfcl-eval {VERSION} ready: {py}")
    return py


def installed_version(py: Path) -> str | None:
    """The bfcl-eval version `py` imports; None where it has none (a venv an install left unfinished)."""
    try:
        return _run([str(py), str(WORKER), "version"], timeout=120).strip()
    except MeasurementError:
        return None


def _run(argv: list[str], *, stdin: str | None = None, timeout: float) -> str:
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MeasurementError(f"{' '.join(argv[:3])}: no answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise MeasurementError(f"{' '.join(argv[:3])} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def build_dataset(py: Path, out: Path) -> int:
    """The 995-row edge-agentic accuracy set at `out` (JSON lines), from bfcl-eval's own data."""
    return int(_run([str(py), str(WORKER), "dataset", "--out", str(out)], timeout=600).strip())


def check(py: Path, jobs: list[dict]) -> list[dict]:
    """bfcl-eval's ast_checker on each job, in one process: [{"valid", "error"}] in order."""
    if not jobs:
        return []
    out = _run([str(py), str(WORKER), "check"], stdin="".join(json.dumps(j) + "\n" for j in jobs),
               timeout=CHECK_TIMEOUT_S)
    verdicts = [json.loads(line) for line in out.splitlines() if line.strip()]
    if len(verdicts) != len(jobs):
        raise MeasurementError(f"bfcl-eval's checker answered {len(verdicts)} of {len(jobs)} samples")
    return verdicts
