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

from harness.backends.base import Backend
from harness.backends.torch.quantize import quantize_checkpoint
from harness.backends.torch.repo import fill_repos, render_repos
from harness.cache.executed import normalise
from harness.cache.versions import versions
from harness.config.schema import CPU_QUANT_FORMATS, GPU_ONLY_QUANT_FORMATS
from harness.model.calibration import calibration_prompts
from harness.serving.endpoints import endpoint_problems, parse_endpoints
from harness.serving.launcher import external_servers, launch
from harness.serving.ports import server_ports
from harness.serving.triton.pbtxt import model_names
from harness.serving.triton.server import (
    cpu_spec,
    env_overlay_described,
    prepare_backend_dir,
    server_env,
    shell_safe_root,
)

# Flags the torch backend understands beyond the typed fields (none yet): anything else in a flag
# dict is meant for TensorRT-LLM and would be silently ignored on CPU, so it is an error.
FLAGS: dict[str, tuple[str, ...]] = {"quantize": (), "build": (), "runtime": ()}


class TorchBackend(Backend):
    name = "torch"

    def problems(self, p) -> list[str]:
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
        ignored = {"runtime": ("num_gpus", "gpu_device_ids", "kv_cache_free_gpu_mem_fraction", "enable_kv_cache_reuse",
                               "enable_chunked_context", "max_tokens_in_paged_kv_cache")}
        for section, fields in ignored.items():
            for f in sorted(set(fields) & getattr(p, section).model_fields_set):
                out.append(f"{section}.{f}: the torch backend ignores it (TensorRT-LLM only); remove it, "
                           "or use build.backend=trtllm")
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

    def quantize_code(self, p) -> tuple[str, ...]:
        # calibration, the agreement measurement and the export call are perfdag's own code
        return super().quantize_code(p) + ("harness.backends.torch.quantize", "harness.backends.checkpoint",
                                           "harness.backends.mtq_config", "harness.backends.moe",
                                           "harness.backends.export_checks")

    def quantize(self, src: Path, out_dir: Path, p, log, final_dir: Path) -> dict:
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

    def build_code(self, p) -> tuple[str, ...]:
        return ("harness.backends.torch.engine", "harness.backends.checkpoint", "harness.backends.moe")

    def build(self, checkpoint: Path, out_dir: Path, p, log, final_dir: Path | None = None) -> dict:
        from harness.backends.torch.engine import (
            build_torch_engine,  # lazy: keeps torch off the no-op path (keys, status)
        )
        b = p.build
        config = build_torch_engine(checkpoint, out_dir / "engine", dtype=b.dtype, device=b.device,
                                    max_batch_size=b.max_batch_size, max_num_tokens=b.max_num_tokens,
                                    max_seq_len=b.max_seq_len, max_input_len=b.max_input_len)
        return {"engine": "engine", "engine_config": config}

    # --- FillTritonRepo ---------------------------------------------------------------------
    def repo_code(self, p) -> tuple[str, ...]:
        # The served model is perfdag's: the Triton glue, the batcher and the engine loader.
        return ("harness/backends/torch/triton_model/model.py", "harness.backends.torch.batcher",
                "harness.serving.triton.python_model", "harness.backends.torch.engine", "harness.backends.checkpoint",
                "harness.backends.moe")

    def render_repos(self, p, engine_rel: str, decoupled: bool) -> dict[str, dict[str, str]]:
        # A model directory is <root>/FillTritonRepo/<key16>/server_<i>/<model>: four levels down.
        return render_repos(p, os.path.join("..", "..", "..", "..", engine_rel), num_servers=self.num_servers(p),
                            decoupled=decoupled)

    def fill(self, engine_dir: Path, engine_rel: str, out_dir: Path, p, decoupled: bool) -> dict:
        return fill_repos(out_dir, self.render_repos(p, engine_rel, decoupled), decoupled=decoupled)

    # --- LaunchServers ----------------------------------------------------------------------
    def serving_tools(self, p) -> dict[str, str]:
        return versions("nvidia-pytriton", "tritonclient")

    def _backend_dir(self, p) -> str:
        tag = f"pytriton-{self.serving_tools(p)['nvidia-pytriton']}-py{sys.version_info.major}.{sys.version_info.minor}"
        return os.path.join(".backends", tag)

    def _specs(self, p, repo_rel: str, servers, ports, root, env, shm=None):
        # Servers run in the artifacts root; their argv names it (ps shows which root a server serves).
        binary = None if p.triton.binary == "auto" else p.triton.binary
        return [cpu_spec(i, os.path.join(str(root), repo_rel, srv["repo"]), srv["models"], ports[i],
                         bind=p.triton.bind, backend_dir=os.path.join(str(root), self._backend_dir(p)), cwd=root,
                         env=env, shm=shm, binary=binary)
                for i, srv in enumerate(servers)]

    def launch_executed(self, p, repo_rel: str) -> dict:
        t = p.triton
        if t.endpoints:
            return {}  # nothing is launched; the endpoints are keyed as parameters
        names = model_names(t.model_name, p.runtime.instances_per_server)
        n = self.num_servers(p)
        ports = [(t.grpc_ports[i] if t.grpc_ports else "<grpc_port>", "<http_port>", "<metrics_port>")
                 for i in range(n)]
        specs = self._specs(p, repo_rel, [{"repo": f"server_{i}", "models": names} for i in range(n)], ports,
                            "<root>", env={}, shm="<shm>")
        return normalise({"argv": [s.argv for s in specs], "cwd": "<root>", "env": env_overlay_described()})

    def launch(self, repo_rel: str, layout: dict, out_dir: Path, p, *, root: Path, on_spawn, log) -> list[dict]:
        t = p.triton
        if t.endpoints:
            names = model_names(t.model_name, p.runtime.instances_per_server)
            return external_servers(parse_endpoints(t.endpoints), names, t.ready_timeout_s)
        prepare_backend_dir(Path(root) / self._backend_dir(p))
        ports = server_ports(len(layout["servers"]), t.bind, t.grpc_ports)
        served = shell_safe_root(root)  # the Python backend starts its stub through a shell
        specs = self._specs(p, repo_rel, layout["servers"], ports, served, server_env())
        return launch(specs, out_dir, ready_timeout_s=t.ready_timeout_s, warmup_prompt=[1, 2, 3, 4],
                      streaming=layout["decoupled"], on_spawn=on_spawn, log=log,
                      names={str(root): "<root>", str(served): "<root>"})
