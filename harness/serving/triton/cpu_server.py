"""One CPU tritonserver (pytriton's binary) started directly, outside the DAG: for tests, benches
and experiments. The DAG launches through the backends and launcher.launch instead."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from harness.serving.ports import port_in_use
from harness.serving.processes import Process, ServerError, spawn, terminate
from harness.serving.shm import remove_shm_files, shm_regions
from harness.serving.spec import LaunchSpec
from harness.serving.triton.client import probe_ready
from harness.serving.triton.client import wait_ready as _wait_ready
from harness.serving.triton.server import cpu_spec, prepare_backend_dir


@dataclass
class TritonServer:
    process: Process
    spec: LaunchSpec
    repo_dir: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def grpc_url(self) -> str:
        return self.spec.url

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def alive(self) -> bool:
        return self.process.alive()

    def diagnostics(self, n: int = 40) -> str:
        return self.process.diagnostics(n)


def start_tritonserver(repo_dir: str | os.PathLike, log_path: str | os.PathLike, *, grpc_port: int, http_port: int,
                       metrics_port: int, bind: str = "127.0.0.1", backend_dir: str | os.PathLike | None = None,
                       die_with_parent: bool = False) -> TritonServer:
    """Starts a CPU tritonserver on `repo_dir` in its own process group; returns at once (see wait_ready).

    Refuses (ServerError) when a port is taken, so a stale server is never silently used.
    `die_with_parent` (Linux) ends it when the starting thread exits: no orphan after a kill.
    """
    repo_dir = Path(repo_dir).resolve()
    if not repo_dir.is_dir():
        raise ServerError(f"model repository {repo_dir} does not exist")
    ports = (int(grpc_port), int(http_port), int(metrics_port))
    if len(set(ports)) != 3:
        raise ServerError(f"grpc/http/metrics ports must differ: {ports}")
    busy = [f"{name}={p}" for name, p in zip(("grpc", "http", "metrics"), ports) if port_in_use(bind, p)]
    if busy:
        raise ServerError(f"cannot start tritonserver: port(s) already in use on {bind}: {', '.join(busy)}")
    backend_dir = Path(backend_dir) if backend_dir is not None else Path(log_path).parent / "backends"
    if not (backend_dir / "python" / "triton_python_backend_stub").is_file():
        prepare_backend_dir(backend_dir)
    models = sorted(p.name for p in repo_dir.iterdir() if (p / "config.pbtxt").is_file())
    spec = cpu_spec(0, repo_dir, models, ports, bind=bind, backend_dir=Path(backend_dir).resolve())
    proc = spawn(spec.argv, log_path, env=spec.base_env, cwd=spec.cwd, die_with_parent=die_with_parent)
    return TritonServer(proc, spec, repo_dir)


def wait_ready(server: TritonServer, timeout_s: float = 120.0, models: Iterable[str] | None = None) -> None:
    _wait_ready(server.process, server.grpc_url, list(server.spec.models if models is None else models), timeout_s)


def is_ready(server: TritonServer, models: Sequence[str] = (), timeout_s: float = 2.0) -> bool:
    return server.alive() and probe_ready(server.grpc_url, models, timeout_s)


def stop_server(server: TritonServer | int, timeout: float = 30.0) -> int | None:
    """Stops the server and its backend stubs (a bare pid works too, for servers started elsewhere).
    A handle's Python-backend shared memory goes too: a server that was killed, or whose model
    failed to load, leaves its 4 MiB regions in /dev/shm, and its prefix is unique to it."""
    if isinstance(server, int):
        return terminate(server, timeout)
    code = terminate(server.pid, timeout, server.process.proc)
    if not server.alive() and server.spec.shm_prefix:
        remove_shm_files(shm_regions(server.spec.shm_prefix))
    return code
