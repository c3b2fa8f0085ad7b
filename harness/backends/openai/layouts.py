"""An OpenAI stack's serving layout as launched: which layouts launch, and the ports they need (each
instance is rendered by disagg.py's pure functions for the nodes' addresses and these ports).

A layout launches when each of its instances fits on one node; tp/pp across nodes (one instance over
several nodes, through MPI or `srun`) is refused before any stage. Ports are picked at launch, one per
instance, plus a bootstrap port per SGLang prefill worker."""
from __future__ import annotations

from harness.serving.layout import PlacementError, place


def launch_problems(p) -> list[str]:
    """A layout perfdag cannot launch (the stack's own role rules are backends/roles.py's)."""
    out = []
    if p.openai.ports:
        out.append("openai.ports: a layout's ports are picked when it launches; remove openai.ports")
    if p.openai.endpoints:
        out.append("openai.endpoints: a layout is launched by perfdag, endpoints are servers it does not launch; "
                   "remove one")
    try:
        instances = place(p.layout)
    except PlacementError:
        return out  # named by backends/roles.py
    for inst in instances:
        if len(inst.nodes) > 1:
            out.append(f"layout.roles.{inst.role}.gpus_per_instance: {inst.name} spans {len(inst.nodes)} nodes; "
                       "tp/pp across nodes is not launched yet: give each instance at most layout.gpus_per_node GPUs")
            break
    return out


def port_names(server: str, instances) -> list[str]:
    """The ports a launch needs, by name: each instance's, and each SGLang prefill worker's bootstrap."""
    names = []
    for inst in instances:
        names.append(inst.name)
        if server == "sglang" and inst.role == "context":
            names.append(f"{inst.name}_bootstrap")
    return names
