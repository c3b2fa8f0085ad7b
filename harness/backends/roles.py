"""Which layout roles each serving stack has, and the layout's problems for the chosen one.

The `layout` section's own rules (harness/config/layout.py) hold for every stack; these are the
stack's: a role it does not have, a KV transfer it does not know, counts that do not fit the
allocation, a layout over several nodes without a Slurm serving allocation. Each problem names
its field and the fix.
"""
from __future__ import annotations

from harness.backends.openai.disagg import KV_TRANSFERS
from harness.serving.layout import PlacementError, place

# stack -> the roles it can run (its router: trtllm-serve disaggregated, sglang_router, vllm-router)
STACK_ROLES = {
    "tritonserver": ("server",),
    "transformers": ("server",),
    "trtllm-serve": ("context", "generation", "router", "server"),
    "sglang": ("context", "generation", "router", "server"),
    "vllm": ("context", "generation", "router", "server"),
}
# The routing policies of each stack's router that perfdag renders (layout.roles.router.policy):
# sglang-router 0.3.2's --policy choices (smg 1.13 has them all, and more), vllm-router 0.1.17's, and
# trtllm-serve disaggregated's router types (tensorrt_llm/serve/router.py). Checked against the installed
# routers' own parsers by tests/test_real_routers.py.
ROUTER_POLICIES = {
    "sglang": ("random", "round_robin", "cache_aware", "power_of_two", "manual"),
    "vllm": ("random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash",
             "sticky_least_loaded"),
    "trtllm-serve": ("round_robin", "load_balancing", "kv_cache_aware"),
}
# stacks whose router fronts data-parallel servers too (trtllm-serve's needs context and generation)
DP_ROUTERS = ("sglang", "vllm")
DISAGG_STACKS = tuple(s for s, roles in STACK_ROLES.items() if "context" in roles)


def layout_problems(p, stack: str) -> list[str]:
    lay = p.layout
    if lay is None:
        return []
    out = []
    for name in lay.roles:
        if name not in STACK_ROLES[stack]:
            how = (f"use build.backend=openai with openai.server one of {', '.join(DISAGG_STACKS)}"
                   if name in ("context", "generation") else "remove it")
            out.append(f"layout.roles.{name}: {stack} has no {name} role; {how}")
    if "router" in lay.roles and not lay.disaggregated and stack not in DP_ROUTERS:
        out.append(f"layout.roles.router: {stack} has no router over data-parallel servers (clients spread over "
                   "them instead); remove it")
    if lay.kv_transfer != "auto":
        if not lay.disaggregated:
            out.append("layout.kv_transfer: only a disaggregated layout moves KV caches; remove it")
        elif stack in KV_TRANSFERS and lay.kv_transfer not in KV_TRANSFERS[stack]:
            out.append(f"layout.kv_transfer: {stack} knows {', '.join(KV_TRANSFERS[stack])}, not {lay.kv_transfer!r}")
    policy = lay.roles["router"].policy if "router" in lay.roles else ""
    if policy and stack in ROUTER_POLICIES and policy not in ROUTER_POLICIES[stack]:
        out.append(f"layout.roles.router.policy: {stack}'s router knows {', '.join(ROUTER_POLICIES[stack])}, "
                   f"not {policy!r}")
    for section in ("triton", "openai"):
        if "num_servers" in getattr(p, section).model_fields_set:
            out.append(f"{section}.num_servers: the layout's roles decide the servers; remove it")
    if p.build.device == "cpu":
        out += [f"layout.roles.{n}.gpus_per_instance: build.device=cpu; use 0"
                for n, r in lay.roles.items() if r.gpus_per_instance]
    if lay.nodes > 1 and (p.slurm is None or not p.slurm.serve):
        out.append(f"layout.nodes: {lay.nodes} nodes need a Slurm serving allocation; set the slurm section "
                   "(slurm.serve: true)")
    if p.slurm is not None and "LaunchServers" in p.slurm.gpus_per_stage:
        out.append("slurm.gpus_per_stage.LaunchServers: the layout asks layout.nodes x layout.gpus_per_node for "
                   "serving; remove it")
    try:
        place(lay)
    except PlacementError as e:
        out.append(str(e))
    return out
