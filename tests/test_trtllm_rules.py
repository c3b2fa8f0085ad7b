"""Bad GPU parameters are refused before anything runs, one 'field: problem; fix' line each."""
from __future__ import annotations

import pytest

from harness.backends.trtllm.build import build_problems
from harness.backends.trtllm.rules import trtllm_notes, trtllm_problems
from harness.config.schema import Params
from harness.serving.endpoints import endpoint_problems, parse_endpoints

# llama2-70b Server on 8x H100 (TP2 x DP4), as the example, with the built-in model and data.
BASE = {
    "quantize": {"format": "fp8", "kv_cache_dtype": "fp8"},
    "build": {"backend": "trtllm", "device": "cuda", "dtype": "float16", "tp_size": 2, "max_batch_size": 1024,
              "max_num_tokens": 1024, "max_input_len": 256, "max_seq_len": 512,
              "flags": {"use_paged_context_fmha": "enable", "use_fp8_context_fmha": "enable",
                        "reduce_fusion": "enable", "tokens_per_block": 32}},
    "runtime": {"num_gpus": 8, "enable_chunked_context": True},
    "triton": {"num_servers": 4},
    "loadgen": {"scenario": "Server"},
}


def params(**changes) -> Params:
    doc = {k: dict(v) for k, v in BASE.items()}
    doc["build"]["flags"] = dict(BASE["build"]["flags"])
    for path, value in changes.items():
        section, _, key = path.partition("__")
        if key.startswith("flags__"):
            flag = key.removeprefix("flags__")
            if value is None:
                doc[section]["flags"].pop(flag, None)
            else:
                doc[section].setdefault("flags", {})[flag] = value
        else:
            doc.setdefault(section, {})[key] = value
    return Params.model_validate(doc)


def one(problems: list[str], *words: str) -> str:
    hits = [p for p in problems if all(w in p for w in words)]
    assert len(hits) == 1, f"expected one problem with {words}, got {problems}"
    assert "; " in hits[0] and ":" in hits[0].split(";")[0], f"not 'field: problem; fix': {hits[0]}"
    return hits[0]


def test_base_is_clean():
    assert trtllm_problems(params()) == []
    assert trtllm_problems(params(build__backend="torch")) == []  # not this module's business


def test_tp_pp_must_divide_gpus():
    one(trtllm_problems(params(runtime__num_gpus=7)), "runtime.num_gpus", "multiple of", "2")
    one(trtllm_problems(params(build__tp_size=4, build__pp_size=2, runtime__num_gpus=12)), "runtime.num_gpus", "8")


def test_device_must_be_cuda():
    one(trtllm_problems(params(build__device="cpu")), "build.device", "cuda")


def test_unknown_build_flag_with_suggestion():
    p = one(trtllm_problems(params(build__flags__use_paged_context_fhma="enable")), "build.flags.use_paged_context_fhma")
    assert "did you mean 'use_paged_context_fmha'" in p


def test_bad_flag_values_and_typed_fields_as_flags():
    probs = trtllm_problems(params(build__flags__gemm_plugin="fp16", build__flags__tokens_per_block=48,
                                   build__flags__context_fmha="maybe", build__flags__paged_kv_cache="enable"))
    one(probs, "build.flags.gemm_plugin", "float16")
    one(probs, "build.flags.tokens_per_block", "power of two")
    one(probs, "build.flags.context_fmha", "enable/disable")
    one(probs, "build.flags.paged_kv_cache", "kv_cache_type")
    direct = Params.model_validate({**BASE, "build": {**BASE["build"], "flags": {"max_num_tokens": 64}}})
    one(build_problems(direct), "build.flags.max_num_tokens", "build.max_num_tokens")


