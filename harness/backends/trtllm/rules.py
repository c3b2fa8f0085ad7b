"""Cross-field rules for build.backend == trtllm; each problem 'field: what is wrong; the fix'.

Hooked into harness.config.rules.cross_field_problems, so a bad GPU document is refused before
any stage runs. The length checks that rules already makes for every backend are left to it.
"""
from __future__ import annotations

from harness.backends.trtllm.build import build_notes, build_problems, model_architecture
from harness.backends.trtllm.layout import data_parallel_layout, dp_ranks, num_servers, world_size
from harness.backends.trtllm.quant import checkpoint_flag_problems
from harness.backends.trtllm.repo import runtime_flag_problems
from harness.serving.endpoints import endpoint_problems

# quantize.format x quantize.kv_cache_dtype combinations TensorRT-LLM cannot build.
BAD_QUANT_COMBOS = {
    ("nvfp4", "int8"): "INT8 KV cache is not supported on Blackwell (SM100), where NVFP4 runs; use kv_cache_dtype fp8",
}
# MoE architectures whose int8 experts modelopt's TensorRT-LLM exporter cannot write: 0.37 and 0.47 both
# fail after calibration ('The size of tensor a (64) must match the size of tensor b (128)', stacked
# per-channel scales in to_quantized_weight); tests/test_export.py shows it.
MOE_NO_INT8_EXPORT = ("MixtralForCausalLM",)


def trtllm_problems(p) -> list[str]:
    if p.build.backend != "trtllm":
        return []
    b, r, t, q = p.build, p.runtime, p.triton, p.quantize
    out: list[str] = []
    if b.device != "cuda":
        out.append(f"build.device: {b.device}, but TensorRT-LLM engines run only on NVIDIA GPUs; set build.device=cuda")

    ws = world_size(p)
    if r.num_gpus % ws:
        out.append(f"runtime.num_gpus: {r.num_gpus} is not a multiple of build.tp_size*pp_size ({b.tp_size}x{b.pp_size}"
                   f"={ws}); use a multiple of {ws} GPUs or change tp/pp")
    out += _device_id_problems(p, ws)
    if not t.endpoints:
        out += _server_problems(p)
    out += endpoint_problems(t.endpoints)

    combo = BAD_QUANT_COMBOS.get((q.format, q.kv_cache_dtype))
    if combo:
        out.append(f"quantize.kv_cache_dtype: {q.kv_cache_dtype} with quantize.format={q.format}: {combo}")
    arch = model_architecture(p)
    if arch in MOE_NO_INT8_EXPORT and q.format in ("int8", "int8_sq"):
        out.append(f"quantize.format: {q.format} for {arch} (model.checkpoint): modelopt's TensorRT-LLM exporter "
                   "cannot write int8 MoE experts and fails after calibration; use fp8 or int4_awq")
    out += checkpoint_flag_problems(p)
    out += build_problems(p, include_shape_checks=False)
    out += runtime_flag_problems(p)
    return out


def _device_id_problems(p, ws: int) -> list[str]:
    ids, n = p.runtime.gpu_device_ids, p.runtime.num_gpus
    if not ids:
        return []
    out = []
    want = dp_ranks(p)
    if want and len(ids) != want:
        out.append(f"runtime.gpu_device_ids: {len(ids)} groups, but num_gpus {n} / tp*pp {ws} = {want} data-parallel "
                   f"ranks; give {want} groups of {ws} ids")
    for i, group in enumerate(ids):
        if len(group) != ws:
            out.append(f"runtime.gpu_device_ids[{i}]: {group} has {len(group)} ids; each group is one engine replica "
                       f"of tp*pp = {ws} GPUs")
        bad = [g for g in group if not 0 <= g < n]
        if bad:
            out.append(f"runtime.gpu_device_ids[{i}]: {bad} outside 0..{n - 1} (runtime.num_gpus={n}); "
                       "use ids of this node's GPUs or raise runtime.num_gpus")
    flat = [g for group in ids for g in group]
    dup = sorted({g for g in flat if flat.count(g) > 1})
    if dup:
        out.append(f"runtime.gpu_device_ids: GPU(s) {dup} appear in more than one group; each GPU serves one replica")
    return out


def _server_problems(p) -> list[str]:
    ranks = len(data_parallel_layout(p)) if dp_ranks(p) else 0
    if not ranks:
        return []
    n = num_servers(p)
    out = []
    if ranks % n:
        out.append(f"triton.num_servers: {n} does not divide the {ranks} data-parallel ranks; use a divisor "
                   f"(1 for Offline, {ranks} for Server)")
        return out
    per = ranks // n
    if "instances_per_server" in p.runtime.model_fields_set and p.runtime.instances_per_server != per:
        out.append(f"runtime.instances_per_server: {p.runtime.instances_per_server}, but {ranks} ranks over "
                   f"triton.num_servers={n} gives {per}; on trtllm it is derived, remove it or set {per}")
    return out


def trtllm_notes(p) -> list[str]:
    """Advice that does not block a run (printed as warnings)."""
    if p.build.backend != "trtllm":
        return []
    q, notes = p.quantize, []
    ranks = dp_ranks(p)
    if not p.triton.endpoints and p.loadgen.scenario != "Offline" and ranks > 1 and num_servers(p) < ranks:
        notes.append(f"triton.num_servers: {num_servers(p)} server(s) for {ranks} replicas in {p.loadgen.scenario}: "
                     "streamed responses share a gRPC port (~100 concurrent streams per channel); NVIDIA runs one "
                     f"server per replica ({ranks})")
    if q.format == "nvfp4":
        notes.append("quantize.format: nvfp4 runs only on Blackwell GPUs (compute capability >= 10.0)")
    if q.format in ("fp8", "w4a8_awq") or q.kv_cache_dtype == "fp8":
        notes.append("quantize: FP8 needs Ada or Hopper or newer (compute capability >= 8.9)")
    if q.format in ("int8", "int8_sq", "int4_awq") or q.kv_cache_dtype == "int8":
        notes.append(f"quantize: {q.format} / kv {q.kv_cache_dtype}: INT8/INT4 paths are not supported on Blackwell (SM100)")
    if p.build.dtype == "float32":
        notes.append("build.dtype: float32 doubles weights and KV cache against float16/bfloat16, which "
                     "TensorRT-LLM LLM engines normally use")
    return notes + build_notes(p)
