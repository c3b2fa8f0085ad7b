"""The no-op's imports: `import pipeline` (what `luigi --module pipeline FullRun` does before it finds a
fully cached run) loads no heavy library that only a building stage uses. Each of them cost a cached
rerun a share of its wall time (issue 51); the stages import them when they build."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

# numpy: the scorers, log readers, plots and the synthetic generator; httpx: role timings' scraper;
# torch and transformers: the model stages; plotly: the results site (`site`, `Nightly --site`).
FORBIDDEN = ("numpy", "httpx", "torch", "transformers", "plotly")

PROBE = """
import json, sys
import pipeline
from luigi.task_register import Register
print(json.dumps({"loaded": sorted({m.split(".")[0] for m in sys.modules}),
                  "tasks": sorted(Register.task_names())}))
"""


def test_import_pipeline_loads_no_heavy_library():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"FullRun", "RunLoadgen", "CheckAccuracy", "Sweep"} <= set(out["tasks"])  # the DAG is all there
    heavy = sorted(set(FORBIDDEN) & set(out["loaded"]))
    assert not heavy, f"`import pipeline` loads {heavy}: import them where a stage builds, not at module level"


STATUS_PROBE = """
import contextlib, io, json, sys
from pipeline.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main(["status"])
print(json.dumps({"rc": rc, "loaded": sorted({m.split(".")[0] for m in sys.modules}), "out": out.getvalue()}))
"""


def test_status_loads_no_heavy_library(tmp_path):
    """`python -m pipeline status` builds every command's parser; a command's heavy imports (the scorers'
    numpy for `score`) wait for its run, so status pays for none of them."""
    env = {"PATH": "/usr/bin:/bin", "PERFDAG_ARTIFACTS": str(tmp_path / "artifacts")}
    proc = subprocess.run([sys.executable, "-c", STATUS_PROBE], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["rc"] == 0 and "FullRun" in out["out"]
    heavy = sorted(set(FORBIDDEN) & set(out["loaded"]))
    assert not heavy, f"`python -m pipeline status` loads {heavy}: import them in the command's run()"


# --- what the no-op and `status` no longer import (issue 51) ----------------------------------------
FLOW_MODULES = {"pipeline.bench", "pipeline.frontier", "pipeline.nightly", "pipeline.search", "pipeline.submission",
                "pipeline.sweep"}


def _imported(argv: list[str], env: dict) -> tuple[set[str], subprocess.CompletedProcess]:
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    return {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "import time:" in line}, proc


def test_luigi_with_a_stage_root_imports_no_flow(tmp_path):
    """`luigi --module pipeline FullRun` registers the stages and FullRun only: the flows' imports and their
    parameters (luigi builds its command-line parser over every registered task, nine times) are not paid.
    A flow as the root task still finds its class, and so do luigi's help pages."""
    env = {"PATH": "/usr/bin:/bin", "PERFDAG_ARTIFACTS": str(tmp_path / "artifacts")}
    missing = tmp_path / "missing.yaml"  # FullRun fails fast on it, after luigi parsed its command line
    luigi_cmd = ["-m", "luigi", "--module", "pipeline"]
    mods, proc = _imported([*luigi_cmd, "FullRun", "--local-scheduler", "--params-file", str(missing)], env)
    assert "missing.yaml" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert "pipeline.full_run" in mods and not FLOW_MODULES & mods, sorted(FLOW_MODULES & mods)

    mods, proc = _imported([*luigi_cmd, "Sweep", "--local-scheduler", "--help"], env)
    assert proc.returncode == 0 and "--sweep" in proc.stdout, proc.stderr[-2000:]
    assert FLOW_MODULES <= mods
    mods, proc = _imported([*luigi_cmd, "FullRun", "--local-scheduler", "--help-all"], env)
    assert proc.returncode == 0 and "--Sweep-sweep" in proc.stdout and FLOW_MODULES <= mods


def test_status_imports_its_own_command_only(tmp_path):
    """`python -m pipeline status` imports pipeline/cli/status.py and no other command's module, nor a flow."""
    env = {"PATH": "/usr/bin:/bin", "PERFDAG_ARTIFACTS": str(tmp_path / "artifacts")}
    mods, proc = _imported(["-m", "pipeline", "status"], env)
    assert proc.returncode == 0 and "FullRun" in proc.stdout, proc.stderr[-2000:]
    assert {m for m in mods if m.startswith("pipeline.cli.")} == {"pipeline.cli.status"}
    assert not FLOW_MODULES & mods, sorted(FLOW_MODULES & mods)


def test_the_root_task_is_read_only_where_certain():
    from pipeline.flows import luigi_root, needed

    luigi = "/r/.venv/bin/luigi"
    assert luigi_root([luigi, "--module", "pipeline", "FullRun", "--local-scheduler", "--overrides", "a=1"]) == "FullRun"
    assert luigi_root(["/r/lib/luigi/__main__.py", "--module=pipeline", "--local-scheduler", "RunLoadgen"]) == "RunLoadgen"
    # a flag that may take a value before the root, another module, help, or not luigi: uncertain
    assert luigi_root([luigi, "--module", "pipeline", "--workers", "2", "FullRun"]) is None
    assert luigi_root([luigi, "--module", "other", "FullRun"]) is None
    assert luigi_root([luigi, "--module", "pipeline", "FullRun", "--help"]) is None
    assert luigi_root(["/usr/bin/pytest", "--module", "pipeline", "FullRun"]) is None
    stages = {"FullRun", "RunLoadgen"}
    assert not needed([luigi, "--module", "pipeline", "FullRun"], stages)
    assert needed([luigi, "--module", "pipeline", "Sweep"], stages)
    assert needed([luigi, "--module", "pipeline", "RangeDailyBase", "--of", "Nightly"], stages)
    assert needed(["-c"], stages) and not needed(["-m"], stages)  # python -c / python -m pipeline
