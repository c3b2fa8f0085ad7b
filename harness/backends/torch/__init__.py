"""The `torch` backend (default; CPU, also CUDA): modelopt quantization exported as an HF checkpoint,
a torch "engine" directory, and a Triton Python-backend model with in-flight batching, served by
the tritonserver inside the nvidia-pytriton wheel.

Modules: quantize (modelopt), engine (decode the export, rebuild the model), batcher (in-flight
batching), triton_model/model.py (the Triton glue), repo (config.pbtxt). Heavy imports (torch,
modelopt, transformers) happen inside the methods that build.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ...config.schema import CPU_QUANT_FORMATS, GPU_ONLY_QUANT_FORMATS
from ...versions import versions
from ..base import Backend

# Flags the torch backend understands beyond the typed fields (none yet): anything else in a flag
# dict is meant for TensorRT-LLM and would be silently ignored on CPU, so it is an error.
FLAGS: dict[str, tuple[str, ...]] = {"quantize": (), "build": (), "runtime": ()}


class TorchBackend(Backend):
    name = "torch"

    def problems(self, p) -> list[str]:
        from ...serving.endpoints import endpoint_problems

        b, q = p.build, p.quantize
        out = []
        if b.tp_size * b.pp_size != 1:
            out.append(f"build.tp_size/pp_size: the torch backend runs one device per engine (got tp {b.tp_size} x "
                       f"pp {b.pp_size}); use runtime.instances_per_server or triton.num_servers for data "
                       "parallelism, or build.backend=trtllm")
        if b.device == "cpu" and q.format in GPU_ONLY_QUANT_FORMATS:
            out.append(f"quantize.format: {q.format} needs a GPU (modelopt cannot run it on CPU); on CPU use one "
                       f"of {', '.join(CPU_QUANT_FORMATS)}")
        if q.kv_cache_dtype != "none":
            out.append(f"quantize.kv_cache_dtype: {q.kv_cache_dtype} KV cache is not implemented by the torch "
                       "backend; use none or build.backend=trtllm")
        if b.device == "cpu" and b.dtype == "float16":
            out.append("build.dtype: float16 is not supported on CPU by the torch backend; use float32 or bfloat16")
        for section, known in FLAGS.items():
            for key in getattr(p, section).flags:
                if key not in known:
                    allowed = ", ".join(k for k in type(getattr(p, section)).model_fields if k != "flags")
                    out.append(f"{section}.flags.{key}: not a flag the torch backend knows; it accepts the "
                               f"section's own keys ({allowed})")
        return out + endpoint_problems(p.triton.endpoints)

    # --- Quantize ---------------------------------------------------------------------------
    def quantize_tools(self, p) -> dict[str, str]:
        return versions("nvidia-modelopt", "torch", "transformers")

    def quantize(self, src: Path, out_dir: Path, p, log, final_dir: Path) -> dict:
        from ...datasets import calibration_prompts
        from .quantize import quantize_checkpoint

        q = p.quantize
        if q.format == "none":
            # Nothing to transform: point at the upstream checkpoint instead of copying it.
            return {"checkpoint": os.path.relpath(src, final_dir), "quantization": {"format": "none"}}
        prompts = calibration_prompts(src, q.calib_size, q.calib_max_len)
        info = quantize_checkpoint(src, out_dir / "checkpoint", q.format, prompts, device=p.build.device, log=log)
        log(f"Quantize {q.format}: greedy token agreement with the unquantized model "
            f"{info.get('greedy_token_agreement', float('nan')):.3f}")
        return {"checkpoint": "checkpoint", "quantization": info}

    # --- BuildEngine ------------------------------------------------------------------------
    def build_tools(self, p) -> dict[str, str]:
        return versions("torch", "transformers")

    def build(self, checkpoint: Path, out_dir: Path, p, log) -> dict:
        from .engine import build_torch_engine

        b = p.build
        config = build_torch_engine(checkpoint, out_dir / "engine", dtype=b.dtype, device=b.device,
                                    max_batch_size=b.max_batch_size, max_num_tokens=b.max_num_tokens,
                                    max_seq_len=b.max_seq_len, max_input_len=b.max_input_len)
        return {"engine": "engine", "engine_config": config}

    # --- FillTritonRepo ---------------------------------------------------------------------
    def fill(self, engine_dir: Path, engine_rel: str, out_dir: Path, p, decoupled: bool) -> dict:
        from .repo import fill_repos, render_repos

        # A model directory is <artifact>/server_<i>/<model>: two levels below the artifact.
        repos = render_repos(p, os.path.join("..", "..", engine_rel), num_servers=self.num_servers(p),
                             decoupled=decoupled)
        return fill_repos(out_dir, repos, decoupled=decoupled)

    # --- LaunchServers ----------------------------------------------------------------------
    def serving_tools(self, p) -> dict[str, str]:
        return versions("nvidia-pytriton", "tritonclient")

    def launch(self, repo_dir: Path, layout: dict, out_dir: Path, p, *, runtime_dir: Path, on_spawn, log) -> list[dict]:
        from ...serving.endpoints import parse_endpoints
        from ...serving.launcher import external_servers, launch
        from ...serving.pbtxt import model_names
        from ...serving.ports import server_ports
        from ...serving.tritonserver import cpu_spec, prepare_backend_dir, server_env

        t = p.triton
        if t.endpoints:
            names = model_names(t.model_name, p.runtime.instances_per_server)
            return external_servers(parse_endpoints(t.endpoints), names, t.ready_timeout_s)
        tag = f"pytriton-{self.serving_tools(p)['nvidia-pytriton']}-py{sys.version_info.major}.{sys.version_info.minor}"
        backend_dir = prepare_backend_dir(runtime_dir / tag)
        env = server_env()
        ports = server_ports(len(layout["servers"]), t.bind, t.grpc_ports)
        specs = [cpu_spec(i, repo_dir / srv["repo"], srv["models"], ports[i], bind=t.bind, backend_dir=backend_dir,
                          env=env) for i, srv in enumerate(layout["servers"])]
        return launch(specs, out_dir, ready_timeout_s=t.ready_timeout_s, warmup_prompt=[1, 2, 3, 4],
                      streaming=layout["decoupled"], on_spawn=on_spawn, log=log)
