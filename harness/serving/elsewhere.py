"""Servers and leases recorded on another Slurm node: alive while the job that started them runs.

A Sweep's array tasks run on different nodes and share a LaunchServers key: the task that launched
the servers keeps them up while other tasks lease them (pipeline/sweep_array.py). From another node
a recorded pid says nothing, so a record made there counts as alive while Slurm says its job is
RUNNING on that node for this user, and as reachable when its address is one this node can reach.
"""
from __future__ import annotations

import ipaddress
import os

from harness.errors import PerfdagError
from harness.serving.layout import _loopback as is_loopback  # (one test of it; renamed, it would rekey RunLoadgen)
from harness.serving.spec import on_this_host, this_node
from harness.slurm import job_lines, node_address, node_names


def job_runs_there(job_id: str | None, node: str | None) -> bool:
    """Slurm says job `job_id` is RUNNING on `node`, as this user (False where Slurm cannot say)."""
    if not job_id or not node:
        return False
    try:
        # the job's own record: an array's first task has the array's id, which names every task
        lines = [line for line in job_lines(job_id) if line.get("JobId") == str(job_id)]
        if not lines or lines[0].get("JobState") != "RUNNING":
            return False
        uid = lines[0].get("UserId", "")
        return (not uid or uid.endswith(f"({os.getuid()})")) and node in node_names(lines[0].get("NodeList", ""))
    except PerfdagError:  # no Slurm commands here
        return False


def running_elsewhere(rec: dict) -> bool:
    """A record made on another node whose launching job still runs there (its servers with it)."""
    return not on_this_host(rec) and job_runs_there(rec.get("launch_job"), rec.get("node"))


def reachable_from_here(rec: dict) -> bool:
    """A server on another node listening on loopback is reachable only where that node's address is a
    loopback one too (several slurmd on one host); any other address is."""
    if on_this_host(rec) or not is_loopback(rec["host"]):
        return True
    try:
        return is_loopback(node_address(rec["node"]))
    except PerfdagError:
        return False


def addressed(rec: dict) -> dict:
    """A record launched in a Slurm job with a wildcard bind (0.0.0.0), at the address other nodes reach
    this node at, so that a point on another node can share its servers."""
    try:
        wildcard = ipaddress.ip_address(rec["host"]).is_unspecified
    except ValueError:
        wildcard = False
    return {**rec, "host": node_address(this_node())} if wildcard and os.environ.get("SLURM_JOB_ID") else rec
