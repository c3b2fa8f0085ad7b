"""Each role's GPUs sampled over a measurement (harness/serving/gpu_telemetry.py): against a scripted NVML
stand-in that follows pynvml's interface (tests/nvml_fake/pynvml.py: no GPU here), against the real pynvml
where NVML is missing (this host), and not at all for servers without GPUs."""
from __future__ import annotations

import importlib
import statistics
import sys
import time

import pytest
from conftest import REPO

from harness.serving.gpu_telemetry import GpuTelemetry, placed_gpus


def records(here: str) -> list[dict]:
    return [{"role": "context", "env": {"CUDA_VISIBLE_DEVICES": "0,1"}, "instance_node": here},
            {"role": "generation", "env": {"CUDA_VISIBLE_DEVICES": "2"}, "instance_node": here},
            {"role": "generation", "env": {"CUDA_VISIBLE_DEVICES": "0"}, "instance_node": "node-b"},
            {"role": "router", "env": {"SPT_NOENV": "1"}, "instance_node": here}]


@pytest.fixture
def fake_nvml(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests" / "nvml_fake"))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    fake = importlib.import_module("pynvml")
    assert fake.__file__.startswith(str(REPO / "tests"))
    fake.READ.clear()
    yield fake
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)


def test_each_roles_gpus_are_sampled_and_summarised(fake_nvml, monkeypatch):
    """The context role's two GPUs and the generation role's one on this node are read every interval; each
    GPU's mean and max are those of the readings NVML gave; a role's utilisation is its GPUs' mean and its
    power their sum; the generation instance on another node is named as not sampled."""
    monkeypatch.setenv("SLURMD_NODENAME", "node-a")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    t = GpuTelemetry.for_servers(records("node-a"), interval_s=0.01)
    t.start()
    deadline = time.monotonic() + 30
    while min(len(fake_nvml.READ.get(g, [])) for g in (0, 1, 2)) < 8:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    out = t.stop()
    assert fake_nvml.STATE["init"] == 0  # shut down again
    assert out["source"] == "nvml" and out["node"] == "node-a" and out["read_errors"] == 0
    assert out["not_sampled"] == ["generation 1 on node-b: another node"]
    assert set(out["roles"]) == {"context", "generation"}
    assert [g["index"] for g in out["roles"]["context"]["gpus"]] == [0, 1]
    for role in out["roles"].values():
        for gpu in role["gpus"]:
            read = fake_nvml.READ[gpu["index"]]
            assert gpu["samples"] == len(read) and gpu["name"] == "NVIDIA H200 (scripted)"
            assert gpu["util_pct"] == {"mean": round(statistics.mean(r[0] for r in read), 1),
                                       "max": max(r[0] for r in read)}
            assert gpu["power_w"]["mean"] == round(statistics.mean(r[3] for r in read) / 1000, 1)
            assert gpu["memory_used_mib"]["max"] == max(r[2] for r in read) * 1024
            assert gpu["memory_total_mib"] == 141 * 1024
    ctx = out["roles"]["context"]
    assert ctx["util_pct_mean"] == round(statistics.mean(g["util_pct"]["mean"] for g in ctx["gpus"]), 1)
    assert ctx["power_w_total_mean"] == round(sum(g["power_w"]["mean"] for g in ctx["gpus"]), 1)


def test_an_instances_gpus_are_read_through_the_steps_own_devices(monkeypatch):
    """Inside a Slurm step whose CUDA_VISIBLE_DEVICES lists the job's GPUs on the node, an instance's GPU 1
    is the step's second: NVML's 5."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    gpus, elsewhere = placed_gpus([{"role": "server", "env": {"CUDA_VISIBLE_DEVICES": "1,2"}, "node": "n0"}], "n0")
    assert gpus == {5: ("server", "server 0"), 6: ("server", "server 0")} and elsewhere == []


def test_a_gpu_nvml_does_not_have_is_named_and_the_rest_sampled(fake_nvml, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    t = GpuTelemetry.for_servers([{"role": "server", "env": {"CUDA_VISIBLE_DEVICES": "3,9"}}], interval_s=0.01)
    t.start()
    time.sleep(0.2)
    gpus = t.stop()["roles"]["server"]["gpus"]
    assert gpus[0]["index"] == 3 and gpus[0]["samples"] > 0
    assert gpus[1]["index"] == 9 and "Invalid Argument" in gpus[1]["error"] and gpus[1]["samples"] == 0


def test_where_nvml_is_missing_the_result_says_so_and_why(monkeypatch):
    """The real pynvml on a host without NVIDIA's driver: nothing is sampled, and the result says why."""
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
    assert out["source"] is None and out["why"].startswith("NVML is not available here: NVMLError")
    assert "roles" not in out


def test_instances_only_on_other_nodes_are_named_not_sampled(monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "node-c")
    t = GpuTelemetry.for_servers(records("node-a"))
    t.start()
    out = t.stop()
    assert out["source"] is None and out["why"] == "no instance with GPUs runs on node-c, where this measurement runs"
    assert len(out["not_sampled"]) == 3


def test_servers_without_gpus_get_no_telemetry():
    assert GpuTelemetry.for_servers([{"role": "server", "env": {"OMP_NUM_THREADS": "2"}}, {"pid": 1}]) is None
