"""Where each instance of a serving layout runs: its node(s) and GPUs (pure functions).

The layout is the params' `layout` section (harness/config/layout.py), read by attribute (serving
sits beside config, not above it). Placement is worst-fit: each instance goes to the node with
the most free GPUs (then the fewest instances, then the lowest index), so data-parallel servers
and the context/generation workers spread over the nodes; an instance larger than a node takes
whole free nodes (tp*pp across nodes). The router goes on the first node. Workers start before
the router (`launch_order`).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import os
from dataclasses import dataclass

from harness.errors import InputError, ServingError
from harness.slurm import allocation_nodes

# Dependency order: every worker is ready before the router starts.
LAUNCH_ORDER = (("context", "generation", "server"), ("router",))


@dataclass(frozen=True)
class Instance:
    role: str
    index: int                 # within its role
    nodes: tuple[int, ...]     # node indexes in the allocation (several: one instance over nodes)
    gpus: tuple[int, ...]      # GPU ids on each of its nodes (the same on each)

    @property
    def name(self) -> str:
        return f"{self.role}_{self.index}"


class PlacementError(InputError):
    """The roles do not fit the allocation (a params problem: the message names the field)."""


def place(layout) -> list[Instance]:
    """Every instance of the layout, in launch order, on its nodes and GPUs."""
    n, per_node = layout.nodes, layout.gpus_per_node
    free = [list(range(per_node)) for _ in range(n)]
    count = [0] * n
    out: list[Instance] = []
    for stage in LAUNCH_ORDER:
        for role_name in stage:
            role = layout.roles.get(role_name)
            if role is None:
                continue
            g = role.gpus_per_instance
            for i in range(role.count):
                if role_name == "router":
                    out.append(Instance(role_name, i, (0,), ()))
                    count[0] += 1
                    continue
                if per_node and g > per_node:
                    nodes = _whole_nodes(free, g, per_node, role_name, i)
                    for k in nodes:
                        free[k], count[k] = [], count[k] + 1
                    out.append(Instance(role_name, i, nodes, tuple(range(per_node))))
                    continue
                fits = [k for k in range(n) if len(free[k]) >= g]
                if not fits:
                    raise PlacementError(
                        f"layout.roles.{role_name}.count: instance {i} needs {g} GPU(s) and no node has them free "
                        f"({n} node(s) x {per_node} GPUs); raise layout.nodes or lower the counts")
                k = min(fits, key=lambda k: (-len(free[k]), count[k], k))
                gpus, free[k] = tuple(free[k][:g]), free[k][g:]
                count[k] += 1
                out.append(Instance(role_name, i, (k,), gpus))
    idle = [k for k in range(n) if not count[k]]
    if idle:
        raise PlacementError(f"layout.nodes: {n} nodes, but the roles fill only {n - len(idle)}; lower layout.nodes "
                             "or raise the counts")
    return out


def _whole_nodes(free: list[list[int]], g: int, per_node: int, role: str, i: int) -> tuple[int, ...]:
    if g % per_node:
        raise PlacementError(f"layout.roles.{role}.gpus_per_instance: {g} GPUs span nodes of {per_node}; use a "
                             f"multiple of layout.gpus_per_node")
    want = g // per_node
    whole = [k for k in range(len(free)) if len(free[k]) == per_node]
    if len(whole) < want:
        raise PlacementError(f"layout.roles.{role}.count: instance {i} needs {want} whole node(s) of {per_node} GPUs, "
                             f"{len(whole)} left; raise layout.nodes or lower the counts")
    return tuple(whole[:want])


def by_role(instances: list[Instance]) -> dict[str, list[Instance]]:
    out: dict[str, list[Instance]] = {}
    for inst in instances:
        out.setdefault(inst.role, []).append(inst)
    return out


def _loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def node_targets(layout, bind: str, field: str) -> list[tuple[str, str]]:
    """(Slurm node to run on, address clients reach it at) for each node of the layout. Node 0 is where
    this process runs (the allocation's batch step): its instances start here (launcher.placed_argv),
    the others through `srun --overlap --nodelist`. One node outside Slurm: here, at the bind address."""
    job = os.environ.get("SLURM_JOB_ID")
    if layout.nodes == 1 or not job:
        if layout.nodes > 1:
            raise ServingError(f"layout.nodes: {layout.nodes} nodes, but this process runs in no Slurm job; set "
                               "slurm.serve: true")
        return [("", bind)]
    nodes = allocation_nodes(job)
    if len(nodes) < layout.nodes:
        raise ServingError(f"layout.nodes: {layout.nodes} nodes, but Slurm job {job} holds {len(nodes)} "
                           f"({', '.join(n for n, _ in nodes)})")
    targets = []
    for k, (name, addr) in enumerate(nodes[:layout.nodes]):
        if _loopback(bind) and not _loopback(addr):
            raise ServingError(f"{field}: {bind} is not reachable from the other nodes ({name} is {addr}); set "
                               f"{field}=0.0.0.0")
        targets.append((name, bind if _loopback(bind) else addr))
    return targets


def placed(specs: list, instances: list[Instance], targets: list[tuple[str, str]]) -> list:
    """The specs (one per instance, in the same order) on their nodes: role, node, and the address
    clients reach each at."""
    out = []
    for spec, inst in zip(specs, instances, strict=True):
        node, host = targets[inst.nodes[0]]
        out.append(dataclasses.replace(spec, role=inst.role, node=node, host=host))
    return out


def front_door(records: list[dict]) -> list[dict]:
    """The servers clients talk to: a layout's router when it has one, else every server (data-parallel:
    the clients spread over them)."""
    routers = [r for r in records if r.get("role") == "router"]
    return routers or list(records)


def layout_summary(records: list[dict]) -> dict | None:
    """What result.json and the report say of a layout: each role's instances, their nodes and addresses,
    and which of them the clients talked to. None when the servers are no layout's."""
    if not any(r.get("role") for r in records):
        return None
    door = {id(r) for r in front_door(records)}
    roles: dict[str, list[dict]] = {}
    for r in records:
        roles.setdefault(r.get("role") or "server", []).append(
            {"node": r.get("instance_node") or r.get("node") or "local", "url": f"{r['host']}:{r.get('port')}",
             "clients": id(r) in door})
    return {"kind": "disaggregated" if "context" in roles else "data-parallel", "roles": roles,
            "nodes": sorted({i["node"] for insts in roles.values() for i in insts})}
