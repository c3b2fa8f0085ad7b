"""Command lines and configs of a serving layout's roles, per stack (pure functions).

- trtllm-serve: context and generation workers are `trtllm-serve` servers whose
  --extra_llm_api_options carry `cache_transceiver_config` (context ones also
  `disable_overlap_scheduler`); the router is `trtllm-serve disaggregated -c <config>`, whose YAML
  lists the workers' `host:port` per role (TensorRT-LLM tensorrt_llm/llmapi/disagg_utils.py,
  extract_disagg_cfg / extract_ctx_gen_cfgs; commands/serve.py `disaggregated`).
- SGLang: workers take `--disaggregation-mode prefill|decode` and
  `--disaggregation-transfer-backend`; prefill ones a `--disaggregation-bootstrap-port`; the router
  is `python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP --decode URL`
  (sgl-router router_args.py), or `--worker-urls` over data-parallel servers.
- vLLM: workers take `--kv-transfer-config` (kv_connector and kv_role, vllm/config/kv_transfer.py);
  the proxy is vllm-project/router's `vllm-router --vllm-pd-disaggregation --kv-connector nixl
  --prefill URL --decode URL` (its Python CLI, router_args.py 0.1.17).

Which flags each parser accepts is pinned in tests/golden/serving_roles/upstream_flags.json (read from
those sources, commits named there) and checked by tests/test_serving_roles.py.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

from harness.backends.openai.servers import binary, llm_api_options, server_argv

# stack -> the KV transfers it knows (the first is what "auto" means)
KV_TRANSFERS = {
    "trtllm-serve": ("DEFAULT", "UCX", "NIXL", "MPI"),            # cache_transceiver_config.backend
    "sglang": ("mooncake", "nixl"),                               # --disaggregation-transfer-backend
    "vllm": ("NixlConnector", "MooncakeConnector"),  # kv_connector (those vllm-router's --kv-connector pairs)
}
VLLM_ROUTER_CONNECTOR = {"NixlConnector": "nixl", "MooncakeConnector": "mooncake"}
SGLANG_MODE = {"context": "prefill", "generation": "decode"}
VLLM_KV_ROLE = {"context": "kv_producer", "generation": "kv_consumer"}  # (NixlConnector: kv_both for both)
ROUTER_POLICY = "round_robin"  # every stack's router has it; layout.roles.router.policy names another
# SGLang's router: sglang-router's module, else smg's (where SGLang's router now lives: `python -m
# sglang_router.launch_router` fails where only smg is installed). Each takes the same options.
SGLANG_ROUTER_MODULES = ("sglang_router", "smg")
# vLLM's KV connectors bind a port per rank from a base port read from the environment (side channel
# for NIXL; the bootstrap server, then a side channel per rank, for Mooncake): set per instance.
VLLM_KV_PORT_ENV = {"NixlConnector": "VLLM_NIXL_SIDE_CHANNEL_PORT", "MooncakeConnector": "VLLM_MOONCAKE_BOOTSTRAP_PORT"}


def sglang_router_module(find=importlib.util.find_spec) -> str:
    """The SGLang router module installed here (sglang_router first; the first when neither is: its
    launch then fails with Python's own 'No module named ...')."""
    return next((m for m in SGLANG_ROUTER_MODULES if find(m) is not None), SGLANG_ROUTER_MODULES[0])


def kv_transfer(layout, stack: str) -> str:
    return KV_TRANSFERS[stack][0] if layout.kv_transfer == "auto" else layout.kv_transfer


def worker_options(p, role_name: str) -> dict:
    """trtllm-serve: a worker's --extra_llm_api_options (the server's, plus its role's KV transfer)."""
    doc = llm_api_options(p)
    role = p.layout.roles[role_name]
    if role.dp_attention:  # TensorRT-LLM llmapi/llm_args.py: attention data-parallel over the tp_size ranks
        doc["enable_attention_dp"] = True
    if role.ep_size > 1:  # the experts over ep_size of the tp_size ranks
        doc["moe_expert_parallel_size"] = role.ep_size
    if role_name in SGLANG_MODE:  # context or generation
        doc["cache_transceiver_config"] = {"backend": kv_transfer(p.layout, "trtllm-serve")}
        if role_name == "context":  # TensorRT-LLM's disaggregated examples: no overlap scheduler on context
            doc["disable_overlap_scheduler"] = True
    return doc


def worker_argv(p, role_name: str, model_dir: str, port: int, *, config_path: str | None = None,
                bootstrap_port: int | None = None) -> list[str]:
    """A context, generation or data-parallel server instance's command line."""
    stack, role = p.openai.server, p.layout.roles[role_name]
    argv = server_argv(p, model_dir, port, config_path=config_path, tp=role.tp_size, pp=role.pp_size)
    argv = argv[:len(argv) - len(p.openai.extra_args)]  # the role's flags, then the server's
    if role_name in SGLANG_MODE and stack == "sglang":
        argv += ["--disaggregation-mode", SGLANG_MODE[role_name],
                 "--disaggregation-transfer-backend", kv_transfer(p.layout, stack)]
        if role_name == "context":
            argv += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    elif role_name in SGLANG_MODE and stack == "vllm":
        connector = kv_transfer(p.layout, stack)
        kv_role = "kv_both" if connector == "NixlConnector" else VLLM_KV_ROLE[role_name]
        argv += ["--kv-transfer-config", json.dumps({"kv_connector": connector, "kv_role": kv_role},
                                                    separators=(",", ":"))]
    argv += wide_ep_flags(stack, role)
    return argv + [str(a) for a in p.openai.extra_args] + [str(a) for a in role.extra_args]


def wide_ep_flags(stack: str, role) -> list[str]:
    """A role's expert parallelism and data-parallel attention as its stack's server flags (SGLang
    server_args.py, vLLM engine/arg_utils.py; trtllm-serve's go in its options: worker_options)."""
    out: list[str] = []
    if stack == "sglang":
        if role.dp_attention:
            out += ["--enable-dp-attention", "--dp-size", str(role.dp_size)]
        if role.ep_size > 1:
            out += ["--ep-size", str(role.ep_size)]
        if role.moe_a2a_backend:
            out += ["--moe-a2a-backend", role.moe_a2a_backend]
    elif stack == "vllm":
        if role.dp_size > 1:
            out += ["--data-parallel-size", str(role.dp_size)]
        if role.ep_size > 1:
            out += ["--enable-expert-parallel"]
    return out


def trtllm_disagg_config(p, workers: dict[str, list[tuple[str, int]]], host: str, port: int) -> dict:
    """trtllm-serve disaggregated's config: its own host and port, each role's workers."""
    doc: dict = {"hostname": host, "port": port, "backend": "pytorch"}
    policy = p.layout.roles["router"].policy or ROUTER_POLICY
    for role_name, key in (("context", "context_servers"), ("generation", "generation_servers")):
        role = p.layout.roles[role_name]
        doc[key] = {"num_instances": role.count, "tensor_parallel_size": role.tp_size,
                    "pipeline_parallel_size": role.pp_size, "urls": [f"{h}:{pt}" for h, pt in workers[role_name]],
                    "router": {"type": policy}}
    return doc


def _program(name: str) -> str:
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else (shutil.which(name) or name)


def router_argv(p, workers: dict[str, list[tuple[str, int]]], host: str, port: int, *,
                config_path: str | None = None, bootstrap_ports: list | None = None,
                metrics_port=None) -> list[str]:
    """The router's command line: the layout's one front door, its Prometheus exporter on its own port
    (both routers default to 29000: two on one node would clash)."""
    stack, role = p.openai.server, p.layout.roles["router"]
    extra = [str(a) for a in role.extra_args]
    if stack == "trtllm-serve":
        t = str(int(p.openai.ready_timeout_s))
        return [binary(p), "disaggregated", "-c", str(config_path), "-t", t, "-r", t] + extra
    argv = [sys.executable, "-m", f"{sglang_router_module()}.launch_router"] if stack == "sglang" \
        else [_program("vllm-router")]
    argv += ["--host", host, "--port", str(port), "--policy", role.policy or ROUTER_POLICY]
    if metrics_port is not None:
        argv += ["--prometheus-port", str(metrics_port), "--prometheus-host", host]
    if "context" in workers and stack == "vllm":  # vllm-router's PD mode has its own flag and KV connector
        argv += ["--vllm-pd-disaggregation", "--kv-connector", VLLM_ROUTER_CONNECTOR[kv_transfer(p.layout, stack)]]
    elif "context" in workers:
        argv += ["--pd-disaggregation"]
    if "context" in workers:
        for (h, pt), boot in zip(workers["context"], bootstrap_ports or [None] * len(workers["context"])):
            argv += ["--prefill", f"http://{h}:{pt}"] + ([str(boot)] if boot is not None else [])
        for h, pt in workers["generation"]:
            argv += ["--decode", f"http://{h}:{pt}"]
    else:
        argv += ["--worker-urls", *[f"http://{h}:{pt}" for h, pt in workers["server"]]]
    return argv + extra


# An instance over several nodes is one `srun` step over them (serving/launcher.placed_argv). Per stack:
# - trtllm-serve: one MPI rank per GPU under `trtllm-llmapi-launch` (srun --mpi=pmix): rank 0 serves,
#   the others join its MPI world (TensorRT-LLM's multi-node serving with Slurm);
# - SGLang: one process per node, `--nnodes N --node-rank R --dist-init-addr <first node>:<port>`;
# - vLLM: one process per node, `--nnodes N --node-rank R --master-addr/--master-port`, `--headless`
#   on every node but the first (its multiprocessing executor, no Ray).
# The node rank is the step's task rank (SLURM_PROCID), read by a shell on each node.
NODE_RANK = {"sglang": 'exec "$@" --node-rank "$SLURM_PROCID"',
             "vllm": 'if [ "$SLURM_PROCID" = 0 ]; then exec "$@" --node-rank 0; fi; '
                     'exec "$@" --node-rank "$SLURM_PROCID" --headless'}


def spanning(p, inst, argv: list[str], hosts: list[str], dist_port: int | None) -> tuple[list[str], dict]:
    """An instance over several nodes: its command line on each, and its step's shape (tasks per node, MPI)."""
    stack, n, head = p.openai.server, len(inst.nodes), hosts[inst.nodes[0]]
    if stack == "trtllm-serve":
        return [_program("trtllm-llmapi-launch"), *argv], {"tasks_per_node": p.layout.gpus_per_node, "mpi": "pmix"}
    if stack == "sglang":
        argv = [*argv, "--nnodes", str(n), "--dist-init-addr", f"{head}:{dist_port}"]
    else:
        argv = [*argv, "--nnodes", str(n), "--master-addr", head, "--master-port", str(dist_port)]
    return ["/bin/sh", "-c", NODE_RANK[stack], "node-rank", *argv], {"tasks_per_node": 1, "mpi": ""}


def render(p, instances, hosts: list[str], ports: dict[str, int], repo_dir: str, model_dir: str) -> list[dict]:
    """Every instance of the layout: its role, node, command line, environment and config files.
    `instances` come from serving.layout.place; `hosts[k]` is node k's address, `ports[name]` an
    instance's port (and `<name>_bootstrap` a prefill worker's bootstrap port for SGLang)."""
    stack = p.openai.server
    workers: dict[str, list[tuple[str, int]]] = {}
    for inst in instances:
        if inst.role != "router":
            workers.setdefault(inst.role, []).append((hosts[inst.nodes[0]], ports[inst.name]))
    boots = [ports[f"{i.name}_bootstrap"] for i in instances if i.role == "context"] if stack == "sglang" else None
    out = []
    for inst in instances:
        host, files = hosts[inst.nodes[0]], {}
        cfg = os.path.join(repo_dir, inst.name, "config.yaml")
        if inst.role == "router":
            if stack == "trtllm-serve":
                files["config.yaml"] = trtllm_disagg_config(p, workers, p.openai.bind, ports[inst.name])
            if stack == "vllm" and p.layout.disaggregated and kv_transfer(p.layout, stack) == "MooncakeConnector":
                # vllm-router asks each prefill worker's Mooncake bootstrap server for its engines
                boots = [r["env"]["VLLM_MOONCAKE_BOOTSTRAP_PORT"] for r in out if r["role"] == "context"]
            argv = router_argv(p, workers, p.openai.bind, ports[inst.name], config_path=cfg, bootstrap_ports=boots,
                               metrics_port=ports.get(f"{inst.name}_metrics"))
            # SGLang's and vLLM's routers retitle themselves with setproctitle, which overwrites the process's
            # environment as /proc shows it, launch token and all: perfdag would no longer know its own router
            # and never stop it. SPT_NOENV keeps the environment (the title fits the command line instead).
            env = {"SPT_NOENV": "1"} if stack in ("sglang", "vllm") else {}
        else:
            if stack == "trtllm-serve":
                files["config.yaml"] = worker_options(p, inst.role)
            argv = worker_argv(p, inst.role, model_dir, ports[inst.name],
                               config_path=cfg if stack == "trtllm-serve" else None,
                               bootstrap_port=ports.get(f"{inst.name}_bootstrap"))
            env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, inst.gpus))} if inst.gpus else {}
            if stack == "vllm" and inst.role in SGLANG_MODE:  # each instance's own KV-transfer ports
                connector = kv_transfer(p.layout, stack)
                env[VLLM_KV_PORT_ENV[connector]] = str(ports[f"{inst.name}_kv"])
                if connector == "NixlConnector":  # (its default, localhost, is not reachable from another node)
                    env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = host
        env = {**env, **p.layout.roles[inst.role].env}  # the role's own settings win
        step = {}
        if len(inst.nodes) > 1:
            argv, step = spanning(p, inst, argv, hosts, ports.get(f"{inst.name}_dist"))
        out.append({"name": inst.name, "role": inst.role, "nodes": list(inst.nodes), "host": host,
                    "port": ports[inst.name], "argv": argv, "env": env, "files": files, **step})
    return out
