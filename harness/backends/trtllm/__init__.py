"""The `trtllm` (GPU) backend: TensorRT-LLM engines served by Triton's tensorrtllm backend.

Everything that decides *what* runs is a pure function of the resolved `Params`, tested on CPU:

- `quant`   modelopt preset + KV-cache config, checkpoint export plan (TRTLLM_CHECKPOINT_FLAGS)
- `build`   the `trtllm-build` argv, what it would reject or silently change
- `engine_check`  the built engine's config.json against what was asked
- `layout`  data-parallel ranks, their GPUs, and how they are spread over tritonserver processes
- `repo`    the `tensorrt_llm` model's config.pbtxt (TRTLLM_RUNTIME_FLAGS)
- `launch`  tritonserver / mpirun command lines
- `rules`   cross-field validation for build.backend == trtllm

The calls that need a GPU (`quantize_for_trtllm`, `run_trtllm_build`, the server processes) are
thin wrappers around those plans. No luigi imports.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from harness.backends.base import Backend
from harness.backends.trtllm.build import (
    build_problems,
    engine_key_tools,
    run_trtllm_build,
    trtllm_build_args,
    trtllm_version,
)
from harness.backends.trtllm.common import TrtllmError, raise_if
from harness.backends.trtllm.engine_check import check_engine_config
from harness.backends.trtllm.launch import pick_ports, serving_key_tools, tritonserver_commands
from harness.backends.trtllm.layout import num_servers, server_layout
from harness.backends.trtllm.quant import checkpoint_config_problems, export_plan, quantize_for_trtllm
from harness.backends.trtllm.repo import fill_trtllm_repos, render_server_repos
from harness.backends.trtllm.rules import trtllm_notes, trtllm_problems
from harness.cache.executed import normalise
from harness.cache.versions import versions
from harness.model.calibration import calibration_prompts
from harness.serving.endpoints import parse_endpoints
from harness.serving.launcher import external_servers, launch
from harness.serving.ports import free_port
from harness.serving.triton.pbtxt import model_names

__all__ = ["TrtllmBackend", "TrtllmError"]


@lru_cache(maxsize=1)
def engine_key_tools_cached() -> dict:
    """TensorRT-LLM version + GPU architecture (runs nvidia-smi: once per process)."""
    return engine_key_tools()


class TrtllmBackend(Backend):
    name = "trtllm"
    export = "trtllm-checkpoint"

    def problems(self, p) -> list[str]:
        return trtllm_problems(p)

    def notes(self, p) -> list[str]:
        return trtllm_notes(p)

    # --- Quantize: a TensorRT-LLM checkpoint is sharded for tp x pp and cast to the dtype -----
    def quantize_reads(self, p) -> tuple[str, ...]:
        return super().quantize_reads(p) + ("build.tp_size", "build.pp_size", "build.dtype")

    def quantize_code(self, p) -> tuple[str, ...]:
        # perfdag's own part of the checkpoint: the presets in modelopt's running shape, unfused
        # transformers-5 experts, and the source's RoPE written after export (then checked).
        return super().quantize_code(p) + ("harness.backends.mtq_config", "harness.backends.moe",
                                           "harness.backends.export_checks", "harness.backends.checkpoint")

    def quantize_tools(self, p) -> dict[str, str]:
        # modelopt's TensorRT-LLM exporter imports tensorrt_llm when it is installed.
        return {**versions("nvidia-modelopt", "torch", "transformers"), "tensorrt_llm": trtllm_version()}

    def quantize_executed(self, p) -> dict:
        # The export modelopt runs: presets, exporter and its arguments (not the code around it).
        return {"export": export_plan(p)}

    def quantize(self, src: Path, out_dir: Path, p, log, final_dir: Path) -> dict:
        plan = export_plan(p)
        prompts = calibration_prompts(src, plan["calib_size"], plan["calib_max_len"])
        info = quantize_for_trtllm(src, out_dir / "checkpoint", p, prompts, log=log)
        raise_if(checkpoint_config_problems(out_dir / "checkpoint", p))
        return {"checkpoint": "checkpoint", "quantization": info, "export": plan}

    # --- BuildEngine: an engine is never reused across TensorRT-LLM versions or GPU generations
    def build_tools(self, p) -> dict[str, str]:
        return engine_key_tools_cached()

    def build_executed(self, p) -> dict:
        return {"argv": trtllm_build_args(p, "<checkpoint>", "<engine>")}

    def build(self, checkpoint: Path, out_dir: Path, p, log, final_dir: Path | None = None) -> dict:
        raise_if(build_problems(p))
        # Cheap, before a build of hours: the checkpoint still says what the source model is.
        raise_if(checkpoint_config_problems(checkpoint, p))
        args = trtllm_build_args(p, checkpoint, out_dir / "engine")
        run_trtllm_build(args, out_dir / "trtllm-build.log")
        raise_if(check_engine_config(out_dir / "engine", p, self.build_tools(p)))
        return {"engine": "engine", "trtllm_build_args": args}

    # --- FillTritonRepo ---------------------------------------------------------------------
    def num_servers(self, p) -> int:
        return num_servers(p)

    def render_repos(self, p, engine_rel: str, decoupled: bool) -> dict[str, dict[str, str]]:
        return render_server_repos(p, engine_rel, decoupled=decoupled)  # tritonserver runs in the root

    def fill(self, engine_dir: Path, engine_rel: str, out_dir: Path, p, decoupled: bool) -> dict:
        return fill_trtllm_repos(out_dir, engine_rel, p, decoupled=decoupled)

    # --- LaunchServers ----------------------------------------------------------------------
    def serving_tools(self, p) -> dict[str, str]:
        return {**serving_key_tools(), **versions("tritonclient")}

    def launch_executed(self, p, repo_rel: str) -> dict:
        if p.triton.endpoints:
            return {}
        ports = [(g, "<http_port>", "<metrics_port>") for g in
                 (p.triton.grpc_ports or ["<grpc_port>"] * len(server_layout(p)))]
        specs = tritonserver_commands(p, f"<root>/{repo_rel}", ports, cwd="<root>")
        return normalise({"argv": [s.argv for s in specs], "env": [s.env for s in specs], "cwd": "<root>"})

    def launch(self, repo_rel: str, layout: dict, out_dir: Path, p, *, root: Path, on_spawn, log) -> list[dict]:
        t = p.triton
        if t.endpoints:
            return external_servers(parse_endpoints(t.endpoints),
                                    model_names(t.model_name, p.runtime.instances_per_server), t.ready_timeout_s)
        specs = tritonserver_commands(p, f"{root}/{repo_rel}", pick_ports(p, free_port), cwd=str(root))
        return launch(specs, out_dir, ready_timeout_s=t.ready_timeout_s, warmup_prompt=[1, 2, 3, 4],
                      streaming=layout["decoupled"], on_spawn=on_spawn, log=log, names={str(root): "<root>"})
