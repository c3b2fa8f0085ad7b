"""FillTritonRepo + LaunchServers through luigi against a real tritonserver: reuse, relaunch, stop."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import FAST, REPO, republish, run_luigi, run_records, statuses, tritonservers_under


def servers_of(root):
    return [s for f in (root / "LaunchServers").glob("*/servers.json") for s in json.loads(f.read_text())["servers"]]


def cli(root, *args):
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)



@pytest.fixture
def serve_root(built_fast, tmp_path):
    root = tmp_path / "a"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs", "LaunchServers", "FillTritonRepo"))
    yield root
    cli(root, "servers", "stop", "--all")
    for pid in tritonservers_under(root):  # belt and braces: never leave a server behind
        os.kill(pid, signal.SIGKILL)


def test_launch_reuse_relaunch_and_stop(serve_root):
    from harness.backends.torch.engine import load_torch_engine
    from harness.serving.triton.client import generate

    root = serve_root
    run_luigi("LaunchServers", "--overrides", FAST + ",loadgen.scenario=Server", artifacts=root)
    (srv,) = servers_of(root)
    assert srv["host"] == "127.0.0.1" and srv["models"] == ["tensorrt_llm"]
    assert (root / "LaunchServers").glob(f"*/{srv['log']}")

    # The served model's streamed greedy tokens equal the engine's own single-request greedy output.
    import torch
    engine_dir = next((root / "BuildEngine").glob("*/engine"))
    model, _ = load_torch_engine(engine_dir)
    prompt = [5, 17, 42, 9, 100, 7]
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))[0, len(prompt):].tolist()
    got = generate(f"127.0.0.1:{srv['grpc_port']}", "tensorrt_llm", prompt, max_new_tokens=12, streaming=True)
    assert got == ref[:len(got)] and len(got) >= 1

    # Same key, live server: reused.
    run_luigi("LaunchServers", "--overrides", FAST + ",loadgen.scenario=Server", artifacts=root)
    assert statuses(run_records(root)[-1])["LaunchServers"] == "reused"
    assert servers_of(root)[0]["pid"] == srv["pid"]

    # A server killed behind perfdag's back is seen as not complete and relaunched.
    os.kill(srv["pid"], signal.SIGKILL)
    time.sleep(0.5)
    status = json.loads(cli(root, "status", "--json", "--overrides", FAST + ",loadgen.scenario=Server").stdout)
    assert {r["stage"]: r["status"] for r in status}["LaunchServers"] == "stale"
    run_luigi("LaunchServers", "--overrides", FAST + ",loadgen.scenario=Server", artifacts=root)
    assert statuses(run_records(root)[-1])["LaunchServers"] == "built"
    (new,) = servers_of(root)
    assert new["pid"] != srv["pid"]

    listed = cli(root, "servers", "list")
    assert str(new["pid"]) in listed.stdout and "ready" in listed.stdout
    stopped = cli(root, "servers", "stop", "--overrides", FAST + ",loadgen.scenario=Server")
    assert f"pids {new['pid']}" in stopped.stdout
    assert tritonservers_under(root) == []


def test_port_in_use_is_a_clear_error_and_leaves_no_process(serve_root):
    root = serve_root
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_luigi("LaunchServers", "--overrides", f"{FAST},triton.grpc_ports=[{port}]",
                         artifacts=root, check=False)
    assert proc.returncode != 0
    assert str(port) in proc.stderr and "in use" in proc.stderr
    assert tritonservers_under(root) == []
    assert not [d for d in (root / "LaunchServers").glob("*") if (d / "manifest.json").exists()]


def test_repo_the_server_refuses_gives_log_tail_and_no_orphan(serve_root):
    """An engine directory that cannot load makes the model fail; the error carries the log tail."""
    root = serve_root
    weights = next((root / "BuildEngine").glob("*/engine/weights.safetensors"))
    weights.write_bytes(b"not a safetensors file")  # the served model cannot load this engine ...
    republish(weights.parent.parent)  # ... which was published so (a tampered one would be rebuilt)
    proc = run_luigi("LaunchServers", "--overrides", FAST, artifacts=root, check=False)
    assert proc.returncode != 0
    assert "tensorrt_llm" in proc.stderr and "log" in proc.stderr.lower()
    assert tritonservers_under(root) == []
