"""Servers a Sweep's array task launched on another node: how a task elsewhere judges them when Slurm's
answers are given (the two-node runs themselves are in test_multinode_slurm.py). Slurm's answers (the
job RUNNING there, the node's address) stand in for a cluster whose nodes have real addresses."""
from __future__ import annotations

import json

import pytest
from luigi.task_register import Register

from harness.errors import ServingError
from harness.serving import elsewhere
from tasks import LaunchServers


@pytest.fixture
def slurm_says(monkeypatch):
    """This process runs on node b; Slurm says job 77 is RUNNING on node a, whose address is 10.1.0.7."""
    monkeypatch.setenv("SLURMD_NODENAME", "b")
    monkeypatch.setattr(elsewhere, "job_runs_there", lambda job, node: (job, node) == ("77", "a"))
    monkeypatch.setattr(elsewhere, "node_address", lambda name: {"a": "10.1.0.7", "b": "10.1.0.8"}[name])


def _task(overrides: str = "") -> LaunchServers:
    Register.clear_instance_cache()  # a task of this test's artifacts root
    return LaunchServers(overrides=overrides)


def _published(task, host: str) -> dict:
    rec = {"host": host, "port": 8001, "models": ["tensorrt_llm"], "pid": 4242, "node": "a", "launch_job": "77"}
    task.artifact_dir.mkdir(parents=True)
    (task.artifact_dir / "servers.json").write_text(json.dumps({"servers": [rec]}))
    return rec


def test_servers_on_loopback_of_another_node_are_not_replaced_and_the_error_names_the_bind(artifacts, slurm_says):
    task = _task()
    rec = _published(task, "127.0.0.1")
    assert elsewhere.running_elsewhere(rec) and not elsewhere.reachable_from_here(rec)
    with pytest.raises(ServingError) as e:
        task.refuse_clobbering()
    assert str(e.value) == (f"LaunchServers {task.key[:16]}: its servers run on a in Slurm job 77, which another "
                            "point of this sweep launched; they listen on 127.0.0.1, which b cannot reach; set "
                            "triton.bind=0.0.0.0 so that points on other nodes share them")


def test_servers_of_a_running_job_elsewhere_are_left_and_once_it_ended_replaced(artifacts, slurm_says):
    task = _task("triton.bind=0.0.0.0")  # shared across nodes: a record at the node's address agrees with it
    rec = _published(task, "10.1.0.7")
    assert elsewhere.reachable_from_here(rec)
    with pytest.raises(ServingError, match="they did not answer from b at 10.1.0.7:8001"):
        task.refuse_clobbering()  # reachable, and its job runs: they are not this task's to replace
    rec["launch_job"] = "78"  # a job Slurm no longer runs there: the servers went with it
    (task.artifact_dir / "servers.json").write_text(json.dumps({"servers": [rec]}))
    assert not elsewhere.running_elsewhere(rec)
    task.refuse_clobbering()


def test_a_wildcard_bind_in_a_job_is_recorded_at_the_nodes_address(monkeypatch, slurm_says):
    rec = {"host": "0.0.0.0", "port": 8001}
    assert elsewhere.addressed(rec) == rec  # outside a job: as bound
    monkeypatch.setenv("SLURM_JOB_ID", "80")
    assert elsewhere.addressed(rec) == {"host": "10.1.0.8", "port": 8001}
    assert elsewhere.addressed({"host": "127.0.0.1"}) == {"host": "127.0.0.1"}
