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
WIDE_EP_STACKS = ("trtllm-serve", "sglang", "vllm")  # role fields ep_size, dp_size, dp_attention


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
    out += parallel_problems(lay, stack)
    try:
        place(lay)
    except PlacementError as e:
        out.append(str(e))
    return out


def parallel_problems(lay, stack: str) -> list[str]:
    """Expert parallelism and data-parallel attention as each stack has them: SGLang and trtllm-serve split
    an instance's tp_size ranks (DP attention groups, expert-parallel groups), vLLM runs dp_size engines of
    tp_size x pp_size GPUs and spreads the experts over all tp_size x dp_size ranks."""
    out = []
    for name, role in lay.roles.items():
        if name == "router" or not role.wide:
            continue
        f, tp, dp, ep = f"layout.roles.{name}", role.tp_size, role.dp_size, role.ep_size
        if stack not in WIDE_EP_STACKS:
            out.append(f"{f}: {stack} has no expert parallelism or data-parallel attention; remove ep_size, dp_size, "
                       "dp_attention and moe_a2a_backend")
            continue
        if role.moe_a2a_backend and stack != "sglang":
            out.append(f"{f}.moe_a2a_backend: SGLang's --moe-a2a-backend; {stack} chooses its all-to-all otherwise "
                       "(extra_args, env); remove it")
        if stack == "vllm":
            if role.dp_attention:
                out.append(f"{f}.dp_attention: vLLM runs attention data-parallel through dp_size "
                           "(--data-parallel-size); remove dp_attention")
            if ep > 1 and ep != tp * dp:
                out.append(f"{f}.ep_size: vLLM spreads the experts over tp_size x dp_size = {tp * dp} ranks "
                           f"(--enable-expert-parallel); set ep_size={tp * dp}")
            ws = tp * role.pp_size * dp
            if role.gpus_per_instance and role.gpus_per_instance != ws:
                out.append(f"{f}.gpus_per_instance: {role.gpus_per_instance} GPUs for tp_size*pp_size*dp_size={ws}; "
                           "make them equal")
            if dp > 1 and lay.gpus_per_node and role.gpus_per_instance > lay.gpus_per_node:
                out.append(f"{f}.dp_size: vLLM data parallelism over several nodes is not rendered; keep an "
                           f"instance within a node ({lay.gpus_per_node} GPUs) or use more instances (count)")
            continue
        if tp % ep:
            out.append(f"{f}.ep_size: {ep} must divide tp_size ({tp}): {stack}'s expert-parallel groups split the "
                       "instance's tp_size ranks")
        if stack == "sglang":
            if dp > 1 and not role.dp_attention:
                out.append(f"{f}.dp_size: SGLang's data-parallel ranks inside an instance are its DP attention; set "
                           "dp_attention: true, or raise count for data-parallel instances")
            if role.dp_attention and (dp < 2 or tp % dp):
                out.append(f"{f}.dp_size: SGLang's DP attention splits the tp_size ({tp}) ranks; give a dp_size "
                           "above 1 that divides it")
        elif dp > 1:  # trtllm-serve
            out.append(f"{f}.dp_size: trtllm-serve's attention data parallelism spans the instance's tp_size ranks "
                       "(enable_attention_dp); set dp_attention: true and leave dp_size at 1")
        if dp > 1 and role.gpus_per_instance and role.gpus_per_instance != tp * role.pp_size:
            out.append(f"{f}.gpus_per_instance: {role.gpus_per_instance} GPUs for tp_size*pp_size="
                       f"{tp * role.pp_size}; make them equal")
    return out
