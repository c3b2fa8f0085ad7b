"""An OpenAI stack's serving layout as launched: which layouts launch, the ports they need, the check
that no two instances on one node use the same port, and each instance's LaunchSpec (each instance is
rendered by disagg.py's pure functions for the nodes' addresses and these ports).

Ports are picked at launch, one per instance, plus a bootstrap port per SGLang prefill worker, a
rendezvous port per SGLang or vLLM instance over several nodes, a block of one port per rank for each
vLLM disaggregated worker's KV connector (NIXL side channel, Mooncake bootstrap), and a Prometheus
port for SGLang's and vLLM's routers. Ports a user fixed (a role's `env` or `extra_args`) are kept
and checked like the picked ones."""
from __future__ import annotations

import dataclasses
import os
import re

from harness.backends.openai.disagg import KV_TRANSFERS, VLLM_KV_PORT_ENV, render
from harness.backends.openai.servers import served_name, server_env
from harness.serving.layout import PlacementError, place, placed
from harness.serving.spec import LaunchSpec
from harness.slurm import container_of

# a flag that names a port (`--port 8000`, `--disaggregation-bootstrap-port=9000`, `--master-port`)
_PORT_FLAG = re.compile(r"^--[a-z0-9_-]*port$")


def launch_problems(p) -> list[str]:
    """A layout perfdag cannot launch (the stack's own role rules are backends/roles.py's)."""
    out = []
    if p.openai.ports:
        out.append("openai.ports: a layout's ports are picked when it launches; remove openai.ports")
    if p.openai.endpoints:
        out.append("openai.endpoints: a layout is launched by perfdag, endpoints are servers it does not launch; "
                   "remove one")
    return out


def port_needs(p, instances) -> dict[str, int]:
    """The ports a launch picks, by name, each with how many consecutive ports it takes."""
    server, out = p.openai.server, {}
    for inst in instances:
        role = p.layout.roles[inst.role]
        out[inst.name] = 1
        if server == "sglang" and inst.role == "context":
            out[f"{inst.name}_bootstrap"] = 1
        if server in ("sglang", "vllm") and len(inst.nodes) > 1:  # its nodes meet at the first one
            out[f"{inst.name}_dist"] = 1
        if server == "vllm" and inst.role in ("context", "generation"):  # base + rank, per rank
            out[f"{inst.name}_kv"] = role.tp_size * role.pp_size * role.dp_size  # every engine's ranks
        if server in ("sglang", "vllm") and inst.role == "router":
            out[f"{inst.name}_metrics"] = 1
    return out


def port_names(p, instances) -> list[str]:
    return list(port_needs(p, instances))


def _fixed(args) -> list[tuple[str, int]]:
    """(flag, port) of each port flag with a number in a command line's arguments."""
    out, args = [], [str(a) for a in args]
    for k, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if not _PORT_FLAG.match(flag):
            continue
        value = value if eq else (args[k + 1] if k + 1 < len(args) else "")
        if value.isdigit():
            out.append((flag, int(value)))
    return out


def ports_used(p, inst, r: dict, ports: dict) -> list[tuple[int, str]]:
    """(port, where it comes from) of every port an instance listens on: what perfdag picked, and what
    its role's env and extra_args fix (a block of one port per rank for vLLM's KV connectors)."""
    role = p.layout.roles[inst.role]
    out = [(v, f"its {name[len(inst.name) + 1:] or 'HTTP'} port") for name, v in ports.items()
           if (name == inst.name or name.startswith(inst.name + "_")) and not name.endswith("_kv")
           and isinstance(v, int)]
    ranks = role.tp_size * role.pp_size * role.dp_size  # (vLLM: dp_size engines of tp x pp ranks)
    for name, value in r["env"].items():
        if name.endswith("_PORT") and str(value).isdigit():
            where = f"layout.roles.{inst.role}.env.{name}" if name in role.env else f"its {name}"
            size = ranks if name in VLLM_KV_PORT_ENV.values() else 1
            out += [(int(value) + k, where) for k in range(size)]
    out += [(port, f"layout.roles.{inst.role}.extra_args {flag}") for flag, port in _fixed(role.extra_args)]
    out += [(port, f"openai.extra_args {flag}") for flag, port in _fixed(p.openai.extra_args)
            if inst.role != "router"]
    return out


