"""The DAG run for real with the luigi command line: caching, --rerun-from, crashes and races."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from conftest import FAST, REPO, luigi_cmd, run_luigi, run_records, statuses


def copy_root(src, dst):
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("runs"))
    return dst


def test_first_run_builds_every_stage_with_manifests(built_fast):
    first = run_records(built_fast)[0]
    assert statuses(first) == {"PrepareModel": "built", "Quantize": "built", "BuildEngine": "built"}
    for entry in first["stages"].values():
        m = json.loads((built_fast / entry["stage"] / entry["key"][:16] / "manifest.json").read_text())
        assert m["key"] == entry["key"]
        assert {"params", "tools", "upstream", "resolved_params", "host", "started_at", "finished_at"} <= set(m)
    engine = next((built_fast / "BuildEngine").glob("*/engine/config.json"))
    cfg = json.loads(engine.read_text())
    assert (cfg["max_batch_size"], cfg["max_num_tokens"], cfg["max_seq_len"], cfg["backend"]) == (32, 2048, 256, "torch")
    q = json.loads(next((built_fast / "Quantize").glob("*/manifest.json")).read_text())
    assert 0.0 <= q["quantization"]["greedy_token_agreement"] <= 1.0


def test_second_identical_run_rebuilds_nothing(built_fast, tmp_path):
    root = copy_root(built_fast, tmp_path / "a")
    run_luigi("BuildEngine", "--overrides", FAST, artifacts=root)
    assert set(statuses(run_records(root)[-1]).values()) == {"reused"}


def test_rerun_from_rebuilds_that_stage_and_downstream_only(built_fast, tmp_path):
    root = copy_root(built_fast, tmp_path / "a")
    before = {d.parent.name: d.name for d in root.glob("*/*") if (d / "manifest.json").exists()}
    run_luigi("BuildEngine", "--overrides", FAST, "--rerun-from", "Quantize", artifacts=root)
    assert statuses(run_records(root)[-1]) == {"PrepareModel": "reused", "Quantize": "built", "BuildEngine": "built"}
    after = {d.parent.name: d.name for d in root.glob("*/*") if (d / "manifest.json").exists()}
    assert after == before  # same keys, rebuilt in place


def test_status_says_what_changed(built_fast, tmp_path):
    root = copy_root(built_fast, tmp_path / "a")
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    out = subprocess.run([sys.executable, "-m", "pipeline", "status", "--json", "--overrides",
                          FAST + ",build.max_batch_size=8"], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True)
    rows = {r["stage"]: r for r in json.loads(out.stdout)}
    assert rows["PrepareModel"]["status"] == rows["Quantize"]["status"] == "cached"
    assert rows["BuildEngine"]["status"] == "missing"
    (only,) = rows["BuildEngine"]["changed"]  # compared with the closest cached engine: one field differs
    assert (only["field"], only["cached"], only["now"]) == ("params.build.max_batch_size", 32, 8)
    assert not (root / "BuildEngine" / rows["BuildEngine"]["key"]).exists()


def _start(root, overrides, env_extra):
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root), **env_extra}
    return subprocess.Popen(luigi_cmd("BuildEngine", "--overrides", overrides), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkill_mid_build_leaves_no_artifact_and_no_blocking_lock(built_fast, tmp_path):
    """A build killed mid-way publishes nothing, blocks nobody, and its run.json names the build it died in."""
    root = copy_root(built_fast, tmp_path / "a")
    overrides = FAST + ",build.max_batch_size=7"
    proc = _start(root, overrides, {"PERFDAG_FAULT_SLEEP": "BuildEngine:120"})
    try:
        _wait_for(lambda: any((root / "BuildEngine").glob(".tmp-*/engine/config.json")), 120, "a half-built engine")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    published = [d for d in (root / "BuildEngine").iterdir() if (d / "manifest.json").exists()]
    assert len(published) == 1  # only the FAST engine copied in; the killed build published nothing
    # The killed run's run.json says which build its process died in (a native abort leaves the same).
    killed = run_records(root)[-1]
    assert [e["stage"] for e in killed.get("building", {}).values()] == ["BuildEngine"], killed
    run_luigi("BuildEngine", "--overrides", overrides, artifacts=root, timeout=120)
    assert statuses(run_records(root)[-1])["BuildEngine"] == "built"
    assert not list((root / "BuildEngine").glob(".tmp-*"))  # the dead builder's temp dir is gone


def test_two_processes_build_the_same_engine_once(built_fast, tmp_path):
    root = copy_root(built_fast, tmp_path / "a")
    overrides = FAST + ",build.max_batch_size=9"
    procs = [_start(root, overrides, {"PERFDAG_FAULT_SLEEP": "BuildEngine:4"}) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    engine_status = sorted(statuses(r)["BuildEngine"] for r in run_records(root))
    assert engine_status == ["built", "reused"]
