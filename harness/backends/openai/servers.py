"""The command line of each OpenAI-compatible server, from the parameters (pure functions).

Flag names follow each project's own argument parser (read in their sources: TensorRT-LLM
tensorrt_llm/commands/serve.py, vLLM's EngineArgs and OpenAI CLI args 0.33, SGLang server_args
0.5.23, `transformers serve --help` 5.23) and are pinned by golden tests. Memory fractions mean
different things per server (TensorRT-LLM: of the memory free after weights; vLLM and SGLang: of
the whole device), so the same runtime.kv_cache_free_gpu_mem_fraction is not comparable across them.
"""
from __future__ import annotations

import os
import shutil
import sys
from typing import Sequence

# openai.server -> (what "auto" runs, argv prefix before the model)
COMMANDS = {
    "transformers": ("transformers", ["serve"]),
    "trtllm-serve": ("trtllm-serve", []),
    "vllm": ("vllm", ["serve"]),
    "sglang": (None, ["-m", "sglang.launch_server"]),
}


def binary(p) -> str:
    """The server executable: openai.binary, else the one next to this Python (or on PATH)."""
    if p.openai.binary != "auto":
        return p.openai.binary
    name, _ = COMMANDS[p.openai.server]
    if name is None:
        return sys.executable
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else (shutil.which(name) or name)


def served_name(p) -> str:
    """The model name requests carry: openai.model, else model.name ('' = none: transformers serve is
    pinned to the one model perfdag launches it with)."""
    if p.openai.model:
        return p.openai.model
    return "" if p.openai.server == "transformers" else p.model.name


def server_argv(p, model_dir: str, port, *, config_path: str | None = None, tp: int | None = None,
                pp: int | None = None) -> list[str]:
    """One server's command line for `model_dir` on `port`; `tp`/`pp` (a layout role's) win over build's."""
    o, b, r = p.openai, p.build, p.runtime
    kind = o.server
    tp, pp = tp or b.tp_size, pp or b.pp_size
    argv = [binary(p), *COMMANDS[kind][1]]
    if kind == "transformers":
        argv += [model_dir, "--device", b.device, "--host", o.bind, "--port", str(port), "--dtype", b.dtype]
        if o.continuous_batching:
            argv += ["--continuous-batching", "--cb-num-blocks", str(o.cb_num_blocks), "--cb-block-size", "32",
                     "--cb-max-batch-tokens", str(b.max_num_tokens)]
    elif kind == "trtllm-serve":
        argv += [model_dir, "--host", o.bind, "--port", str(port), "--backend", "pytorch",
                 "--tp_size", str(tp), "--pp_size", str(pp),
                 "--max_batch_size", str(b.max_batch_size), "--max_num_tokens", str(b.max_num_tokens),
                 "--max_seq_len", str(b.max_seq_len),
                 "--kv_cache_free_gpu_memory_fraction", repr(float(r.kv_cache_free_gpu_mem_fraction))]
        if config_path:
            argv += ["--extra_llm_api_options", config_path]
    elif kind == "vllm":
        argv += [model_dir, "--host", o.bind, "--port", str(port), "--served-model-name", served_name(p),
                 "--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp),
                 "--max-num-seqs", str(b.max_batch_size), "--max-num-batched-tokens", str(b.max_num_tokens),
                 "--max-model-len", str(b.max_seq_len),
                 "--gpu-memory-utilization", repr(float(r.kv_cache_free_gpu_mem_fraction)), "--dtype", b.dtype,
                 "--enable-prefix-caching" if r.enable_kv_cache_reuse else "--no-enable-prefix-caching"]
        if r.enable_chunked_context:
            argv += ["--enable-chunked-prefill"]
    elif kind == "sglang":
        argv += ["--model-path", model_dir, "--host", o.bind, "--port", str(port), "--served-model-name",
                 served_name(p), "--tp-size", str(tp), "--pp-size", str(pp),
                 "--max-running-requests", str(b.max_batch_size), "--chunked-prefill-size", str(b.max_num_tokens),
                 "--max-prefill-tokens", str(b.max_num_tokens), "--context-length", str(b.max_seq_len),
                 "--mem-fraction-static", repr(float(r.kv_cache_free_gpu_mem_fraction)), "--dtype", b.dtype]
        if not r.enable_kv_cache_reuse:
            argv += ["--disable-radix-cache"]
    else:
        raise ValueError(f"openai.server: unknown server {kind!r}")
    return argv + [str(a) for a in o.extra_args]


def server_env(p, gpus: Sequence[int]) -> dict[str, str]:
    """What is set on top of the inherited environment."""
    if p.openai.server == "transformers":
        # torch threads pinned: on a small CPU host the server, its loop and the clients contend
        return {"OMP_NUM_THREADS": str(p.openai.torch_threads)}
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}


def llm_api_options(p) -> dict:
    """trtllm-serve's --extra_llm_api_options: openai.llm_api_options over what the runtime section says."""
    r = p.runtime
    doc = {"kv_cache_config": {"free_gpu_memory_fraction": float(r.kv_cache_free_gpu_mem_fraction),
                               "enable_block_reuse": bool(r.enable_kv_cache_reuse)},
           "enable_chunked_prefill": bool(r.enable_chunked_context)}
    if p.quantize.kv_cache_dtype != "none":
        doc["kv_cache_config"]["dtype"] = p.quantize.kv_cache_dtype
    for k, v in p.openai.llm_api_options.items():
        if isinstance(v, dict) and isinstance(doc.get(k), dict):
            doc[k] = {**doc[k], **v}
        else:
            doc[k] = v
    return doc


def dp_gpus(p) -> list[list[int]]:
    """GPU ids per server: runtime.gpu_device_ids, else consecutive blocks of tp*pp."""
    if p.runtime.gpu_device_ids:
        return [list(g) for g in p.runtime.gpu_device_ids]
    ws = p.build.tp_size * p.build.pp_size
    return [list(range(i * ws, (i + 1) * ws)) for i in range(max(1, p.runtime.num_gpus // ws))]
