"""The `trtllm` (GPU) backend: TensorRT-LLM engines served by Triton's tensorrtllm backend.

Everything that decides *what* runs is a pure function of the resolved `Params`, tested on CPU:

- `quant`   modelopt preset + KV-cache config, checkpoint export plan (TRTLLM_CHECKPOINT_FLAGS)
- `build`   the `trtllm-build` argv, what it would reject or silently change, engine config checks
- `layout`  data-parallel ranks, their GPUs, and how they are spread over tritonserver processes
- `repo`    the `tensorrt_llm` model's config.pbtxt (TRTLLM_RUNTIME_FLAGS)
- `launch`  tritonserver / mpirun command lines
- `rules`   cross-field validation for build.backend == trtllm

The calls that need a GPU (`quantize_for_trtllm`, `run_trtllm_build`, the server processes) are
thin wrappers around those plans. No luigi imports.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from ...versions import versions
from ..base import Backend
from .common import TrtllmError

__all__ = ["TrtllmBackend", "TrtllmError"]


@lru_cache(maxsize=1)
def engine_key_tools_cached() -> dict:
    """TensorRT-LLM version + GPU architecture (runs nvidia-smi: once per process)."""
    from .build import engine_key_tools
    return engine_key_tools()


class TrtllmBackend(Backend):
    name = "trtllm"

    def problems(self, p) -> list[str]:
        from .rules import trtllm_problems
        return trtllm_problems(p)

    def notes(self, p) -> list[str]:
        from .rules import trtllm_notes
        return trtllm_notes(p)

    # --- Quantize: a TensorRT-LLM checkpoint is sharded for tp x pp and cast to the dtype -----
    def quantize_reads(self, p) -> tuple[str, ...]:
        return super().quantize_reads(p) + ("build.tp_size", "build.pp_size", "build.dtype")

    def quantize_tools(self, p) -> dict[str, str]:
        from .build import trtllm_version
        # modelopt's TensorRT-LLM exporter imports tensorrt_llm when it is installed.
        return {**versions("nvidia-modelopt", "torch", "transformers"), "tensorrt_llm": trtllm_version()}

    def quantize(self, src: Path, out_dir: Path, p, log, final_dir: Path) -> dict:
        from ...datasets import calibration_prompts
        from .common import raise_if
        from .quant import checkpoint_config_problems, export_plan, quantize_for_trtllm

        plan = export_plan(p)
        prompts = calibration_prompts(src, plan["calib_size"], plan["calib_max_len"])
        info = quantize_for_trtllm(src, out_dir / "checkpoint", p, prompts, log=log)
        raise_if(checkpoint_config_problems(out_dir / "checkpoint", p))
        return {"checkpoint": "checkpoint", "quantization": info, "export": plan}

    # --- BuildEngine: an engine is never reused across TensorRT-LLM versions or GPU generations
    def build_tools(self, p) -> dict[str, str]:
        return engine_key_tools_cached()

    def build(self, checkpoint: Path, out_dir: Path, p, log) -> dict:
        from .build import (
            build_problems,
            check_engine_config,
            run_trtllm_build,
            trtllm_build_args,
        )
        from .common import raise_if

        raise_if(build_problems(p))
        args = trtllm_build_args(p, checkpoint, out_dir / "engine")
        run_trtllm_build(args, out_dir / "trtllm-build.log")
        raise_if(check_engine_config(out_dir / "engine", p, self.build_tools(p)))
        return {"engine": "engine", "trtllm_build_args": args}

    # --- FillTritonRepo ---------------------------------------------------------------------
    def num_servers(self, p) -> int:
        from .layout import num_servers
        return num_servers(p)

    def fill(self, engine_dir: Path, engine_rel: str, out_dir: Path, p, decoupled: bool) -> dict:
        from .repo import fill_trtllm_repos

        # tritonserver runs in its repository (<artifact>/server_<i>), one level below the artifact.
        return fill_trtllm_repos(out_dir, os.path.join("..", engine_rel), p, decoupled=decoupled)

    # --- LaunchServers ----------------------------------------------------------------------
    def serving_tools(self, p) -> dict[str, str]:
        from .launch import serving_key_tools
        return {**serving_key_tools(), **versions("tritonclient")}

    def launch(self, repo_dir: Path, layout: dict, out_dir: Path, p, *, runtime_dir: Path, on_spawn, log) -> list[dict]:
        from ...serving.endpoints import parse_endpoints
        from ...serving.launcher import external_servers, launch
        from ...serving.pbtxt import model_names
        from ...serving.ports import free_port
        from .launch import pick_ports, tritonserver_commands

        t = p.triton
        if t.endpoints:
            return external_servers(parse_endpoints(t.endpoints),
                                    model_names(t.model_name, p.runtime.instances_per_server), t.ready_timeout_s)
        specs = tritonserver_commands(p, repo_dir, pick_ports(p, free_port))
        return launch(specs, out_dir, ready_timeout_s=t.ready_timeout_s, warmup_prompt=[1, 2, 3, 4],
                      streaming=layout["decoupled"], on_spawn=on_spawn, log=log)
