"""Each role's GPUs sampled over a measurement (harness/serving/gpu_telemetry.py): against a scripted NVML
stand-in that follows pynvml's interface (tests/nvml_fake/pynvml.py: no GPU here), on this node and on
"another node" (a sampler process started as the caller's command for that node starts it), against the
real pynvml where NVML is missing (this host), and not at all for servers without GPUs."""
from __future__ import annotations

import importlib
import statistics
import sys
import time

import pytest
from conftest import REPO

from harness.serving.gpu_telemetry import GpuTelemetry, Sampler, placed_gpus

FAKE = REPO / "tests" / "nvml_fake"


def records(here: str, other: str = "node-b") -> list[dict]:
    return [{"role": "context", "env": {"CUDA_VISIBLE_DEVICES": "0,1"}, "instance_node": here},
            {"role": "generation", "env": {"CUDA_VISIBLE_DEVICES": "2"}, "instance_node": here},
            {"role": "generation", "env": {"CUDA_VISIBLE_DEVICES": "3"}, "instance_node": other},
            {"role": "router", "env": {"SPT_NOENV": "1"}, "instance_node": here}]


@pytest.fixture
def fake_nvml(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    fake = importlib.import_module("pynvml")
    assert fake.__file__.startswith(str(FAKE))
    fake.READ.clear()
    yield fake
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)


def test_each_roles_gpus_are_sampled_on_every_node_and_summarised(fake_nvml, monkeypatch):
    """The context role's two GPUs and a generation GPU on this node are read by a thread, the other
    generation GPU by a sampler started on its node; each GPU's mean and max are those of the readings NVML
    gave; a role's utilisation is its GPUs' mean and its power their sum."""
    monkeypatch.setenv("SLURMD_NODENAME", "node-a")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(FAKE))  # the other node's sampler imports the stand-in too
    t = GpuTelemetry.for_servers(records("node-a"), interval_s=0.01,
                                 on_node=lambda node: ["env", f"SLURMD_NODENAME={node}"])
    t.start()
    deadline = time.monotonic() + 30
    while min(len(fake_nvml.READ.get(g, [])) for g in (0, 1, 2)) < 8:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.5)  # the other node's sampler, a process of its own, has read too
    out = t.stop()
    assert fake_nvml.STATE["init"] == 0  # shut down again
    assert out["source"] == "nvml" and out["read_errors"] == 0 and out["not_sampled"] == {}
    assert set(out["roles"]) == {"context", "generation"}
    ctx, gen = out["roles"]["context"], out["roles"]["generation"]
    assert [(g["node"], g["index"], g["instance"]) for g in ctx["gpus"]] == [("node-a", 0, "context 0"),
                                                                               ("node-a", 1, "context 0")]
    assert [(g["node"], g["index"], g["instance"]) for g in gen["gpus"]] == [("node-a", 2, "generation 0"),
                                                                               ("node-b", 3, "generation 1")]
    for gpu in ctx["gpus"] + gen["gpus"][:1]:  # read in this process: compare with what NVML handed out
        read = fake_nvml.READ[gpu["index"]]
        assert gpu["samples"] == len(read) and gpu["name"] == "NVIDIA H200 (scripted)"
        assert gpu["util_pct"] == {"mean": round(statistics.mean(r[0] for r in read), 1), "max": max(r[0] for r in read)}
        assert gpu["power_w"]["mean"] == round(statistics.mean(r[3] for r in read) / 1000, 1)
        assert gpu["memory_used_mib"]["max"] == max(r[2] for r in read) * 1024
        assert gpu["memory_total_mib"] == 141 * 1024
    b = gen["gpus"][1]  # device 3's one scripted reading, however many times the other node read it
    assert b["samples"] > 0 and b["util_pct"] == {"mean": 0, "max": 0} and b["power_w"] == {"mean": 90.0, "max": 90.0}
    assert ctx["util_pct_mean"] == round(statistics.mean(g["util_pct"]["mean"] for g in ctx["gpus"]), 1)
    assert ctx["power_w_total_mean"] == round(sum(g["power_w"]["mean"] for g in ctx["gpus"]), 1)


def test_an_instances_gpus_are_read_through_the_steps_own_devices(monkeypatch):
    """Inside a Slurm step whose CUDA_VISIBLE_DEVICES lists the job's GPUs on the node, an instance's GPU 1
    is the step's second: NVML's 5."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert Sampler([1, 2]).nvml_index == {1: 5, 2: 6}
    assert placed_gpus([{"role": "server", "env": {"CUDA_VISIBLE_DEVICES": "1,2"}, "instance_node": "n0,n1"}]) == \
        {"n0": {1: ("server", "server 0"), 2: ("server", "server 0")},
         "n1": {1: ("server", "server 0"), 2: ("server", "server 0")}}


def test_a_gpu_nvml_does_not_have_is_named_and_the_rest_sampled(fake_nvml, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    t = GpuTelemetry.for_servers([{"role": "server", "env": {"CUDA_VISIBLE_DEVICES": "3,9"}}], interval_s=0.01)
    t.start()
    time.sleep(0.2)
    gpus = t.stop()["roles"]["server"]["gpus"]
    assert gpus[0]["index"] == 3 and gpus[0]["samples"] > 0
    assert gpus[1]["index"] == 9 and "Invalid Argument" in gpus[1]["error"] and gpus[1]["samples"] == 0


def test_where_nvml_is_missing_or_a_node_cannot_be_reached_the_result_says_why(monkeypatch):
    """The real pynvml on a host without NVIDIA's driver: nothing is sampled here, and the result says why;
    an instance on another node, with no way to reach it (no Slurm job), is named with why."""
    monkeypatch.setenv("SLURMD_NODENAME", "node-a")
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML answers on this host")
    t = GpuTelemetry.for_servers(records("node-a"))
    t.start()
    out = t.stop()
    assert out["source"] is None and out["roles"] == {}
    assert out["not_sampled"]["node-a"].startswith("NVML is not available on node-a: NVMLError")
    assert out["not_sampled"]["node-b"] == "another node, and this measurement runs in no Slurm job to reach it"


def test_servers_without_gpus_get_no_telemetry():
    assert GpuTelemetry.for_servers([{"role": "server", "env": {"OMP_NUM_THREADS": "2"}}, {"pid": 1}]) is None
