"""A failed stage keeps its evidence: its build directory moves to runs/<id>/failed/<Stage>-<key16>/,
the error names that path (and is never empty), and run.json records the failure. A real luigi run of
a real StageTask whose build fails; no servers needed."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

STAGE = '''
import os
from harness.errors import MeasurementError
from tasks.base import StageTask

class Failing(StageTask):
    stage = "Failing"
    reads = ("model.name",)

    def build(self, out_dir):
        (out_dir / "harness.log").write_text("661 samples completed, then the server went away\\n")
        (out_dir / "mlperf_log_detail.txt").write_text(":::MLLOG partial\\n")
        if os.environ["FAILING_KIND"] == "empty":
            raise ConnectionResetError()  # str() is ''
        raise MeasurementError(f"LoadGen run aborted: ReadError; LoadGen logs (incomplete) and harness.log in {out_dir}")
'''


def run_failing(tmp_path: Path, kind: str) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "failing_stage.py").write_text(STAGE)
    root = tmp_path / "artifacts"
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root), "FAILING_KIND": kind,
           "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    proc = subprocess.run([sys.executable, "-m", "luigi", "--module", "failing_stage", "Failing", "--local-scheduler"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return proc, root


@pytest.mark.parametrize("kind", ["perfdag", "empty"])
def test_a_failed_stage_names_an_existing_directory_holding_its_logs(tmp_path, kind):
    proc, root = run_failing(tmp_path, kind)
    assert proc.returncode != 0
    (run_json,) = root.glob("runs/*/run.json")
    (failure,) = json.loads(run_json.read_text())["failed"].values()
    kept = Path(failure["kept"])
    assert kept.parent == run_json.parent / "failed" and kept.name.startswith("Failing-")
    assert (kept / "harness.log").read_text().startswith("661 samples completed")
    assert (kept / "mlperf_log_detail.txt").is_file()
    assert failure["stage"] == "Failing" and failure["error"].strip()
    named = re.findall(r"(/\S+/failed/Failing-[0-9a-f]{16})", proc.stderr)
    assert named and all(Path(p) == kept for p in named), proc.stderr[-3000:]  # the error names it ...
    assert ".tmp-" not in proc.stderr  # ... and not the temp dir, which no longer exists
    assert not list(root.glob("Failing/*")) or not list(root.glob("Failing/.tmp-*"))
    # Quiet by default: luigi's INFO lines are in the run's luigi.log, not on the terminal.
    assert "INFO:" not in proc.stderr and "Informed scheduler" in (run_json.parent / "luigi.log").read_text()
    if kind == "empty":
        assert failure["error"].startswith("ConnectionResetError: (no message)")
    else:
        assert "Traceback" not in proc.stderr and "LoadGen run aborted" in failure["error"]