@pytest.mark.parametrize("changes, words", [
    # FP8 context FMHA without an FP8 checkpoint: trtllm-build would silently turn it off.
    ({"quantize__format": "int8_sq", "quantize__kv_cache_dtype": "none"}, ["use_fp8_context_fmha", "int8_sq"]),
    # ... or with paged context FMHA but no FP8 KV cache.
    ({"quantize__kv_cache_dtype": "none"}, ["use_fp8_context_fmha", "FP8 KV cache"]),
    ({"build__flags__context_fmha": "disable", "runtime__enable_chunked_context": False},
     ["use_fp8_context_fmha", "context_fmha"]),
    ({"build__flags__user_buffer": "enable", "build__flags__reduce_fusion": "disable"}, ["user_buffer", "reduce_fusion"]),
    ({"build__tp_size": 1, "runtime__num_gpus": 8, "triton__num_servers": 8}, ["reduce_fusion", "tp_size=1"]),
    ({"build__flags__gemm_swiglu_plugin": "fp8", "build__flags__use_fused_mlp": "disable"},
     ["gemm_swiglu_plugin", "use_fused_mlp"]),
    ({"build__flags__norm_quant_fusion": "enable"}, ["norm_quant_fusion", "nvfp4"]),
    ({"build__flags__gemm_plugin": "nvfp4"}, ["gemm_plugin", "nvfp4"]),
    ({"build__flags__multiple_profiles": "enable", "build__flags__opt_num_tokens": 512}, ["multiple_profiles", "opt_num_tokens"]),
    ({"build__flags__use_paged_context_fmha": "disable", "build__flags__use_fp8_context_fmha": None},
     ["use_paged_context_fmha", "chunked context"]),
    ({"quantize__kv_cache_dtype": "int8", "build__flags__use_fp8_context_fmha": None},
     ["use_paged_context_fmha", "int8 KV cache"]),
    ({"build__flags__kv_cache_type": "continuous"}, ["kv_cache_type", "paged"]),
])
def test_conflicting_plugin_flags(changes, words):
    one(trtllm_problems(params(**changes)), *words)


def test_gpu_device_ids():
    one(trtllm_problems(params(runtime__gpu_device_ids=[[0, 1], [2, 3], [4, 5], [6, 8]])), "gpu_device_ids[3]", "0..7")
    one(trtllm_problems(params(runtime__gpu_device_ids=[[0, 1], [2, 3], [4, 5], [6]])), "gpu_device_ids[3]", "tp*pp = 2")
    one(trtllm_problems(params(runtime__gpu_device_ids=[[0, 1], [2, 3]])), "gpu_device_ids", "2 groups", "4 groups")
    one(trtllm_problems(params(runtime__gpu_device_ids=[[0, 1], [1, 2], [4, 5], [6, 7]])), "more than one group")
    assert trtllm_problems(params(runtime__gpu_device_ids=[[0, 3], [1, 2], [4, 5], [6, 7]])) == []  # NVL pairing


def test_servers_must_split_ranks_evenly():
    one(trtllm_problems(params(triton__num_servers=3)), "triton.num_servers", "4 data-parallel ranks")
    one(trtllm_problems(params(runtime__instances_per_server=2)), "runtime.instances_per_server", "set 1")
    assert trtllm_problems(params(runtime__instances_per_server=1)) == []


@pytest.mark.parametrize("bad, words", [
    ("host_a:8001,|host_b:8001", ["port ''"]),
    ("host_a:80x1", ["port '80x1'"]),
    ("host_a", ["no host:port"]),
    (":8001", ["no host:port"]),
    ("host_a:8001||host_b:8001", ["empty host entry"]),
    ("::1:8001", ["IPv6", "brackets"]),
    ("host_a:70000", ["1..65535"]),
    ("host_a:8001,8001", ["listed twice"]),
])
def test_malformed_endpoints(bad, words):
    with pytest.raises(ValueError) as e:
        parse_endpoints(bad)
    assert all(w in str(e.value) for w in words), str(e.value)
    one(trtllm_problems(params(triton__endpoints=[bad])), "triton.endpoints", *words)


def test_endpoint_forms():
    assert parse_endpoints("host_a:8001,8002|host_b:8001") == ["host_a:8001", "host_a:8002", "host_b:8001"]
    assert parse_endpoints(["10.0.0.1:8001", "node-2.cluster:9001"]) == ["10.0.0.1:8001", "node-2.cluster:9001"]
    assert parse_endpoints(["[::1]:8001", "h:1,2|g:3"]) == ["[::1]:8001", "h:1", "h:2", "g:3"]
    assert endpoint_problems(["h:1", "h:1"]) == ["triton.endpoints: h:1 is listed twice; give each server once"]
    # External servers: the local layout rules do not apply.
    assert trtllm_problems(params(triton__endpoints=["a:8001,8002|b:8001"], triton__num_servers=3)) == []


def test_quant_format_and_kv_cache_combinations():
    one(trtllm_problems(params(quantize__format="nvfp4", quantize__kv_cache_dtype="int8",
                               build__flags__use_paged_context_fmha=None)), "quantize.kv_cache_dtype", "Blackwell")
    assert any("Blackwell" in n for n in trtllm_notes(params(quantize__format="nvfp4")))
    assert trtllm_problems(params(quantize__format="nvfp4")) == []  # nvfp4 + fp8 KV: a note, not an error


