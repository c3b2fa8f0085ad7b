"""The tritonserver binary: where it is, the environment its Python-backend stubs need, its argv.

On CPU the binary, the Python backend and per-Python-version stubs come from the
`nvidia-pytriton` wheel. Pitfalls handled here:
- The stub embeds CPython and must match the running interpreter: the stub of
  `sys.version_info` is copied next to `libtriton_python.so`.
- It dlopens `libpython3.X.so`: LD_LIBRARY_PATH starts with the running interpreter's LIBDIR,
  or the system libpython is picked up (`undefined symbol: _PyModule_Add`);
  `nvidia_pytriton.libs` supplies the server's own libraries.
- The stub imports numpy/torch from whatever environment it finds: the venv's bin/ goes first
  on PATH (the stub runs Python isolated: it ignores PYTHONPATH and finds `harness` through the
  venv's editable install; it puts '' first on its search path, the directory it runs in).
- Each server gets its own Python shared-memory prefix, so concurrent servers never share
  /dev/shm regions, and the regions of a dead server can be found and removed.
- The Python backend starts its stub through a shell (`bash -c "exec <stub> <model.py> ..."`,
  unquoted): a path with a space, `$` or non-ASCII characters breaks it. Launched servers run
  from their private directory (serving/private.py), whose path is plain whatever the root's is.
- DAG launches copy the Python backend (`backend_copies`) into that private directory; tests and
  benches assemble one with `prepare_backend_dir`.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Sequence

from harness import CHECKOUT
from harness.serving.private import Copied, file_copy
from harness.serving.processes import ServerError
from harness.serving.shm import shm_prefix
from harness.serving.spec import LaunchSpec

REPO_ROOT = CHECKOUT


def _pytriton_root() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError("nvidia-pytriton is not installed (it provides the CPU tritonserver binary)")
    return Path(list(spec.submodule_search_locations)[0])


def tritonserver_dist() -> Path:
    """`.../site-packages/pytriton/tritonserver` (bin/, backends/, python_backend_stubs/)."""
    dist = _pytriton_root() / "tritonserver"
    if not (dist / "bin" / "tritonserver").is_file():
        raise ServerError(f"tritonserver binary not found under {dist}")
    return dist


def tritonserver_binary() -> Path:
    return tritonserver_dist() / "bin" / "tritonserver"


def python_backend_stub(version: str | None = None) -> Path:
    """The Python-backend stub built for `version` (default: the running Python, "3.X")."""
    version = version or f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = tritonserver_dist() / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        have = sorted(p.name for p in (tritonserver_dist() / "python_backend_stubs").iterdir())
        raise ServerError(f"no Python-backend stub for Python {version} in nvidia-pytriton (has: {have})")
    return stub


def prepare_backend_dir(dest: str | os.PathLike) -> Path:
    """`dest/python/` with libtriton_python.so, triton_python_backend_utils.py and the stub of the
    running Python; returns `dest` (the `--backend-directory`). Idempotent."""
    dest = Path(dest)
    pydir = dest / "python"
    pydir.mkdir(parents=True, exist_ok=True)
    src = tritonserver_dist() / "backends" / "python"
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        _copy_if_changed(src / name, pydir / name)
    stub = pydir / "triton_python_backend_stub"
    _copy_if_changed(python_backend_stub(), stub)
    stub.chmod(0o755)
    return dest


def backend_copies(dest: str = "backend") -> list[Copied]:
    """What a launch copies into a server's private directory as its `--backend-directory` (`dest`):
    the Python backend of the wheel and the stub of the running Python, with their digests now."""
    src = tritonserver_dist() / "backends" / "python"
    return [file_copy(src / "libtriton_python.so", f"{dest}/python/libtriton_python.so"),
            file_copy(src / "triton_python_backend_utils.py", f"{dest}/python/triton_python_backend_utils.py"),
            file_copy(python_backend_stub(), f"{dest}/python/triton_python_backend_stub", mode=0o700)]


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.is_file() and dst.stat().st_size == src.stat().st_size and dst.stat().st_mtime >= src.stat().st_mtime:
        return
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def env_prefixes() -> dict[str, list[str]]:
    """What perfdag puts in front of PATH-like variables for the server (and nothing else)."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    return {"PATH": [str(Path(sys.executable).parent)],
            "LD_LIBRARY_PATH": [p for p in (libdir, str(_pytriton_root().parent / "nvidia_pytriton.libs")) if p],
            "PYTHONPATH": [str(REPO_ROOT)]}


