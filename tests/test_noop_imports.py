"""The no-op's imports: `import pipeline` (what `luigi --module pipeline FullRun` does before it finds a
fully cached run) loads no heavy library that only a building stage uses. Each of them cost a cached
rerun a share of its wall time (issue 51); the stages import them when they build."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

# numpy: the scorers, log readers, plots and the synthetic generator; httpx: role timings' scraper;
# torch and transformers: the model stages.
FORBIDDEN = ("numpy", "httpx", "torch", "transformers")

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