def test_checkpoint_and_runtime_flags():
    probs = trtllm_problems(params(quantize__flags={"qformat": "int4_awq", "awq_block_size": 96, "effective_bits": 8.5,
                                                    "tp_size": 4},
                                   runtime__flags={"max_num_tokens": 2048, "kvcache_free_gpu_mem_frac": 2,
                                                   "decoding_mode": "greedy", "enable_trt_overlap": "nope",
                                                   "max_queue_sise": 10}))
    one(probs, "quantize.flags.qformat", "int4_awq", "fp8")
    one(probs, "quantize.flags.awq_block_size", "64, 128")
    one(probs, "quantize.flags.effective_bits", "known:")
    one(probs, "quantize.flags.tp_size", "build.tp_size")
    one(probs, "runtime.flags.max_num_tokens", "build.max_num_tokens")
    one(probs, "runtime.flags.kvcache_free_gpu_mem_frac", "(0, 1]")
    one(probs, "runtime.flags.decoding_mode", "top_k_top_p")
    one(probs, "runtime.flags.enable_trt_overlap", "true/false")
    assert "did you mean 'max_queue_size'" in one(probs, "runtime.flags.max_queue_sise")


def test_server_scenario_with_shared_ports_is_a_note():
    p = params(triton__num_servers=1)
    assert trtllm_problems(p) == []
    assert any("one server per replica" in n for n in trtllm_notes(p))


# ---------------------------------------------------------------------------------------------
# What trtllm-build and the tensorrtllm backend do differently from what was asked (issue 11):
# each refused before any stage runs, in the unit and through `python -m pipeline status`.
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def mixtral_ckpt(tmp_path):
    (tmp_path / "mixtral").mkdir()
    (tmp_path / "mixtral" / "config.json").write_text(
        '{"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 8}')
    return str(tmp_path / "mixtral")


def test_reduce_fusion_only_for_the_architectures_trtllm_build_fuses(mixtral_ckpt):
    """builder.py: 'Overriding reduce_fusion to False' unless Llama/Gemma2/Medusa at tp_size > 1."""
    p = one(trtllm_problems(params(model__checkpoint=mixtral_ckpt, quantize__format="fp8")),
            "build.flags.reduce_fusion", "MixtralForCausalLM", "LlamaForCausalLM, Gemma2ForCausalLM, MedusaForCausalLM")
    assert "disable it" in p
    assert not any("reduce_fusion" in x for x in trtllm_problems(params(model__checkpoint=mixtral_ckpt,
                                                                        build__flags__reduce_fusion=None)))
    assert trtllm_problems(params()) == []  # builtin: the tiny Llama at tp 2 keeps it
    # user_buffer needs reduce_fusion that survives, not just the flag.
    one(trtllm_problems(params(model__checkpoint=mixtral_ckpt, build__flags__user_buffer="enable")),
        "build.flags.user_buffer", "needs reduce_fusion")


@pytest.mark.parametrize("fmt, kv, reason", [
    ("int8_sq", "int8", "INT8 KV cache"),
    ("int4_awq", "int8", "INT8 KV cache"),
    ("int8_sq", "fp8", "FP8 KV cache with quantize.format=int8_sq"),
])
def test_chunked_context_needs_paged_context_fmha_even_at_its_default(fmt, kv, reason):
    """use_paged_context_fmha left at its default (on) is still turned off by trtllm-build for an INT8
    KV cache or an FP8 KV cache without an FP8-family format; chunked context then fails at load."""
    changes = dict(quantize__format=fmt, quantize__kv_cache_dtype=kv, build__flags__use_paged_context_fmha=None,
                   build__flags__use_fp8_context_fmha=None)
    p = one(trtllm_problems(params(**changes)), "build.flags.use_paged_context_fmha", "enable_chunked_context", reason,
            "default")
    assert "set runtime.enable_chunked_context=false" in p
    # Without chunked context nothing needs it: trtllm-build's own choice, no error.
    assert not any("paged_context_fmha" in x for x in trtllm_problems(params(**changes,
                                                                             runtime__enable_chunked_context=False,
                                                                             build__max_num_tokens=1024)))
    # FP8 weights + FP8 KV keep it: no error.
    assert trtllm_problems(params(build__flags__use_paged_context_fmha=None)) == []


