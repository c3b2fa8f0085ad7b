"""Data-parallel layout: which GPUs each engine replica (DP rank) uses, and which tritonserver
process serves it.

One DP rank = one TensorRT-LLM engine replica on tp_size*pp_size GPUs. DP ranks =
runtime.num_gpus / (tp*pp). They are spread evenly over triton.num_servers processes (NVIDIA's
convention: 1 server for Offline, one per DP rank for Server, because a gRPC channel carries
~100 concurrent streams). Each server sees only its own GPUs (CUDA_VISIBLE_DEVICES) and each
model's `gpu_device_ids` are ordinals among those.

How a server runs its ranks (`mode`):
- single:       tp*pp == 1; a plain tritonserver, one model per rank, each on its own GPU.
- leader:       tp*pp > 1, one rank per server; `mpirun -n tp*pp` tritonservers, rank 0 serves.
- orchestrator: tp*pp > 1, several ranks per server; one tritonserver with TRTLLM_ORCHESTRATOR=1,
                which spawns the MPI workers of every model itself.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.serving.triton.pbtxt import model_names


@dataclass(frozen=True)
class ServerPlan:
    index: int
    gpus: tuple[int, ...]                  # physical GPU ids -> CUDA_VISIBLE_DEVICES, in this order
    ranks: tuple[tuple[int, ...], ...]     # per model: physical GPU ids
    models: tuple[str, ...]                # Triton model names, one per rank
    mode: str                              # single | leader | orchestrator
    world_size: int                        # tp*pp

    @property
    def local_device_ids(self) -> list[list[int]]:
        """Per model: GPU ordinals as the server sees them (after CUDA_VISIBLE_DEVICES)."""
        pos = {g: i for i, g in enumerate(self.gpus)}
        return [[pos[g] for g in rank] for rank in self.ranks]

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(map(str, self.gpus))


def world_size(params) -> int:
    return params.build.tp_size * params.build.pp_size


def dp_ranks(params) -> int:
    """Data-parallel ranks on this node (0 when tp*pp does not divide runtime.num_gpus)."""
    ws = world_size(params)
    n = params.runtime.num_gpus
    return n // ws if n % ws == 0 else 0


def data_parallel_layout(params) -> list[list[int]]:
    """Physical GPU ids per DP rank: runtime.gpu_device_ids, or consecutive blocks of tp*pp."""
    if params.runtime.gpu_device_ids:
        return [list(g) for g in params.runtime.gpu_device_ids]
    ws = world_size(params)
    return [list(range(r * ws, (r + 1) * ws)) for r in range(dp_ranks(params))]


def default_num_servers(params) -> int:
    """NVIDIA's convention: Offline 1 server; Server/Interactive one per DP rank."""
    return 1 if params.loadgen.scenario == "Offline" else max(1, dp_ranks(params))


def num_servers(params) -> int:
    n = params.triton.num_servers
    return default_num_servers(params) if n is None else int(n)



def server_layout(params) -> list[ServerPlan]:
    """The servers and their ranks. Raises ValueError when the ranks cannot be spread evenly."""
    ranks = data_parallel_layout(params)
    n = num_servers(params)
    if not ranks:
        raise ValueError(f"runtime.num_gpus={params.runtime.num_gpus} is not a multiple of tp*pp={world_size(params)}")
    if len(ranks) % n:
        raise ValueError(f"{len(ranks)} data-parallel ranks do not spread evenly over triton.num_servers={n}")
    per = len(ranks) // n
    ws = world_size(params)
    mode = "single" if ws == 1 else ("leader" if per == 1 else "orchestrator")
    plans = []
    for s in range(n):
        mine = ranks[s * per:(s + 1) * per]
        gpus = tuple(g for rank in mine for g in rank)
        plans.append(ServerPlan(index=s, gpus=gpus, ranks=tuple(tuple(r) for r in mine),
                                models=tuple(model_names(params.triton.model_name, per)), mode=mode, world_size=ws))
    return plans


__all__ = [
    "ServerPlan",
    "data_parallel_layout",
    "default_num_servers",
    "dp_ranks",
    "model_names",
    "num_servers",
    "server_layout",
    "world_size",
]
