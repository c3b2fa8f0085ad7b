"""Where LoadGen's frontends run: `harness.client_nodes`, nodes of the serving allocation by index.

Frontend f runs on client_nodes[f % len(client_nodes)]. Those on the driver's own node (where the
measuring step runs) start there as always, on pipes; for each other node the driver starts one
`srun --overlap --nodelist=<node>` step of the allocation it runs in (in the allocation's container
when there is one), whose host process starts that node's frontends and links them back to the
driver over TCP (remote.py, client_host.py, links.py). Unset: every frontend on the driver's node.
"""
from __future__ import annotations

import ipaddress
import os
import sys

from harness import CHECKOUT
from harness.errors import InputError, MeasurementError
from harness.serving.spec import this_node
from harness.slurm import allocation_nodes, container_of, srun_argv


def _loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def frontends_by_node(client_nodes: list[int], frontends: int) -> dict[int, list[int]]:
    """Node index -> the frontends it runs (round-robin over the listed nodes)."""
    out: dict[int, list[int]] = {}
    for f in range(frontends):
        out.setdefault(client_nodes[f % len(client_nodes)], []).append(f)
    return out


def placement(params, frontends: int, read_dirs: tuple[str, ...] = ()) -> dict:
    """run_loadgen's `remote` and `listen` for harness.client_nodes ({} when every frontend runs here).
    `read_dirs`: what the frontends read from disk (a tokenizer), mounted in the container."""
    nodes = list(params.harness.client_nodes)
    if not nodes:
        return {}
    if frontends < len(nodes):
        raise InputError(f"harness.client_nodes: {len(nodes)} client nodes, but {frontends} frontend(s) run (harness."
                         "frontends, at most the requests allowed in flight, harness.max_in_flight); raise them to "
                         f"{len(nodes)} or list fewer nodes")
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        raise MeasurementError("harness.client_nodes: this measurement runs in no Slurm job, so it has no other nodes; "
                           "measure inside the layout's serving allocation (slurm.serve: true)")
    alloc = allocation_nodes(job)
    if max(nodes) >= len(alloc):
        raise MeasurementError(f"harness.client_nodes: node {max(nodes)}, but Slurm job {job} holds {len(alloc)} "
                           f"({', '.join(n for n, _ in alloc)}); list nodes below {len(alloc)}")
    here = this_node()
    listen = next((addr for name, addr in alloc if name == here), None)
    if listen is None:
        raise MeasurementError(f"harness.client_nodes: this process runs on {here}, which is not a node of Slurm job {job}")
    remote = []
    step = on_node(params, "clients", read_dirs)
    for k, fes in frontends_by_node(nodes, frontends).items():
        name, addr = alloc[k]
        if name == here:
            continue
        if _loopback(listen) and not _loopback(addr):
            raise MeasurementError(f"harness.client_nodes: node {name} ({addr}) cannot reach the driver on {here}, "
                                   f"whose address is {listen}; give {here} a NodeAddr the other nodes reach")
        remote.append({"node": name, "frontends": fes,
                       "argv": step(name) + ["env", f"PYTHONPATH={CHECKOUT}", sys.executable, "-m",
                                             "harness.loadgen.client_host"]})
    return {"remote": remote, "listen": listen} if remote else {}


def on_node(params, what: str, read_dirs: tuple[str, ...] = ()):
    """node -> the `srun --overlap --nodelist=<node>` step of this Slurm job that runs a command there, in
    the allocation's container when it has one; None outside a Slurm job."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    container = container_of(params.slurm, (CHECKOUT, *read_dirs), CHECKOUT)
    return lambda node: srun_argv(job, [], name=f"perfdag-{what}", node=node, container=container)