def test_log_level_takes_only_the_levels_every_release_has():
    for level in ("debug", "trace"):
        p = one(trtllm_problems(params(build__flags__log_level=level)), "build.flags.log_level", repr(level))
        assert "newer trtllm-build releases" in p and "use verbose" in p
    assert trtllm_problems(params(build__flags__log_level="verbose")) == []
    one(trtllm_problems(params(build__flags__log_level="loud")), "build.flags.log_level", "verbose")


def test_keys_the_backend_ignores_are_not_written(monkeypatch):
    from harness.backends.trtllm import build as trt_build
    from harness.backends.trtllm.repo import render_trtllm_model_config

    def rendered(p):
        return render_trtllm_model_config(p, "/engine", model_name="tensorrt_llm", decoupled=True, gpu_device_ids=[0])

    text = rendered(params())
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in text and "enable_trt_overlap" not in text
    monkeypatch.setattr(trt_build, "trtllm_version", lambda: "1.1.0")
    p = one(trtllm_problems(params(runtime__flags={"enable_trt_overlap": True})), "runtime.flags.enable_trt_overlap",
            "deprecated and will be ignored", "1.1.0", "remove it")
    assert ">= 1.3" in p
    # false is what every backend does: accepted, nothing written.
    assert trtllm_problems(params(runtime__flags={"enable_trt_overlap": False})) == []
    assert "enable_trt_overlap" not in rendered(params(runtime__flags={"enable_trt_overlap": False}))
    # A backend that applies it (NVIDIA/TensorRT-LLM#10018, 1.3 pre-releases) gets it.
    monkeypatch.setattr(trt_build, "trtllm_version", lambda: "1.3.0rc5")
    assert trtllm_problems(params(runtime__flags={"enable_trt_overlap": True})) == []
    assert 'key: "enable_trt_overlap"' in rendered(params(runtime__flags={"enable_trt_overlap": True}))


def test_int8_moe_cannot_be_exported_for_trtllm(mixtral_ckpt):
    for fmt in ("int8", "int8_sq"):
        one(trtllm_problems(params(model__checkpoint=mixtral_ckpt, quantize__format=fmt,
                                   quantize__kv_cache_dtype="none", build__flags__reduce_fusion=None,
                                   build__flags__use_fp8_context_fmha=None)),
            "quantize.format", fmt, "MixtralForCausalLM", "fp8 or int4_awq")


_INT8_KV_DEFAULT_PAGED = """\
extends: {repo}/params/default.yaml
quantize: {{format: int8_sq, kv_cache_dtype: int8}}
build: {{backend: trtllm, device: cuda, dtype: float16}}
runtime: {{num_gpus: 1, enable_chunked_context: true}}
"""


@pytest.mark.parametrize("case, overrides, words", [
    ("reduce_fusion", "", ["build.flags.reduce_fusion", "MixtralForCausalLM"]),
    ("log_level", "build.flags.log_level=trace", ["build.flags.log_level", "'trace'", "use verbose"]),
    ("trt_overlap", "runtime.flags.enable_trt_overlap=true", ["runtime.flags.enable_trt_overlap", "remove it"]),
    ("int8_moe", "quantize.format=int8_sq,quantize.kv_cache_dtype=none", ["quantize.format", "int8 MoE experts"]),
    ("paged_default", None, ["build.flags.use_paged_context_fmha", "INT8 KV cache", "enable_chunked_context"]),
])
def test_each_gap_stops_pipeline_status_before_any_stage(case, overrides, words, mixtral_ckpt, tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    data = tmp_path / "data.pkl"
    data.write_bytes(b"")
    if overrides is None:
        params_file = tmp_path / "p.yaml"
        params_file.write_text(_INT8_KV_DEFAULT_PAGED.format(repo=REPO))
        args = ["--params-file", str(params_file)]
    else:
        args = ["--params-file", str(REPO / "params/examples/llama2-70b-h100x8-offline.yaml"), "--overrides",
                ",".join(x for x in (f"model.checkpoint={mixtral_ckpt},dataset.path={data}", overrides) if x)]
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TRTLLM_")}
    env["PERFDAG_ARTIFACTS"] = str(tmp_path / "artifacts")
    out = subprocess.run([sys.executable, "-m", "pipeline", "status", *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = [x for x in (out.stdout + out.stderr).splitlines() if x.strip().startswith("- ")]
    assert any(all(w in x for w in words) for x in lines), lines
    assert not (tmp_path / "artifacts").exists()  # nothing ran, nothing written
