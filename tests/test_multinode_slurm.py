"""Serving layouts over two nodes of a real Slurm on this host (scripts/slurm-local.sh with
PERFDAG_SLURM_NODES=2: two slurmd, each its own node). Where the cluster cannot start (not root, apt
cannot install it, a daemon does not come up) the tests skip and say why."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from conftest import FAST, REPO, copied_root, local_slurm, run_luigi, run_records
from test_slurm import SHORT, SLURM, assert_nothing_left, job_state, jobs

from harness.serving.launcher import gone_servers, servers_live
from harness.serving.processes import processes_with_token
from harness.slurm import job_lines


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory):
    """SLURM_CONF of a running two-node cluster (nodes <host>-n0, <host>-n1); stopped (by pid) after."""
    yield from local_slurm(tmp_path_factory, "slurm2", nodes=2)


def node_names() -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30)
    return sorted(set(out.stdout.split()))


def running(token: str, program: str, words: int | None = None) -> list[int]:
    """The live processes of a launch token whose command line (its first `words` words) names
    `program`; one that exits while we look is left out (a zombie has no cmdline)."""
    pids = []
    for pid in processes_with_token(token):
        try:
            cmd = " ".join(psutil.Process(pid).cmdline()[:words])
        except psutil.Error:
            continue
        if program in cmd:
            pids.append(pid)
    return pids


def sigkill(pid: int) -> None:
    """SIGKILL a process that may have ended since it was found: killing one of a token's processes
    (the server) can end another (the srun step running it) before its turn; seen once on 4 xdist workers."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def kill_instances(root: Path, job_id: str, chosen, program: str) -> list[int]:
    """SIGKILLs the processes running `program` of the recorded instances in allocation `job_id` that
    `chosen(record)` picks (found by their launch token); returns their pids."""
    killed = []
    for f in root.glob("LaunchServers/*/servers.json"):
        for rec in json.loads(f.read_text())["servers"]:
            if str(rec.get("slurm_job")) != job_id or not chosen(rec):
                continue
            for pid in running(rec["token"], program, words=3):
                sigkill(pid)
                killed.append(pid)
    return killed


