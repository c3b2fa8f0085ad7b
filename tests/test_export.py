"""Exports of each example's architecture, on CPU with tiny random models, under whichever
transformers / modelopt this environment has (CI runs this file in the quick-start environment,
transformers 5 + modelopt 0.47, and in TensorRT-LLM 1.x's, transformers 4.57 + modelopt 0.37).

Llama-2 style (RoPE 10000, no scaling), Llama-3.1 style (rope_type llama3, theta 500000, factor 8)
and Mixtral (MoE, 4 experts top-2, theta 1e6) go through both exporters: modelopt's TensorRT-LLM
checkpoint (the trtllm backend; no tensorrt_llm needed) and its HF checkpoint (the torch backend,
then the torch engine). The unpatched paths are run too, to show what the checks catch:
transformers 5 loses RoPE in both exports and crashes modelopt's MoE export.

Select with `pytest -k "export and (rope or mixtral)"`.
"""
from __future__ import annotations

import json

import pytest
import torch
import transformers

from harness.backends.base import Work
from harness.backends.export_checks import (
    SOURCE_CONFIG,
    hf_checkpoint_problems,
    patch_hf_rope,
    read_config,
    rope_of,
    trtllm_checkpoint_problems,
)
from harness.backends.trtllm.quant import (
    calibrate,
    checkpoint_config_problems,
    export_checkpoint,
    export_plan,
    export_trtllm_checkpoint,
    load_for_export,
)
from harness.config.schema import Params

TF5 = int(transformers.__version__.split(".")[0]) >= 5
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}
# name -> (config class, kwargs, expected rope theta, expected scaling)
MODELS = {
    "llama2": ("LlamaConfig", dict(max_position_embeddings=4096, rope_theta=10000.0), 10000.0, None),
    "llama31": ("LlamaConfig", dict(max_position_embeddings=131072, rope_theta=500000.0,
                                    rope_scaling=dict(LLAMA3_SCALING)), 500000.0, LLAMA3_SCALING),
    "mixtral": ("MixtralConfig", dict(max_position_embeddings=4096, rope_theta=1e6, num_local_experts=4,
                                      num_experts_per_tok=2), 1e6, None),
}
QUIET = dict(log=lambda s: None)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls on a shared CPU: more threads only contend
    yield
    torch.set_num_threads(n)


def _save(path, name: str, hidden: int = 64):
    cls, kw, _, _ = MODELS[name]
    cfg = getattr(transformers, cls)(vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden,
                                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     tie_word_embeddings=False, **kw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """name -> checkpoint dir (created once); 'mixtral128' has int4-packable sizes."""
    root, made = tmp_path_factory.mktemp("src"), {}

    def get(name):
        if name not in made:
            base = name.removesuffix("128")
            made[name] = _save(root / name, base, hidden=128 if name.endswith("128") else 64)
        return made[name]
    return get


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (24,), generator=g).tolist() for _ in range(8)]


def trt_plan(fmt="fp8", kv="fp8", arch="LlamaForCausalLM") -> dict:
    p = Params.model_validate({"quantize": {"format": fmt, "kv_cache_dtype": kv},
                               "build": {"backend": "trtllm", "device": "cuda", "dtype": "float16"}})
    return export_plan(p, architecture=arch)


def _arch(path) -> str:
    return json.loads((path / "config.json").read_text())["architectures"][0]


