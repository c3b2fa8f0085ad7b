"""Operating perfdag: a sweep on a real luigid with two workers, and nightly regression checks."""
from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from conftest import REPO, SHORT, copied_root, run_luigi, run_records, statuses, tritonservers_under


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



@pytest.fixture
def root(built_default, tmp_path):
    with copied_root(built_default, tmp_path / "artifacts") as r:
        yield r


@pytest.fixture
def luigid(tmp_path):
    """A real central scheduler on a free port, stopped by its pid."""
    port = free_port()
    luigid_bin = shutil.which("luigid", path=os.path.dirname(sys.executable)) or "luigid"
    (tmp_path / "luigid-logs").mkdir()
    proc = subprocess.Popen([luigid_bin, "--port", str(port), "--address", "127.0.0.1",
                             "--logdir", str(tmp_path / "luigid-logs"), "--state-path", str(tmp_path / "luigid.state")],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError("luigid did not start")
    yield port
    proc.terminate()
    proc.wait(20)


def write_sweep(tmp_path, grid: dict, name="small") -> str:
    f = tmp_path / f"{name}.yaml"
    lines = [f"name: {name}", f"base: {REPO / 'params' / 'default.yaml'}", f'overrides: "{SHORT}"', "grid:"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in grid.items()]
    f.write_text("\n".join(lines) + "\n")
    return str(f)


def test_sweep_on_luigid_with_two_workers_builds_shared_stages_once(root, luigid, tmp_path):
    sweep = write_sweep(tmp_path, {"build.max_batch_size": [16, 32], "loadgen.min_duration_ms": [1000, 1500]})
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    cmd = [sys.executable, "-m", "luigi", "--module", "pipeline", "Sweep", "--sweep", sweep,
           "--scheduler-host", "127.0.0.1", "--scheduler-port", str(luigid), "--workers", "1"]
    workers = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for _ in range(2)]
    outs = [w.communicate(timeout=900)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(o[-3000:] for o in outs)
    # The terminal: one line per point as it finishes, the sweep's table at the end, no luigi INFO.
    text = "\n".join(outs)
    assert sum(f"sweep point {i}/4 " in text for i in range(1, 5)) == 4, text[-3000:]
    assert "perfdag Sweep small: 4 point(s)" in text and "INFO:" not in text

    built: dict[str, int] = {}
    for run in run_records(root):
        for entry_id, e in run["stages"].items():
            if e["status"] == "built":
                built[entry_id] = built.get(entry_id, 0) + 1
    assert built and max(built.values()) == 1, built  # nothing was built twice
    per_stage: dict[str, int] = {}
    for entry_id in built:
        per_stage[entry_id.split("/")[0]] = per_stage.get(entry_id.split("/")[0], 0) + 1
    # The copied root already holds the default (batch 32) engine: one new engine (batch 16), a repo
    # and servers per batch size, one dataset (64 samples), a measurement per point, one sweep.
    assert per_stage == {"PrepareDataset": 1, "BuildEngine": 1, "FillTritonRepo": 2, "LaunchServers": 2,
                         "RunAccuracy": 2, "CheckAccuracy": 2, "RunLoadgen": 4, "FullRun": 4, "Sweep": 1}
    both = [json.loads(f.read_text()) for f in (root / "runs").glob("*/run.json")]
    assert len({r["run_id"] for r in both}) >= 2  # both workers took part

    (out,) = [d for d in (root / "Sweep").iterdir() if not d.name.startswith(".")]
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert sorted((r["build.max_batch_size"], r["loadgen.min_duration_ms"]) for r in rows) == \
        [("16", "1000"), ("16", "1500"), ("32", "1000"), ("32", "1500")]
    assert all(float(r["tokens_per_s"]) > 0 for r in rows)
    assert (out / "sweep.md").is_file() and json.loads((out / "sweep.json").read_text())["varied"]
    assert (out / "tokens_per_s_vs_build_max_batch_size.png").stat().st_size > 1000
    assert (out / "tokens_per_s_vs_loadgen_min_duration_ms.png").is_file()
    assert tritonservers_under(root) == []  # the sweep stopped its points' servers


def test_nightly_reuses_engines_remeasures_and_flags_a_regression(root, tmp_path):
    sweep = write_sweep(tmp_path, {"build.max_batch_size": [32]}, name="nightly")
    run_luigi("Nightly", "--date", "2026-11-01", "--sweep", sweep, artifacts=root)
    first = json.loads((root / "Nightly" / "nightly" / "2026-11-01" / "nightly.json").read_text())
    assert first["compared_with"] is None and first["regressions"] == []

    # Night two, with a regression injected through the params: far too low an Offline QPS.
    proc = run_luigi("Nightly", "--date", "2026-11-02", "--sweep", sweep, "--overrides",
                     "loadgen.offline_expected_qps=10", artifacts=root, check=False)
    assert proc.returncode != 0
    night = statuses(run_records(root)[-1])
    assert night["FillTritonRepo"] == "reused"  # the repo (and so the engine under it) is reused ...
    assert not {s for s, st in night.items() if st == "built"} & {"PrepareModel", "Quantize", "BuildEngine"}
    assert night["RunLoadgen"] == "built" and night["CheckAccuracy"] == "built"  # ... and measured afresh
    second = json.loads((root / "Nightly" / "nightly" / "2026-11-02" / "nightly.json").read_text())
    assert second["compared_with"] == "2026-11-01"
    (reg,) = second["regressions"]
    assert any("INVALID" in r or "tokens/s fell" in r for r in reg["reasons"])
    md = (root / "Nightly" / "nightly" / "2026-11-02" / "nightly.md").read_text()
    assert "regression" in md.lower()
    (changed,) = [line for line in md.splitlines() if line.startswith("changed since 2026-11-01: ")]
    assert "`loadgen.offline_expected_qps` " in changed and " -> 10" in changed, md  # the change, named
    assert "regression(s) on 2026-11-02 vs 2026-11-01" in proc.stderr and "Traceback" not in proc.stderr
    (row,) = second["rows"]  # the night names the observation its numbers come from, as compare takes it
    assert f"measured by `{row['fullrun_key']}@{row['observation']}`" in md
    diff = subprocess.run([sys.executable, "-m", "pipeline", "compare", f"{first['rows'][0]['fullrun_key']}@"
                           f"{first['rows'][0]['observation']}", f"{row['fullrun_key']}@{row['observation']}"],
                          cwd=REPO, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout + diff.stderr