def fixed_ports(p, instances, rendered: list[dict]) -> set[int]:
    """Ports the user fixed (role env, extra_args): picked ports must avoid them."""
    return {port for inst, r in zip(instances, rendered) for port, where in ports_used(p, inst, r, {})}


def port_clashes(p, instances, rendered: list[dict], ports: dict) -> list[str]:
    """One line per port two instances on one node would both listen on, naming the port and where
    each took it from; [] when none does."""
    seen: dict[tuple[int, int], tuple[str, str]] = {}
    out = []
    for inst, r in zip(instances, rendered, strict=True):
        mine = {}
        for port, where in ports_used(p, inst, r, ports):
            mine.setdefault(port, where)  # one instance naming a port twice (a flag given again) is one use
        for port, where in mine.items():
            for node in inst.nodes:
                first = seen.setdefault((node, port), (inst.name, where))
                if first[0] != inst.name:
                    out.append(f"{where}: port {port} on node {node} is taken twice, by {first[0]} ({first[1]}) "
                               f"and {inst.name} ({where}); give each instance on a node its own port, or leave "
                               "it unset (perfdag picks one per instance)")
    return out


def clash_problems(p) -> list[str]:
    """Before any stage: ports a hand-made layout fixes twice on one node (picked ports never clash)."""
    roles = set(p.layout.roles)
    if (p.openai.server not in KV_TRANSFERS and roles != {"server"}) or \
            (p.openai.server == "trtllm-serve" and "router" in roles and not p.layout.disaggregated):
        return []  # a role the stack lacks: said by backends/roles.py
    try:
        instances = place(p.layout)
    except PlacementError:
        return []  # said elsewhere (roles.py)
    names = port_names(p, instances)
    rendered = render(p, instances, [f"<node{k}>" for k in range(p.layout.nodes)],
                      {n: f"<{n}_port>" for n in names}, "<layout>", "<model>")
    return port_clashes(p, instances, rendered, {})


def layout_specs(p, instances, targets: list[tuple[str, str]], ports: dict, out_dir: str, model_dir: str,
                 root: str, protocol: str) -> tuple[list[LaunchSpec], list[dict]]:
    """Each instance's LaunchSpec on its node (an instance over several nodes: one step over them), and
    what was rendered for it (its config files are written by the caller)."""
    o = p.openai
    rendered = render(p, instances, [t[1] for t in targets], ports, os.path.join(out_dir, "layout"), model_dir)
    def own(name: str) -> dict:  # its side ports by what they are (records say them: `metrics_port`)
        return {k[len(name) + 1:]: v for k, v in ports.items() if k.startswith(name + "_")}

    specs = [LaunchSpec(index=k, argv=r["argv"], host=o.bind, ports={"serve": r["port"], **own(r["name"])},
                        models=(served_name(p),),
                        env={**server_env(p, []), **r["env"]} if r["role"] != "router" else dict(r["env"]),
                        protocol=protocol, mode=o.server, repo=os.path.join(out_dir, "layout", r["name"]), cwd=root)
             for k, r in enumerate(rendered)]
    specs = [dataclasses.replace(s, span=tuple(targets[k][0] for k in r["nodes"]), tasks_per_node=r["tasks_per_node"],
                                 mpi=r["mpi"]) if len(r["nodes"]) > 1 else s
             for s, r in zip(placed(specs, instances, targets), rendered, strict=True)]
    container = container_of(p.slurm, (root,), root)  # every step on every node in the job's container
    if container:
        specs = [dataclasses.replace(s, container=container) for s in specs]
    return specs, rendered