# ---------------------------------------------------------------------------------------------
# TensorRT-LLM checkpoints
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama2", "llama31", "mixtral"])
def test_export_rope_trtllm_checkpoint(name, src, prompts, tmp_path):
    """Every architecture exports on CPU with the source's RoPE, and the check passes."""
    _, _, theta, scaling = MODELS[name]
    out = tmp_path / "ckpt"
    info = export_trtllm_checkpoint(src(name), out, trt_plan(arch=_arch(src(name))), prompts, device="cpu",
                                    load_dtype="float32", **QUIET)
    cfg = read_config(out)
    assert cfg["rotary_base"] == theta
    if scaling is None:
        assert cfg["rotary_scaling"] is None
    else:  # TensorRT-LLM reads `type` (falling back to `rope_type`)
        assert cfg["rotary_scaling"] == {**scaling, "type": "llama3"}
    assert cfg["quantization"]["quant_algo"] == "FP8" and cfg["quantization"]["kv_cache_quant_algo"] == "FP8"
    assert (cfg["vocab_size"], cfg["head_size"], cfg["num_key_value_heads"]) == (256, 16, 2)
    assert trtllm_checkpoint_problems(cfg, json.loads((src(name) / "config.json").read_text())) == []
    assert info["plan"]["kwargs"]["decoder_type"] == "llama"
    assert (out / SOURCE_CONFIG).is_file() and (out / "rank0.safetensors").is_file()


def test_export_rope_unpatched_trtllm_is_caught(src, prompts, tmp_path):
    """modelopt's export as it is: under transformers 5 it writes no rotary_base / rotary_scaling
    (TensorRT-LLM would use 10000, unscaled) and the check names both; under 4.57 it is right."""
    source = json.loads((src("llama31") / "config.json").read_text())
    model = load_for_export(src("llama31"), dtype="float32", device="cpu")
    plan = trt_plan()
    calibrate(model, plan, prompts, **QUIET)
    export_checkpoint(model, plan, tmp_path / "raw", source, fix_rope=False)
    problems = trtllm_checkpoint_problems(read_config(tmp_path / "raw"), source)
    if TF5:
        assert any(p.startswith("checkpoint rotary_base: missing (TensorRT-LLM then uses 10000.0)") and "500000" in p
                   for p in problems), problems
        assert any(p.startswith("checkpoint rotary_scaling: missing") and "llama3" in p for p in problems), problems
    else:
        assert problems == []


@pytest.mark.parametrize("fmt, size", [("fp8", ""), ("int4_awq", "128")])
def test_export_mixtral_trtllm_checkpoint(fmt, size, src, prompts, tmp_path):
    """Mixtral exports to TensorRT-LLM with its MoE routing and RoPE (transformers 5: after unfusing)."""
    out = tmp_path / "ckpt"
    export_trtllm_checkpoint(src("mixtral" + size), out, trt_plan(fmt, "none", "MixtralForCausalLM"), prompts,
                             device="cpu", load_dtype="float32", **QUIET)
    cfg = read_config(out)
    assert cfg["architecture"] == "MixtralForCausalLM"
    assert cfg["moe"]["num_experts"] == 4 and cfg["moe"]["top_k"] == 2
    assert cfg["rotary_base"] == 1e6 and cfg["rotary_scaling"] is None
    assert cfg["quantization"]["quant_algo"] == {"fp8": "FP8", "int4_awq": "W4A16_AWQ"}[fmt]
    from safetensors import safe_open
    with safe_open(str(out / "rank0.safetensors"), "pt") as f:
        assert list(f.get_slice("transformer.layers.0.mlp.fc.weight").get_shape())[0] == 4  # stacked experts


def test_export_mixtral_without_unfuse_fails(src, prompts, tmp_path):
    """The crash the unfuse exists for: transformers 5 fuses the experts and modelopt's TensorRT-LLM
    export indexes them per expert. transformers 4.57 keeps per-expert modules: nothing to unfuse."""
    model = load_for_export(src("mixtral"), dtype="float32", device="cpu", unfuse=False)
    from harness.backends.moe import unfuse_moe_experts
    if not TF5:
        assert unfuse_moe_experts(model) == 0
        pytest.skip("transformers < 5 stores Mixtral experts per module; the export works without unfusing")
    plan = trt_plan("fp8", "none", "MixtralForCausalLM")
    calibrate(model, plan, prompts, **QUIET)
    with pytest.raises(TypeError, match="has no len"):
        export_checkpoint(model, plan, tmp_path / "raw", None, fix_rope=False)


