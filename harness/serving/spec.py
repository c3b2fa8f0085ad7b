"""What a backend hands the launcher: one server's command line, environment, ports and models."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.serving.private import Plan
    from harness.slurm import Container


@dataclass(frozen=True)
class LaunchSpec:
    index: int
    argv: list[str]
    host: str
    ports: dict[str, int]                 # by name; "serve" is the one clients use
    models: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)   # set on top of base_env
    base_env: dict[str, str] | None = None              # replaces the inherited environment
    protocol: str = "triton-grpc"
    mode: str = "single"
    repo: str = ""
    cwd: str | None = None
    shm_prefix: str | None = None
    role: str = ""      # its role in a serving layout (server, context, generation, router); "": no layout
    node: str = ""      # the Slurm node it runs on, through `srun --overlap` in this job; "": this process's host
    # One instance over several nodes (tp/pp across nodes): one `srun` step over all of them, with
    # this many tasks on each (MPI ranks, or one process per node) and srun's --mpi plugin ("": none).
    span: tuple[str, ...] = ()
    tasks_per_node: int = 1
    mpi: str = ""
    # The allocation's container (pyxis/enroot's image, or an OCI bundle) for an instance started through
    # srun on another node or over several, so every layout step runs in the job's container.
    container: "Container | None" = None
    # Its private directory (serving/private.py): what is copied there and pinned; argv names it <private>.
    private: "Plan | None" = None

    @property
    def url(self) -> str:
        return f"{self.host}:{self.ports['serve']}"


def url_of(rec: dict) -> str:
    return f"{rec['host']}:{rec.get('port', rec.get('grpc_port'))}"


def this_node() -> str:
    """The node this process runs on: inside a Slurm job its node's name (several nodes may share one host
    name, as scripts/slurm-local.sh's do), else the host name. A recorded pid means something only there."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def on_this_host(rec: dict) -> bool:
    """A server launched inside a Slurm job records its node; one on another node is not ours to
    signal or probe by pid (the job that launched it owns it: it ends with that job)."""
    return not rec.get("node") or rec["node"] == this_node()