def server_env(base: dict | None = None) -> dict:
    """The environment for a tritonserver whose Python-backend stubs run *this* interpreter."""
    env = dict(os.environ if base is None else base)
    for var, first in env_prefixes().items():
        env[var] = os.pathsep.join(first + ([env[var]] if env.get(var) else []))
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    # Meant to keep __pycache__ out of published repositories; the Python-backend stub ignores it,
    # so the repositories block the cache with a file of that name (serving/pbtxt.py).
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONHOME", None)
    return env


def env_overlay_described() -> dict[str, str]:
    """`server_env` as a shell would write it (`$PATH` for the inherited rest): what keys take."""
    out = {var: os.pathsep.join(first + [f"${var}"]) for var, first in env_prefixes().items()}
    if sys.prefix != sys.base_prefix:
        out["VIRTUAL_ENV"] = sys.prefix
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    return out


def cpu_argv(repo_dir: str, *, grpc_port: int | str, http_port: int | str, metrics_port: int | str,
             bind: str, backend_dir: str, shm: str, binary: str | None = None, cache_dir: str | None = None,
             exit_timeout_s: int = 10, shm_default_bytes: int = 4 << 20, shm_growth_bytes: int = 1 << 20,
             extra: Sequence[str] = ()) -> list[str]:
    """The command line of a CPU tritonserver (pytriton's binary) serving Python-backend models."""
    return [
        binary or str(tritonserver_binary()),
        f"--model-repository={repo_dir}",
        f"--backend-directory={backend_dir}",
        f"--cache-directory={cache_dir or tritonserver_dist() / 'caches'}",
        f"--grpc-address={bind}", f"--grpc-port={grpc_port}",
        f"--http-address={bind}", f"--http-port={http_port}",
        f"--metrics-address={bind}", f"--metrics-port={metrics_port}",
        "--allow-gpu-metrics=false",
        "--strict-readiness=true",
        "--disable-auto-complete-config",
        f"--exit-timeout-secs={int(exit_timeout_s)}",
        f"--backend-config=python,shm-region-prefix-name={shm}",
        f"--backend-config=python,shm-default-byte-size={int(shm_default_bytes)}",
        f"--backend-config=python,shm-growth-byte-size={int(shm_growth_bytes)}",
        "--log-verbose=0",
        *map(str, extra),
    ]


def cpu_spec(index: int, repo_dir: str | os.PathLike, models: Sequence[str], ports: Sequence, *, bind: str,
             backend_dir: str | os.PathLike, cwd: str | os.PathLike | None = None, env: dict | None = None,
             shm: str | None = None, binary: str | None = None, protocol: str = "triton-grpc", serve: str = "grpc"):
    """The LaunchSpec of one CPU tritonserver on `repo_dir` (ports: gRPC, HTTP, metrics). Paths may
    be relative to `cwd` (default: the repository itself). `serve`: the port its clients use ("grpc"
    or "http"), for `protocol`."""
    import uuid

    grpc, http, metrics = ports
    shm = shm or shm_prefix(f"{os.getpid()}_{uuid.uuid4().hex[:8]}")
    repo = os.fspath(repo_dir)
    argv = cpu_argv(repo, grpc_port=grpc, http_port=http, metrics_port=metrics, bind=bind,
                    backend_dir=os.fspath(backend_dir), shm=shm, binary=binary)
    return LaunchSpec(index=index, argv=argv, host=bind, models=tuple(models),
                      base_env=server_env() if env is None else env,
                      ports={"serve": http, "grpc": grpc, "metrics": metrics} if serve == "http" else
                      {"serve": grpc, "http": http, "metrics": metrics}, protocol=protocol, repo=repo,
                      cwd=os.fspath(cwd) if cwd is not None else repo, shm_prefix=shm)