def test_export_mixtral_int8_trtllm_fails_as_validation_says(src, prompts, tmp_path):
    """Why the trtllm rules refuse int8 / int8_sq for Mixtral: modelopt's TensorRT-LLM exporter (0.37 and
    0.47) cannot stack per-channel int8 expert scales. If a modelopt fixes it, this fails: lift the rule."""
    model = load_for_export(src("mixtral"), dtype="float32", device="cpu")
    plan = trt_plan("int8_sq", "none", "MixtralForCausalLM")
    calibrate(model, plan, prompts, **QUIET)
    with pytest.raises(RuntimeError, match="must match the size"):
        export_checkpoint(model, plan, tmp_path / "raw", None, fix_rope=False)


def test_export_mixtral_unfuse_is_exact(src):
    """Unfused experts compute what the fused ones did (fp32, same routing)."""
    from harness.backends.moe import UnfusedMixtralSparseMoeBlock, unfuse_moe_experts
    model = load_for_export(src("mixtral"), dtype="float32", device="cpu", unfuse=False)
    ids = torch.tensor([list(range(3, 40))])
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        n = unfuse_moe_experts(model)
        got = model(input_ids=ids).logits
    assert n == (2 if TF5 else 0)
    if TF5:
        assert isinstance(model.model.layers[0].mlp, UnfusedMixtralSparseMoeBlock)
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)


def test_export_check_stops_mismatched_rope_and_mixtral_before_trtllm_build(src, prompts, tmp_path, monkeypatch):
    """BuildEngine re-checks the checkpoint against the source config kept beside it, before trtllm-build."""
    from harness.backends import trtllm as trt_pkg
    from harness.backends.trtllm import build as trt_build
    out = tmp_path / "ckpt"
    export_trtllm_checkpoint(src("mixtral"), out, trt_plan("fp8", "none", "MixtralForCausalLM"), prompts,
                             device="cpu", load_dtype="float32", **QUIET)
    cfg = read_config(out)
    cfg.pop("rotary_base")
    cfg["moe"]["top_k"] = 1
    (out / "config.json").write_text(json.dumps(cfg))
    p = Params.model_validate({"quantize": {"format": "fp8"}, "build": {"backend": "trtllm", "device": "cuda",
                                                                         "dtype": "float16"}})
    problems = checkpoint_config_problems(out, p)
    assert any("rotary_base: missing" in x and "1000000.0" in x for x in problems), problems
    assert any("moe.top_k: 1" in x and "num_experts_per_tok=2" in x for x in problems), problems

    def no_build(*a, **k):
        raise AssertionError("trtllm-build must not run on a mismatched checkpoint")
    monkeypatch.setattr(trt_build, "run_trtllm_build", no_build)
    with pytest.raises(trt_pkg.TrtllmError, match="rotary_base"):
        trt_pkg.TrtllmBackend().build.run(Work(p, tmp_path, {"checkpoint": out}, out_dir=tmp_path / "engine",
                                               log=lambda s: None))


# ---------------------------------------------------------------------------------------------
# HF checkpoints (the torch backend) and the torch engine
# ---------------------------------------------------------------------------------------------

def _tf4_reading(cfg: dict) -> tuple:
    """What transformers 4.57 takes from a config.json: rope_theta / rope_scaling keys only."""
    return cfg.get("rope_theta"), cfg.get("rope_scaling")


