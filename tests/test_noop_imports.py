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
