"""The one interface every backend implements, stage by stage.

A backend turns (checkpoint, quantize, build, runtime) into servers that speak a protocol the
LoadGen SUT has a core for. Tasks ask `backend_for(params)` and call these methods; they never
branch on a backend's name. Everything that decides *what* runs (command lines, configs, plans)
is a pure function of the parameters, so it is tested on CPU and can enter the stage keys.

Keys (harness/cache/codehash.py, harness/cache/executed.py): where perfdag's own code does a stage's work the
backend lists those modules (`*_code`), and their digests enter the key; where an external tool
does it (modelopt export, trtllm-build, tritonserver, mpirun) the backend renders what the tool
is handed (`*_executed`), normalised, and that enters the key instead of the renderer's source.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

Log = Callable[[str], None]


class Backend:
    name: str = ""
    protocol: str = "triton-grpc"   # what its servers speak: "triton-grpc" | "openai-http"
    export: str = "hf"              # what Quantize writes; backends with the same export share it
    server_section: str = "triton"  # the params section that configures its servers

    # --- validation (before any stage runs) -------------------------------------------------
    def problems(self, params) -> list[str]:
        """Every 'field: what is wrong; the fix' this backend finds in the parameters."""
        return []

    def notes(self, params) -> list[str]:
        """Advice that does not block a run."""
        return []

    # --- Quantize ---------------------------------------------------------------------------
    def quantize_reads(self, params) -> tuple[str, ...]:
        return ("quantize", "build.device")

    def quantize_tools(self, params) -> dict[str, str]:
        return {}

    def quantize_code(self, params) -> tuple[str, ...]:
        return ("harness.model.calibration", "harness.model.corpus")

    def quantize_executed(self, params) -> dict:
        return {}

    def quantize(self, src: Path, out_dir: Path, params, log: Log, final_dir: Path) -> dict:
        """Writes the quantized checkpoint under `out_dir` (published as `final_dir`); returns manifest
        fields, with `checkpoint` the checkpoint's path relative to the artifact."""
        raise NotImplementedError

    # --- BuildEngine ------------------------------------------------------------------------
    def build_tools(self, params) -> dict[str, str]:
        return {}

    def build_code(self, params) -> tuple[str, ...]:
        return ()

    def build_executed(self, params) -> dict:
        return {}

    def build(self, checkpoint: Path, out_dir: Path, params, log: Log, final_dir: Path | None = None) -> dict:
        """Writes the engine to `out_dir/engine` (published as `final_dir`); returns manifest fields,
        with `engine` the engine's path relative to the artifact."""
        raise NotImplementedError

    # --- FillTritonRepo (the servers' configuration) ----------------------------------------
    def repo_reads(self, params) -> tuple[str, ...]:
        return ("runtime", "triton.model_name", "build.backend", "build.tp_size", "build.pp_size")

    def num_servers(self, params) -> int:
        """Servers to launch: triton.num_servers, else 1 for Offline and one per data-parallel rank
        for Server/Interactive (NVIDIA's convention). One rank unless a backend says otherwise."""
        n = params.triton.num_servers
        return int(n) if n is not None else 1

    def repo_code(self, params) -> tuple[str, ...]:
        return ()

    def render_repos(self, params, engine_rel: str, decoupled: bool) -> dict[str, dict[str, str]]:
        """{repo: {file name: text}}: the configuration the servers are handed (keyed)."""
        return {}

    def fill(self, engine_dir: Path, engine_rel: str, out_dir: Path, params, decoupled: bool) -> dict:
        """Writes the servers' configuration under `out_dir`; returns the layout (manifest field).
        `engine_rel` is the engine directory relative to the artifacts root (servers run there), so
        the root can be moved."""
        raise NotImplementedError

    # --- LaunchServers ----------------------------------------------------------------------
    def launch_reads(self, params) -> tuple[str, ...]:
        """The fields of its server section that say which servers run or are measured: keyed even when
        nothing is launched (external endpoints, where `launch_executed` is empty)."""
        return ("triton.bind", "triton.grpc_ports", "triton.endpoints", "triton.binary")

    def serving_tools(self, params) -> dict[str, str]:
        return {}

    def launch_executed(self, params, repo_rel: str) -> dict:
        """The server command lines and environment, with placeholders for ports and paths."""
        return {}

    def launch(self, repo_rel: str, layout: dict, out_dir: Path, params, *, root: Path,
               on_spawn: Callable[[dict], None], log: Log) -> list[dict]:
        """Starts the servers (or checks external ones) in the artifacts root `root`, on the
        configuration at `repo_rel` (relative to it); returns their records."""
        raise NotImplementedError