@pytest.mark.parametrize("name", ["llama2", "llama31", "mixtral"])
def test_export_rope_hf_checkpoint(name, src, prompts, tmp_path):
    """The torch backend's export carries RoPE for transformers 4 and 5 readers alike."""
    from harness.backends.torch.quantize import quantize_checkpoint
    _, _, theta, scaling = MODELS[name]
    out = tmp_path / "q"
    res = quantize_checkpoint(src(name), out, "fp8", prompts, **QUIET)
    cfg = read_config(out)
    t4_theta, t4_scaling = _tf4_reading(cfg)
    assert t4_theta == theta
    assert (t4_scaling or None) == (dict(scaling) if scaling else None)
    assert rope_of(cfg) == (theta, dict(scaling) if scaling else None)
    got = transformers.AutoConfig.from_pretrained(out)  # this environment's own reading
    if TF5:
        assert got.rope_parameters["rope_theta"] == theta
    else:
        assert got.rope_theta == theta
        assert (getattr(got, "rope_scaling", None) or None) == (dict(scaling) if scaling else None)
    assert hf_checkpoint_problems(cfg, json.loads((src(name) / "config.json").read_text())) == []
    assert res["rope"]["rope_theta"] == theta


def test_export_rope_unpatched_hf_is_caught(src, prompts, tmp_path):
    """modelopt's HF export as it is: under transformers 5 only rope_parameters, which transformers
    4.57 (TensorRT-LLM's) ignores, reading rope_theta 10000 unscaled; the check says so."""
    from modelopt.torch.export import export_hf_checkpoint

    from harness.backends.torch.quantize import quantize_in_memory
    source = json.loads((src("llama31") / "config.json").read_text())
    model = quantize_in_memory(src("llama31"), "fp8", prompts, **QUIET)
    export_hf_checkpoint(model, export_dir=str(tmp_path / "raw"))
    problems = hf_checkpoint_problems(read_config(tmp_path / "raw"), source)
    if TF5:
        assert any("rope_theta: None (what transformers 4 reads)" in p and "500000" in p for p in problems), problems
        patch_hf_rope(tmp_path / "raw", source)
        assert hf_checkpoint_problems(read_config(tmp_path / "raw"), source) == []
    else:
        assert problems == []


@pytest.mark.parametrize("fmt", ["fp8", "int8_sq"])
def test_export_mixtral_hf_torch_engine(fmt, src, prompts, tmp_path):
    """Mixtral through the torch backend: quantize (experts unfused under transformers 5), HF export,
    engine build and load; the engine's logits equal modelopt's in-memory model's."""
    from harness.backends.torch.engine import build_torch_engine, load_torch_engine
    from harness.backends.torch.quantize import quantize_checkpoint, quantize_in_memory
    out = tmp_path / "q"
    quantize_checkpoint(src("mixtral"), out, fmt, prompts, **QUIET)
    cfg = read_config(out)
    assert cfg["num_local_experts"] == 4 and cfg["rope_theta"] == 1e6
    engine_cfg = build_torch_engine(out, tmp_path / "engine", max_batch_size=2, max_num_tokens=64, max_seq_len=64,
                                    max_input_len=32)
    # 2 layers x (4 attention + 4 experts x 3) quantized linears; the router stays unquantized
    assert engine_cfg["quantization"]["quantized_layers"] == 32
    engine, _ = load_torch_engine(tmp_path / "engine")
    ref = quantize_in_memory(src("mixtral"), fmt, prompts, **QUIET)
    ref_modules = dict(ref.named_modules())
    with torch.no_grad():
        # Every expert's decoded weight is modelopt's fake-quantized one. modelopt 0.37's exporter
        # rounds w / scale where its fake quant rounds w * (1 / scale): an element on a .5 boundary
        # may land one step apart (measured: 1 of 8192 in one expert).
        for name, m in engine.named_modules():
            if type(m).__name__ == "QuantLinear":
                r = ref_modules[name if name in ref_modules else name.replace(".mlp.", ".block_sparse_moe.")]
                same = ((m.weight - r.weight_quantizer(r.weight)).abs() <= 1e-6).float().mean().item()
                assert same >= 0.999, (name, same)
        # So logits agree to well within the quantization error itself (ref vs fp32: 6e-3..4e-2
        # here; engine vs ref: <= 1e-7 with modelopt 0.47, <= 3e-3 with 0.37's rounding). A wrong
        # scale or expert moves them by > 0.05 (measured with w1/w3 amaxes left unsynced).
        for p in prompts[:3]:
            ids = torch.tensor([p])
            torch.testing.assert_close(engine(input_ids=ids).logits, ref(input_ids=ids).logits, atol=5e-3, rtol=0)


