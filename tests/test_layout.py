"""The house rules of the code layout: no import cycle, no import side effects, harness free of
luigi, one tensor contract, no backend branching in tasks, modules small or saying why not."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_import_tasks_works_by_itself():
    proc = _run("import tasks; print(sorted(tasks.STAGES))")
    assert proc.returncode == 0, proc.stderr
    assert "BuildEngine" in proc.stdout


def test_importing_pipeline_changes_no_global_state():
    code = (
        "import atexit, logging, os, signal, sys\n"
        "import luigi, luigi.configuration, pydantic, yaml, filelock  # third-party import effects are theirs\n"
        "env = dict(os.environ); sig = signal.getsignal(signal.SIGINT)\n"
        "n_atexit = atexit._ncallbacks()\n"
        "loggers = {n: (list(l.filters), list(l.handlers), l.propagate) for n, l in logging.root.manager.loggerDict.items()"
        " if isinstance(l, logging.Logger)}\n"
        "import pipeline, pipeline.__main__, pipeline.cli, pipeline.status, harness.gc.collect\n"
        "assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())\n"
        "assert signal.getsignal(signal.SIGINT) is sig\n"
        "assert atexit._ncallbacks() == n_atexit\n"
        "for n, (f, h, p) in loggers.items():\n"
        "    l = logging.getLogger(n); assert (list(l.filters), list(l.handlers), l.propagate) == (f, h, p), n\n"
        "for n in ('perfdag', 'luigi-interface'):\n"
        "    l = logging.getLogger(n); assert not l.filters and not l.handlers or n in loggers, n\n"
        "print('ok')\n")
    proc = _run(code)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


def _imports(path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def test_harness_does_not_import_luigi_and_tasks_do_not_import_pipeline():
    for f in (REPO / "harness").rglob("*.py"):
        assert not any(m == "luigi" or m.startswith("luigi.") for m in _imports(f)), f
    for f in (REPO / "tasks").rglob("*.py"):
        assert not any(m == "pipeline" or m.startswith("pipeline.") for m in _imports(f)), f


def test_tasks_never_branch_on_the_backend_name():
    for d in ("tasks", "pipeline", "harness/config"):
        for f in (REPO / d).rglob("*.py"):
            text = f.read_text()
            assert "backend ==" not in text and "backend !=" not in text, f


def test_one_tensor_contract():
    """Only harness/serving/triton/contract.py spells the contract's input table."""
    hits = [f for f in (REPO / "harness").rglob("*.py")
            if '"request_output_len", "TYPE_INT32"' in f.read_text()]
    assert [h.relative_to(REPO).as_posix() for h in hits] == ["harness/serving/triton/contract.py"]


def test_no_module_over_400_lines_without_a_reason():
    long = []
    for d in ("harness", "tasks", "pipeline"):
        for f in (REPO / d).rglob("*.py"):
            lines = f.read_text().splitlines()
            doc = ast.get_docstring(ast.parse("\n".join(lines))) or ""
            if len(lines) > 400 and "over 400 lines" not in doc.lower():
                long.append(f"{f.relative_to(REPO)} ({len(lines)} lines)")
    assert not long, long


def _imported(argv: list[str], env: dict) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    return {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "import time:" in line}


def test_status_imports_no_torch(tmp_path):
    import os
    mods = _imported(["-m", "pipeline", "status"], {**os.environ, "PERFDAG_ARTIFACTS": str(tmp_path)})
    assert "pipeline.cli.status" in mods
    assert not {m for m in mods if m.split(".")[0] in ("torch", "transformers", "modelopt", "matplotlib")}


def test_import_contracts_hold():
    """The architecture declared in pyproject.toml ([tool.importlinter]) holds: pipeline above tasks above
    harness, harness without luigi, harness's packages in layers, and no import circles anywhere."""
    proc = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