def test_two_slurm_nodes_run_on_one_host(cluster2):
    """slurm-local.sh with PERFDAG_SLURM_NODES=2 gives two idle nodes, and a two-node step runs once on each."""
    names = node_names()
    assert len(names) == 2
    out = subprocess.run(["srun", "-N2", "-n2", "bash", "-c", "echo $SLURMD_NODENAME"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == names


def test_a_fullrun_whose_data_parallel_servers_run_on_two_nodes(cluster2, built_fast, tmp_path):
    """A FullRun whose two data-parallel tritonservers run on two Slurm nodes of one allocation (the second
    through `srun --overlap --nodelist`), is measured VALID over both, and leaves no job or process."""
    layout = "layout.nodes=2,layout.roles.server.count=2,layout.roles.server.gpus_per_instance=0"
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        proc = run_luigi("FullRun", "--overrides", f"{FAST}{SHORT},{SLURM},slurm.stages=[],{layout}",
                         artifacts=root, check=False, timeout=900)
        assert proc.returncode == 0, f"FullRun failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
        (alloc,) = jobs(root, "allocation")
        (servers_json,) = root.glob("LaunchServers/*/servers.json")
        records = json.loads(servers_json.read_text())["servers"]
        assert [r.get("role") for r in records] == ["server", "server"]
        n0, n1 = node_names()
        assert [r["instance_node"] for r in records] == [n0, n1]  # one server per node
        assert "srun" not in records[0]["cmd"] and f"--nodelist={n1}" in records[1]["cmd"]
        (result,) = root.glob("RunLoadgen/*/result.json")
        res = json.loads(result.read_text())
        assert res["valid"] == "VALID", res
        # the clients spread over both servers, and result.json and the report name the layout
        served = {s["endpoint"]: s["completed"] for s in res["harness"]["per_server"]}
        assert set(served) == {f"{r['host']}:{r['port']}" for r in records} and min(served.values()) > 0, served
        assert res["layout"]["kind"] == "data-parallel" and res["layout"]["nodes"] == [n0, n1]
        (report,) = root.glob("FullRun/*/report.md")
        assert f"| server | 2 | {n0}, {n1} |" in report.read_text()
        assert job_state(alloc["job_id"]) == "CANCELLED"
        assert_nothing_left(root)


def test_a_disaggregated_layout_launches_in_order_measures_through_its_router_and_names_a_dead_worker(
        cluster2, tmp_path):
    """Echo context and generation workers on two nodes and the echo router, launched in one allocation in
    dependency order (workers ready before the router starts), answer through the router using both roles;
    killing the generation instance on the second node marks the layout dead, naming role and node; scancel
    leaves nothing."""
    out = tmp_path / "layout"
    out.mkdir()
    job = subprocess.run(["sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--mem=500M",
                          f"--output={out / 'job.log'}", f"--chdir={REPO}",
                          f"--wrap=PYTHONPATH={REPO} exec {sys.executable} tests/multinode_layout_job.py {out}"],
                         capture_output=True, text=True, timeout=60)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 180
        while not (out / "records.json").exists():
            assert time.monotonic() < deadline, (out / "job.log").read_text(errors="replace")
            time.sleep(0.5)
        doc = json.loads((out / "records.json").read_text())
        recs, events = doc["records"], doc["events"]
        n0, n1 = node_names()
        by_role = {r["role"]: r for r in recs}
        assert set(by_role) == {"context", "generation", "router"}
        assert by_role["context"]["instance_node"] == n0 and by_role["generation"]["instance_node"] == n1
        assert "srun" not in by_role["context"]["cmd"] and f"--nodelist={n1}" in by_role["generation"]["cmd"]
        ready = [t for t, line in events if " ready and warm " in line and not line.startswith("router")]
        started = [t for t, line in events if line.startswith("router ") and " pid " in line]
        assert len(ready) == 2 and started and max(ready) <= started[0]  # workers ready before the router starts
        router = f"http://{by_role['router']['host']}:{by_role['router']['port']}"
        for k in range(8):
            r = httpx.post(f"{router}/v1/completions", json={"prompt": [7, k], "max_tokens": 6,
                                                              "return_token_ids": True}, timeout=30)
            assert r.status_code == 200 and r.json()["choices"][0]["token_ids"] == [8, k + 1] * 3
        stats = httpx.get(f"{router}/stats", timeout=10).json()
        assert stats["context"] >= 8 and stats["generation"] >= 8  # (+ the warm-up request)
        assert servers_live(recs)
        gen = by_role["generation"]
        killed = running(gen["token"], "echo_openai")
        assert killed
        for pid in killed:
            sigkill(pid)
        deadline = time.monotonic() + 30
        while servers_live(recs) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not servers_live(recs)
        gone = gone_servers(recs, out)
        assert len(gone) == 1 and gone[0].startswith(f"generation 1 on {n1} ") and gone[0].endswith(" is gone")
        r = httpx.post(f"{router}/v1/completions", json={"prompt": [1], "max_tokens": 2}, timeout=30)
        assert r.status_code == 502 and "generation worker" in r.text
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    assert job_state(job_id) in ("CANCELLED", "COMPLETED")
    tokens = {r["token"] for r in recs}
    deadline = time.monotonic() + 30
    while any(processes_with_token(t) for t in tokens) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(processes_with_token(t) for t in tokens), "an instance outlived its allocation"


def test_a_server_killed_on_the_second_node_mid_measurement_is_relaunched(cluster2, built_fast, tmp_path):
    """The tritonserver on the second node killed while a step measures: the layout counts as dead (its srun
    step ends with it), the worker ends that allocation, relaunches the whole layout in a new one on both
    nodes and measures again; nothing is left."""
    from test_slurm import Worker

    layout = "layout.nodes=2,layout.roles.server.count=2,layout.roles.server.gpus_per_instance=0"
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        overrides = (f"{FAST}{SHORT},{SLURM},slurm.stages=[],{layout},loadgen.min_query_count=19,"
                     "loadgen.min_duration_ms=4000")
        held = Worker(root, "RunLoadgen", overrides)
        step = held.wait_job_log("RunLoadgen ", timeout=400)
        job_id = step["job_id"].split("/")[0]
        killed = kill_instances(root, job_id, lambda rec: rec.get("instance_node") == node_names()[1], "tritonserver")
        assert killed, "no tritonserver of the second node found"
        rc = held.finish(timeout=600)
        out = held.text()
        assert rc in (0, 10), out[-3000:]
        assert f"the servers in Slurm allocation {job_id} stopped answering mid-measurement" in out, out[-3000:]
        again = jobs(root, "allocation")[-1]
        assert again["job_id"] != job_id and job_state(again["job_id"]) == "CANCELLED"
        assert (root / "RunLoadgen" / step["key"][:16] / "manifest.json").is_file()
        assert_nothing_left(root)


@pytest.mark.parametrize("fault", ["scancel", "sigterm"])
def test_a_two_node_layout_ended_mid_measurement_leaves_nothing_on_either_node(fault, cluster2, built_fast, tmp_path):
    """Data-parallel tritonservers on two nodes, the measurement held in its step: scancel of the allocation
    fails the run naming the job; SIGTERM of the worker cancels the allocation (exit 130). Either way no
    job, server or stub is left on either node."""
    from test_slurm import Worker

    layout = "layout.nodes=2,layout.roles.server.count=2,layout.roles.server.gpus_per_instance=0"
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        held = Worker(root, "RunLoadgen", f"{FAST}{SHORT},{SLURM},slurm.stages=[],{layout}",
                      env={"PERFDAG_FAULT_SLEEP": "RunLoadgen:300"})
        step = held.wait_job_log("fault hook: holding", timeout=400)
        job_id = step["job_id"].split("/")[0]
        records = json.loads(next(root.glob("LaunchServers/*/servers.json")).read_text())["servers"]
        assert sorted(r["instance_node"] for r in records) == node_names()  # up on both nodes
        if fault == "scancel":
            subprocess.run(["scancel", job_id], check=True, timeout=30)
            rc = held.finish()
            assert rc != 0 and f"Slurm job {job_id} on " in held.text(), held.text()[-3000:]
        else:
            held.proc.send_signal(signal.SIGTERM)
            assert held.finish(60) == 130
        assert job_state(job_id) == "CANCELLED"
        assert not list(root.glob(f"RunLoadgen/{step['key'][:16]}/manifest.json"))
        assert_nothing_left(root)
        assert not any(processes_with_token(r["token"]) for r in records), "an instance outlived its allocation"


def _stack_stand_ins(bin_dir: Path) -> dict:
    """`vllm`, `vllm-router`, `trtllm-serve` and `trtllm-llmapi-launch` programs that start the echo server and router on what
    perfdag's rendered command lines name (harness/serving/testing/echo_stack.py: only the GPU-only
    programs are replaced); returns the environment that puts them first on PATH."""
    bin_dir.mkdir()
    for name in ("vllm", "vllm-router", "trtllm-serve", "trtllm-llmapi-launch"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec {sys.executable} -m harness.serving.testing.echo_stack {name} "$@"\n')
        script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


DISAGG = ("quantize.format=none,build.backend=openai,build.device=cuda,layout.nodes=2,"
          "layout.roles.context.count=1,layout.roles.context.gpus_per_instance=0,"
          "layout.roles.generation.count=1,layout.roles.generation.gpus_per_instance=0,"
          "layout.roles.router.count=1,layout.roles.router.gpus_per_instance=0")


@pytest.mark.parametrize("stack", ["vllm", "trtllm-serve"])
def test_a_disaggregated_layout_is_launched_over_two_nodes_and_measured_through_its_router(
        stack, cluster2, built_fast, tmp_path):
    """openai.server=vllm (trtllm-serve) with context and generation workers on two nodes and vllm-router
    (`trtllm-serve disaggregated` and its config file) in front: perfdag renders each command line and
    config, launches the workers (node 2's through `srun --overlap`), then the router, and LoadGen measures
    through the router only, VALID; every role was used, and each role's timings were read from its workers'
    own metrics (vLLM's /metrics, trtllm-serve's /perf_metrics); nothing is left afterwards."""
    env = _stack_stand_ins(tmp_path / "bin")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        perf = (",openai.llm_api_options={return_perf_metrics: true, perf_metrics_max_requests: 100000}"
                if stack == "trtllm-serve" else "")  # its per-request timings are served when asked for
        overrides = (f"{FAST}{SHORT},{SLURM},slurm.stages=[],{DISAGG},openai.server={stack},"
                     f"openai.binary={tmp_path / 'bin' / stack},"
                     f"loadgen.offline_expected_qps=4000{perf}")  # the echo answers faster than the tiny model
        proc = run_luigi("RunLoadgen", "--overrides", overrides, artifacts=root, env=env, check=False, timeout=900)
        assert proc.returncode == 0, f"RunLoadgen failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
        (servers_json,) = root.glob("LaunchServers/*/servers.json")
        records = json.loads(servers_json.read_text())["servers"]
        by_role = {r["role"]: r for r in records}
        n0, n1 = node_names()
        assert [r["role"] for r in records] == ["context", "generation", "router"]
        assert by_role["context"]["instance_node"] == n0 and by_role["generation"]["instance_node"] == n1
        assert f"--nodelist={n1}" in by_role["generation"]["cmd"]
        if stack == "vllm":
            assert "--kv-transfer-config" in by_role["generation"]["cmd"]
            router_cmd = by_role["router"]["cmd"]
            assert "--vllm-pd-disaggregation" in router_cmd
            for role in ("context", "generation"):  # the router was given each worker at the address its node has
                assert f"http://{by_role[role]['host']}:{by_role[role]['port']}" in router_cmd
        else:  # each worker's options and the router's config, written in the LaunchServers artifact
            layout = servers_json.parent / "layout"
            worker = yaml.safe_load((layout / "generation_0" / "config.yaml").read_text())
            assert worker["cache_transceiver_config"] == {"backend": "DEFAULT"}
            router = yaml.safe_load((layout / "router_0" / "config.yaml").read_text())
            for role in ("context", "generation"):
                assert router[f"{role}_servers"]["urls"] == [f"{by_role[role]['host']}:{by_role[role]['port']}"]
        (result,) = root.glob("RunLoadgen/*/result.json")
        res = json.loads(result.read_text())
        assert res["valid"] == "VALID", res
        router = f"{by_role['router']['host']}:{by_role['router']['port']}"
        assert [s["endpoint"] for s in res["harness"]["per_server"]] == [router]  # the front door only
        assert res["layout"]["kind"] == "disaggregated" and res["layout"]["nodes"] == [n0, n1]
        timings = res["layout"]["timings"]  # each role's timings, from its workers' own metrics
        whats = ["decode", "prefill", "queue"] if stack == "vllm" else ["first_token", "queue"]  # (no KV moved)
        assert {role: sorted(t) for role, t in timings.items()} == {r: whats for r in ("context", "generation")}
        assert timings["generation"]["queue"]["count"] >= 16 and timings["context"][whats[-2]]["mean_ms"] > 0
        assert_nothing_left(root)
        log = (servers_json.parent / by_role["router"]["log"]).read_text()
        if stack == "vllm":  # the real vllm-router (the test extra installs it next to this Python)
            assert "Router ready" in log and "Received terminate signal" in log, log[-3000:]
        else:  # the stand-in router, stopped with the layout, logged what it relayed: every request, both roles
            stats = json.loads(log.split("echo router requests per role: ", 1)[1].splitlines()[0])
            assert stats["context"] >= 16 and stats["generation"] >= 16, stats


def test_clients_on_both_nodes_feed_one_loadgen_that_counts_every_response_once(cluster2, built_fast, tmp_path):
    """harness.client_nodes=[0, 1]: LoadGen's one driver, in the measuring step on the first node, feeds a
    frontend there (pipes) and one on the second node (its own srun step of the allocation, over TCP), each
    with clients on both data-parallel servers. LoadGen counts every response once: the samples it issued are the
    responses the two nodes' frontends received, requests.csv's rows and the servers' completions; result.json's
    `clients` holds each node's client CPU and the second node's clock offset (here one clock: within the
    offset's own uncertainty of 0); nothing is left."""
    env = _stack_stand_ins(tmp_path / "bin")
    dp = ("quantize.format=none,build.backend=openai,build.device=cuda,layout.nodes=2,"
          "layout.roles.server.count=2,layout.roles.server.gpus_per_instance=0")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        overrides = (f"{FAST}{SHORT},{SLURM},slurm.stages=[],{dp},openai.server=vllm,"
                     f"openai.binary={tmp_path / 'bin' / 'vllm'},loadgen.offline_expected_qps=20000,"
                     "harness.frontends=2,harness.client_nodes=[0,1]")
        proc = run_luigi("RunLoadgen", "--overrides", overrides, artifacts=root, env=env, check=False, timeout=900)
        assert proc.returncode == 0, f"RunLoadgen failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
        (result,) = root.glob("RunLoadgen/*/result.json")
        res = json.loads(result.read_text())
        assert res["valid"] == "VALID", res
        n0, n1 = node_names()
        nodes = {n["node"]: n for n in res["clients"]["nodes"]}
        assert res["clients"]["driver_node"] == n0 and set(nodes) == {n0, n1}
        assert (nodes[n0]["frontends"], nodes[n0]["link"]) == ([0], "pipes")
        assert (nodes[n1]["frontends"], nodes[n1]["link"]) == ([1], "tcp")
        from harness.loadgen.results import read_mllog  # LoadGen's own count of the samples it issued

        queries = read_mllog(result.parent / "mlperf_log_detail.txt")["generated_samples_per_query"]
        assert queries >= 16 and sum(n["responses"] for n in nodes.values()) == queries
        assert min(n["responses"] for n in nodes.values()) > 0
        assert sum(s["completed"] for s in res["harness"]["per_server"]) == queries
        rows = (result.parent / "requests.csv").read_text().splitlines()
        assert len(rows) - 1 == queries
        assert all(n["cpu_s"] > 0 and n["frontends_cpu_s"] > 0 for n in nodes.values())
        clock = nodes[n1]["clock"]
        assert abs(clock["offset_ms"]) <= clock["uncertainty_ms"] + 0.001, clock
        assert_nothing_left(root)


def test_each_instance_runs_on_its_own_gpus_on_either_node(cluster2, built_fast, tmp_path):
    """Four 1-GPU vLLM servers over two nodes of 2 GPUs: each runs with CUDA_VISIBLE_DEVICES of its placed
    GPU, on the second node too (where Slurm sets a step's to all of the job's GPUs); measured VALID; a GPU
    sampler ran on each node (the second's as a step there) and says why it read nothing (no NVML here)."""
    env = _stack_stand_ins(tmp_path / "bin")
    dp = ("quantize.format=none,build.backend=openai,build.device=cuda,layout.nodes=2,layout.gpus_per_node=2,"
          "layout.roles.server.count=4,layout.roles.server.gpus_per_instance=1")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        overrides = (f"{FAST}{SHORT},{SLURM},slurm.stages=[],{dp},openai.server=vllm,"
                     f"openai.binary={tmp_path / 'bin' / 'vllm'},loadgen.offline_expected_qps=60000")
        proc = run_luigi("RunLoadgen", "--overrides", overrides, artifacts=root, env=env, check=False, timeout=900)
        assert proc.returncode == 0, f"RunLoadgen failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
        (servers_json,) = root.glob("LaunchServers/*/servers.json")
        records = json.loads(servers_json.read_text())["servers"]
        n0, n1 = node_names()
        seen = []
        for rec in records:
            line = next(x for x in (servers_json.parent / rec["log"]).read_text().splitlines()
                        if x.startswith("echo_stack: vllm on "))
            seen.append(line.split(" on ", 1)[1])
        assert sorted(seen) == sorted(f"{n} with CUDA_VISIBLE_DEVICES={g}" for n in (n0, n1) for g in (0, 1)), seen
        res = json.loads(next(root.glob("RunLoadgen/*/result.json")).read_text())
        assert res["valid"] == "VALID", res
        # each node's GPUs had their sampler (the second node's through its own srun step); no NVML here
        telemetry = res["gpu_telemetry"]
        assert set(telemetry["not_sampled"]) == {n0, n1}, telemetry
        assert all(why.startswith(f"NVML is not available on {n}: ") for n, why in telemetry["not_sampled"].items())
        assert_nothing_left(root)


# One server of tp 4 over two nodes of 2 GPUs each.
SPAN = ("quantize.format=none,build.backend=openai,build.device=cuda,layout.nodes=2,layout.gpus_per_node=2,"
        "layout.roles.server.count=1,layout.roles.server.gpus_per_instance=4,layout.roles.server.tp_size=4")


@pytest.mark.parametrize("stack,ranks", [("trtllm-serve", 4), ("vllm", 2)])
def test_one_server_over_two_nodes_is_one_srun_step_and_is_measured_through_its_first_rank(
        stack, ranks, cluster2, built_fast, tmp_path):
    """tp 4 across two nodes: the server is one `srun` step over both (trtllm-serve: an MPI rank per GPU under
    trtllm-llmapi-launch and --mpi=pmix; vLLM: a process per node, --headless on the second); the first rank
    serves and LoadGen measures it VALID; every other rank joined on its node; the role's env (NCCL, UCX
    settings) reached every rank on both nodes; nothing is left."""
    env = _stack_stand_ins(tmp_path / "bin")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        overrides = (f"{FAST}{SHORT},{SLURM},slurm.stages=[],{SPAN},openai.server={stack},"  # (no router: faster)
                     f"openai.binary={tmp_path / 'bin' / stack},loadgen.offline_expected_qps=60000,"
                     "layout.roles.server.env={NCCL_DEBUG: INFO, UCX_TLS: 'tcp,self'}")
        proc = run_luigi("RunLoadgen", "--overrides", overrides, artifacts=root, env=env, check=False, timeout=900)
        assert proc.returncode == 0, f"RunLoadgen failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
        (servers_json,) = root.glob("LaunchServers/*/servers.json")
        (rec,) = json.loads(servers_json.read_text())["servers"]
        n0, n1 = node_names()
        assert rec["instance_node"] == f"{n0},{n1}"
        step = rec["cmd"][:rec["cmd"].index("--kill-on-bad-exit=1") + 3]
        assert f"--nodelist={n0},{n1}" in step and f"--ntasks={ranks}" in step, step
        assert ("--mpi=pmix" in step) == (stack == "trtllm-serve"), step
        log = (servers_json.parent / rec["log"]).read_text()
        joined = sorted(line.split(" rank ", 1)[1] for line in log.splitlines() if line.endswith(" joined"))
        per_node = ranks // 2
        assert joined == [f"{r} on {n0 if r < per_node else n1} joined" for r in range(1, ranks)], log[-3000:]
        got = {line.split(" rank ", 1)[1] for line in log.splitlines() if line.startswith("echo_stack:") and " env [" in line}
        assert got == {f"{r} on {n0 if r < per_node else n1} env [NCCL_DEBUG=INFO UCX_TLS=tcp,self]"
                       for r in range(ranks)}, log[-3000:]
        (result,) = root.glob("RunLoadgen/*/result.json")
        res = json.loads(result.read_text())
        assert res["valid"] == "VALID", res
        assert [s["endpoint"] for s in res["harness"]["per_server"]] == [f"{rec['host']}:{rec['port']}"]
        assert_nothing_left(root)


def test_a_generation_worker_killed_mid_measurement_is_named_and_the_layout_relaunched(cluster2, built_fast, tmp_path):
    """The disaggregated vLLM layout's generation worker on the second node killed while LoadGen measures
    through the router: the run says which instance went, by role and node, ends that allocation,
    relaunches the whole layout in a new one and measures again; nothing is left."""
    from test_slurm import Worker

    env = _stack_stand_ins(tmp_path / "bin")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        overrides = (f"{FAST}{SHORT},{SLURM},slurm.stages=[],{DISAGG},openai.server=vllm,"
                     f"openai.binary={tmp_path / 'bin' / 'vllm'},loadgen.offline_expected_qps=4000,"
                     "loadgen.min_duration_ms=6000")
        held = Worker(root, "RunLoadgen", overrides, env=env)
        step = held.wait_job_log("RunLoadgen ", timeout=400)
        job_id = step["job_id"].split("/")[0]
        n1 = node_names()[1]
        killed = kill_instances(root, job_id, lambda rec: rec.get("role") == "generation" and rec["instance_node"] == n1,
                                "echo_openai")
        assert killed, "no generation worker of the second node found"
        rc = held.finish(timeout=600)
        out = held.text()
        assert rc in (0, 10), out[-3000:]
        assert f"the servers in Slurm allocation {job_id} stopped answering mid-measurement" in out, out[-3000:]
        assert f"generation 1 on {n1} " in out, out[-3000:]  # the instance, by role and node
        again = jobs(root, "allocation")[-1]
        assert again["job_id"] != job_id and job_state(again["job_id"]) == "CANCELLED"
        assert (root / "RunLoadgen" / step["key"][:16] / "manifest.json").is_file()
        assert_nothing_left(root)


def test_two_array_tasks_on_two_nodes_share_one_launch_of_their_servers(cluster2, built_fast, tmp_path):
    """A 2-point Sweep whose points share their servers (they differ only in LoadGen settings), one array
    task per node (--exclusive): one task launches the servers on its node, the other leases them from the
    other node and measures against them; they are launched once, and nothing is left afterwards."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: two_nodes\nbase: {REPO / 'params' / 'default.yaml'}\n"
                     f"overrides: \"{FAST}{SHORT},{SLURM},slurm.max_parallel=2,slurm.extra_args=[--exclusive]\"\n"
                     "grid:\n  loadgen.min_duration_ms: [3000, 3200]\n")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        proc = run_luigi("Sweep", "--sweep", str(sweep), artifacts=root, check=False, timeout=900)
        assert proc.returncode in (0, 10, 11, 12), f"Sweep failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
        tasks = jobs(root, "array task")
        assert sorted(t["node"] for t in tasks) == node_names(), tasks  # one task on each node
        launch = [(run["run_id"], v["status"]) for run in run_records(root) for v in run["stages"].values()
                  if v["stage"] == "LaunchServers"]
        assert sorted(s for _, s in launch) == ["built", "reused"], launch
        (servers_json,) = root.glob("LaunchServers/*/servers.json")
        (rec,) = json.loads(servers_json.read_text())["servers"]
        launcher = next(t for t in tasks if t["node"] == rec["node"])
        (own,) = [line for line in job_lines(rec["launch_job"]) if line.get("JobId") == rec["launch_job"]]
        assert f"{own['ArrayJobId']}_{own['ArrayTaskId']}" == launcher["job_id"]  # the launching task's own job
        assert len(list(root.glob("RunLoadgen/*/result.json"))) == 2
        assert_nothing_left(root)


def test_servers_launched_on_another_node_are_alive_while_their_job_runs_there(cluster2, tmp_path):
    """A record and a lease made on another node are judged by the job that made them, never by a pid on
    this host: alive while that job is RUNNING there; `servers stop` from outside any job leaves such
    servers to their job and says so; once the job ends, the lease no longer counts."""
    from harness.serving.registry import ServerRegistry

    n1 = node_names()[1]
    job = subprocess.run(["sbatch", "--parsable", f"--nodelist={n1}", "--mem=100M", "--output=/dev/null",
                          "--wrap=sleep 300"], capture_output=True, text=True, timeout=60)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while job_state(job_id) != "RUNNING":
            assert time.monotonic() < deadline, job_state(job_id)
            time.sleep(0.5)
        root = tmp_path / "artifacts"
        registry = ServerRegistry(root)
        registry.record("k" * 16, {"host": "127.0.0.1", "port": 9, "models": ["m"], "pid": os.getpid(),
                                   "create_time": psutil.Process().create_time(), "token": "0" * 32,
                                   "node": n1, "launch_job": job_id})
        registry.lease("k" * 16, {"run_id": "20261127T000000-999999", "pid": 999999, "node": n1,
                                  "slurm_job": job_id})
        assert [h["node"] for h in registry.holders("k" * 16)] == [n1]  # pid 999999 is not on this host
        out = subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO,
                             env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert f"left {'k' * 16} pid {os.getpid()} on {n1}: Slurm job {job_id} launched it" in out.stdout, out.stdout
        assert len(registry.records("k" * 16)) == 1  # still there for the task that launched it
        from harness.gc.collect import plan, servers_in_use

        assert servers_in_use(registry.records("k" * 16))  # gc keeps what its job still runs
        assert plan(root).servers["dead_records"] == []
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    deadline = time.monotonic() + 60
    while job_state(job_id) == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert registry.holders("k" * 16) == []  # its job ended: the lease is gone
    assert ServerRegistry(root).stop("k" * 16) == [] and registry.records("k" * 16) == []  # forgotten, nothing signalled