# ---------------------------------------------------------------------------------------------
# The checks themselves, on hand-made configs (no export needed)
# ---------------------------------------------------------------------------------------------

def _mixtral_source() -> dict:
    return {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": 32000,
            "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
            "num_local_experts": 8, "num_experts_per_tok": 2, "rope_parameters": {"rope_theta": 1e6,
                                                                                  "rope_type": "default"}}


def test_export_checks_name_each_rope_and_mixtral_mismatch():
    src = _mixtral_source()
    good = {"architecture": "MixtralForCausalLM", "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_size": 128, "rotary_base": 1e6,
            "rotary_scaling": None, "moe": {"num_experts": 8, "top_k": 2, "normalization_mode": 1}}
    assert trtllm_checkpoint_problems(good, src) == []
    for change, words in [
        ({"rotary_base": None}, ["rotary_base: missing", "10000.0", "1000000.0"]),
        ({"rotary_base": 10000.0}, ["rotary_base: 10000.0"]),
        ({"rotary_scaling": {"type": "linear", "factor": 2.0}}, ["rotary_scaling", "no RoPE scaling"]),
        ({"moe": {"num_experts": 8, "top_k": 1}}, ["moe.top_k: 1", "num_experts_per_tok=2"]),
        ({"moe": None}, ["moe.num_experts: 0", "num_local_experts=8"]),
        ({"vocab_size": 32128}, ["vocab_size: 32128", "32000"]),
        ({"head_size": 64}, ["head_size: 64", "128"]),
    ]:
        bad = {**good, **change}
        problems = trtllm_checkpoint_problems(bad, src)
        assert len(problems) == 1 and all(w in problems[0] for w in words), (change, problems)
        assert "re-run Quantize" in problems[0]
    # Llama-3.1 scaling: a wrong factor is named; the legacy transformers-4 spelling is understood.
    src31 = {"model_type": "llama", "rope_theta": 500000.0, "rope_scaling": dict(LLAMA3_SCALING), "vocab_size": 8}
    ok = {"vocab_size": 8, "rotary_base": 500000.0, "rotary_scaling": {**LLAMA3_SCALING, "type": "llama3"}}
    assert trtllm_checkpoint_problems(ok, src31) == []
    wrong = trtllm_checkpoint_problems({**ok, "rotary_scaling": {**LLAMA3_SCALING, "factor": 4.0}}, src31)
    assert len(wrong) == 1 and "'factor': 4.0" in wrong[0]


def test_export_checks_rope_default_from_model_class():
    """A config without any RoPE key gets its class default (Mixtral's 1e6 under both transformers)."""
    src = {"model_type": "mixtral", "vocab_size": 8}
    assert trtllm_checkpoint_problems({"vocab_size": 8}, src)[0].startswith("checkpoint rotary_base: missing")
    assert trtllm_checkpoint_problems({"vocab_size": 8, "rotary_base": 1e6}, src) == []


def test_export_rope_hf_patch_keeps_both_spellings(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "rope_parameters": {
        **LLAMA3_SCALING, "rope_theta": 500000.0}}))
    src = json.loads((tmp_path / "config.json").read_text())
    assert hf_checkpoint_problems(src, src)  # transformers 4 would read 10000, unscaled
    patch_hf_rope(tmp_path, src)
    cfg = read_config(tmp_path)
    assert cfg["rope_theta"] == 500000.0 and cfg["rope_scaling"] == LLAMA3_SCALING
    assert cfg["rope_parameters"] == {**LLAMA3_SCALING, "rope_theta": 500000.0}
    assert hf_checkpoint_problems(cfg, src) == []
