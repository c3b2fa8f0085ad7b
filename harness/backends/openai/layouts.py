"""An OpenAI stack's serving layout as launched: which layouts launch, and the ports they need (each
instance is rendered by disagg.py's pure functions for the nodes' addresses and these ports).

Ports are picked at launch, one per instance, plus a bootstrap port per SGLang prefill worker and a
rendezvous port per SGLang or vLLM instance over several nodes."""
from __future__ import annotations


def launch_problems(p) -> list[str]:
    """A layout perfdag cannot launch (the stack's own role rules are backends/roles.py's)."""
    out = []
    if p.openai.ports:
        out.append("openai.ports: a layout's ports are picked when it launches; remove openai.ports")
    if p.openai.endpoints:
        out.append("openai.endpoints: a layout is launched by perfdag, endpoints are servers it does not launch; "
                   "remove one")
    return out


def port_names(server: str, instances) -> list[str]:
    """The ports a launch needs, by name: each instance's, and each SGLang prefill worker's bootstrap."""
    names = []
    for inst in instances:
        names.append(inst.name)
        if server == "sglang" and inst.role == "context":
            names.append(f"{inst.name}_bootstrap")
        if server in ("sglang", "vllm") and len(inst.nodes) > 1:  # its nodes meet at the first one
            names.append(f"{inst.name}_dist")
    return names
