"""tritonserver command lines for TensorRT-LLM engines, rendered as the launcher's LaunchSpecs.

Per server (see layout.py for the modes):
- single:       `tritonserver ...` with CUDA_VISIBLE_DEVICES = its GPUs.
- leader:       `mpirun --allow-run-as-root -n 1 tritonserver <serving args> : -n 1 tritonserver
                --model-control-mode=explicit --load-model=<model> <no endpoints> : ...`, one
                `-n 1` block per MPI rank (tp*pp), as tensorrtllm_backend's launch_triton_server.py
                does; only rank 0 serves gRPC/HTTP, every rank its own python shm prefix.
- orchestrator: `mpirun -n 1 tritonserver ...` with TRTLLM_ORCHESTRATOR=1: the backend spawns each
                model's MPI workers (launch_triton_server.py --multi-model).
`env` in a LaunchSpec is only what to set on top of the caller's environment. The servers run in their
private directory (serving/private.py), where the repository is copied and the engine pinned at the
paths they have under the root, so config.pbtxt names the engine by its path relative to the root.
"""
from __future__ import annotations

import os
from typing import Callable, NamedTuple, Sequence

from harness.backends.trtllm import build as trtllm_build  # trtllm_version: read at call time
from harness.backends.trtllm.layout import ServerPlan, server_layout
from harness.serving.ports import server_ports
from harness.serving.spec import LaunchSpec

DEFAULT_BINARY = "/opt/tritonserver/bin/tritonserver"  # NVIDIA's Triton + TRT-LLM container


class ServerPorts(NamedTuple):
    grpc: int
    http: int
    metrics: int


def resolve_binary(binary: str) -> str:
    """triton.binary for trtllm: 'auto' is the NVIDIA container's tritonserver (pytriton's has no
    tensorrtllm backend)."""
    return DEFAULT_BINARY if binary in ("auto", "", None) else binary


def _shm_arg(prefix: str, server: int, rank: int) -> str:
    return f"--backend-config=python,shm-region-prefix-name={prefix}{server}_rank{rank}_"


def _serving_args(binary: str, repo: str, ports: ServerPorts, bind: str) -> list[str]:
    return [binary, f"--model-repository={repo}",
            f"--grpc-address={bind}", f"--grpc-port={ports.grpc}",
            f"--http-address={bind}", f"--http-port={ports.http}",
            f"--metrics-address={bind}", f"--metrics-port={ports.metrics}",
            "--disable-auto-complete-config"]


def _worker_args(binary: str, repo: str, models: Sequence[str]) -> list[str]:
    return [binary, f"--model-repository={repo}", "--model-control-mode=explicit",
            *[f"--load-model={m}" for m in models],
            "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false",
            "--disable-auto-complete-config"]


def server_command(plan: ServerPlan, repo: str, ports: ServerPorts, *, binary: str = DEFAULT_BINARY,
                   mpirun: str = "mpirun", bind: str = "127.0.0.1", shm_prefix: str = "perfdag_s",
                   cwd: str | None = None) -> LaunchSpec:
    """The command and extra environment for one server of the layout."""
    env = {"CUDA_VISIBLE_DEVICES": plan.cuda_visible_devices}
    rank0 = _serving_args(binary, repo, ports, bind) + [_shm_arg(shm_prefix, plan.index, 0)]
    if plan.mode == "single":
        argv = rank0
    elif plan.mode == "leader":
        argv = [mpirun, "--allow-run-as-root", "-n", "1", *rank0]
        for rank in range(1, plan.world_size):
            argv += [":", "-n", "1", *_worker_args(binary, repo, plan.models), _shm_arg(shm_prefix, plan.index, rank)]
    elif plan.mode == "orchestrator":
        pools = [f"--cuda-memory-pool-byte-size={j}:0" for j in range(len(plan.gpus))]
        argv = [mpirun, "--allow-run-as-root", "-n", "1", *rank0,
                "--pinned-memory-pool-byte-size=0", "--enable-peer-access=false", *pools]
        env.update(TRTLLM_ORCHESTRATOR="1", TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES="1")
    else:
        raise ValueError(f"unknown server mode {plan.mode!r}")
    return LaunchSpec(index=plan.index, argv=argv, host=bind, env=env, models=plan.models, mode=plan.mode, repo=repo,
                      cwd=cwd, ports={"serve": ports.grpc, "http": ports.http, "metrics": ports.metrics},
                      shm_prefix=f"{shm_prefix}{plan.index}_")


def tritonserver_commands(params, repo_dir, ports: Sequence[ServerPorts | tuple[int, int, int]], *,
                          binary: str | None = None, mpirun: str = "mpirun", bind: str | None = None,
                          shm_prefix: str = "perfdag_s", cwd: str | None = None) -> list[LaunchSpec]:
    """One LaunchSpec per server: repo `repo_dir/server_<i>`, ports[i] = (grpc, http, metrics).
    The servers run in `cwd` (the artifacts root: repository and engine paths are relative to it)."""
    if params.triton.endpoints:
        raise ValueError("triton.endpoints is set: the servers are external, perfdag launches none")
    plans = server_layout(params)
    if len(ports) != len(plans):
        raise ValueError(f"{len(ports)} port triples for {len(plans)} servers")
    binary = resolve_binary(binary if binary is not None else params.triton.binary)
    bind = bind if bind is not None else params.triton.bind
    return [server_command(plan, os.path.join(os.fspath(repo_dir), f"server_{plan.index}"), ServerPorts(*p),
                           binary=binary, mpirun=mpirun, bind=bind, shm_prefix=shm_prefix, cwd=cwd)
            for plan, p in zip(plans, ports)]


def pick_ports(params, free_port: Callable[[str], int]) -> list[ServerPorts]:
    """triton.grpc_ports (or free ones) plus free HTTP and metrics ports, one triple per server."""

    triples = server_ports(len(server_layout(params)), params.triton.bind, params.triton.grpc_ports, pick=free_port)
    return [ServerPorts(*t) for t in triples]


# ---------------------------------------------------------------------------------------------
# Versions that enter the LaunchServers key, and the process start (thin)
# ---------------------------------------------------------------------------------------------

def serving_key_tools() -> dict[str, str]:
    """tritonserver (NVIDIA containers export NVIDIA_TRITON_SERVER_VERSION) and TensorRT-LLM versions."""
    return {"tritonserver": os.environ.get("NVIDIA_TRITON_SERVER_VERSION") or "absent",
            "tensorrt_llm": trtllm_build.trtllm_version()}
