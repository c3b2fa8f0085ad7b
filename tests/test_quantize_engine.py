"""modelopt quantization + the CPU torch engine: the engine must reproduce modelopt's fake quant.

For every CPU format: quantize a tiny random Llama, export, build an engine from the export,
and check the engine's logits and greedy tokens against modelopt's in-memory model.
"""
import json
import shutil

import pytest
import torch

from harness.backends.torch.engine import (
    EngineBuildError,
    build_torch_engine,
    load_torch_engine,
)
from harness.backends.torch.quantize import (
    CPU_FORMATS,
    GPU_ONLY_FORMATS,
    QuantizeError,
    greedy_tokens,
    quantize_checkpoint,
    quantize_in_memory,
)


def _has_w8a16() -> bool:
    """modelopt 0.37 (TensorRT-LLM 1.1/1.2's) has no INT8_WEIGHT_ONLY_CFG: int8 is refused there."""
    import modelopt.torch.quantization as mtq
    return hasattr(mtq, "INT8_WEIGHT_ONLY_CFG")


HAS_W8A16 = _has_w8a16()
INT8_ANY = "int8" if HAS_W8A16 else "int8_sq"  # an int8-weight format this modelopt exports

# Measured max |engine - modelopt| logit difference is <= 5e-7 (fp32 rounding of scale
# products) on logits of magnitude ~1; 1e-5 leaves headroom without hiding a real bug
# (a wrong scale moves logits by > 0.1).
LOGIT_ATOL = 1e-5
LIMITS = dict(max_batch_size=4, max_num_tokens=64, max_seq_len=64, max_input_len=32)
QUANTIZED = {
    # format: (export weight dtype, weight_scale rank, has input_scale, has pre_quant_scale)
    "int8": (torch.int8, 1, False, False),
    "int8_sq": (torch.int8, 1, True, True),
    "fp8": (torch.float8_e4m3fn, 0, True, False),
    "int4_awq": (torch.uint8, 2, False, False),  # AWQ's q_proj pre_quant_scale is folded into the layernorm
}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Tiny matmuls on a shared CPU: intra-op threads only contend (measured 100x slower).
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tiny_llama(path, hidden):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    # int4_awq packs whole groups of 128 input columns, so it needs hidden >= 128.
    return {64: _tiny_llama(root / "h64", 64), 128: _tiny_llama(root / "h128", 128)}


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (12,), generator=g).tolist() for _ in range(4)]


def _src(ckpts, fmt):
    return ckpts[128 if fmt == "int4_awq" else 64]


@pytest.fixture(scope="module")
def exported(ckpts, prompts, tmp_path_factory):
    """fmt -> (export dir, quantize_checkpoint result), built once per module."""
    cache = {}

    def get(fmt):
        if fmt not in cache:
            out = tmp_path_factory.mktemp(f"q_{fmt}")
            cache[fmt] = out, quantize_checkpoint(_src(ckpts, fmt), out, fmt, prompts, log=lambda s: None)
        return cache[fmt]
    return get


@pytest.mark.parametrize("fmt", CPU_FORMATS)
def test_engine_matches_modelopt(fmt, ckpts, prompts, exported, tmp_path):
    if fmt == "int8" and not HAS_W8A16:
        with pytest.raises(QuantizeError, match="INT8_WEIGHT_ONLY_CFG.*W8A8_SQ_PER_CHANNEL.*int8_sq"):
            exported(fmt)
        return
    out, res = exported(fmt)
    assert res["format"] == fmt and res["calib_samples"] == (0 if fmt == "none" else len(prompts))
    assert 0.0 <= res["greedy_token_agreement"] <= 1.0 and 0.0 <= res["teacher_forced_agreement"] <= 1.0
    json.dumps(res)

    if fmt != "none":  # the export layout the engine decodes
        from safetensors.torch import load_file
        sd = load_file(str(out / "model.safetensors"))
        w_dtype, scale_rank, has_in, has_pqs = QUANTIZED[fmt]
        p = "model.layers.0.self_attn.q_proj"
        assert sd[f"{p}.weight"].dtype == w_dtype and sd[f"{p}.weight_scale"].dim() == scale_rank
        assert (f"{p}.input_scale" in sd) == has_in and (f"{p}.pre_quant_scale" in sd) == has_pqs

    cfg = build_torch_engine(out, tmp_path / "engine", **LIMITS)
    assert cfg["quantization"]["format"] == fmt
    assert cfg["quantization"]["quantized_layers"] == (0 if fmt == "none" else 14)
    engine, loaded_cfg = load_torch_engine(tmp_path / "engine")
    assert loaded_cfg == cfg and not engine.training

    ref = quantize_in_memory(_src(ckpts, fmt), fmt, prompts, log=lambda s: None)
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            torch.testing.assert_close(engine(input_ids=ids).logits, ref(input_ids=ids).logits,
                                       atol=LOGIT_ATOL, rtol=0)
            assert greedy_tokens(engine, p) == greedy_tokens(ref, p)  # KV-cache decode path

        # HF generate on a left-padded batch: attention_mask + cache through QuantLinear.
        ids = torch.tensor([[0] * 4 + prompts[0][:8], prompts[1]])
        mask = torch.tensor([[0] * 4 + [1] * 8, [1] * 12])
        kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
        assert torch.equal(engine.generate(**kw), ref.generate(**kw))


def test_plain_from_pretrained_on_export_is_silently_wrong(exported, ckpts, prompts):
    """The trap the engine exists for: transformers 5 loads int8 codes as floats without scales.
    (transformers 4.57 at least refuses to copy int8 codes into float weights.)"""
    import transformers
    from transformers import AutoModelForCausalLM
    out, _ = exported(INT8_ANY)
    if int(transformers.__version__.split(".")[0]) < 5:
        with pytest.raises(RuntimeError, match="floating point"):
            AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
        return
    naive = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    ref = quantize_in_memory(_src(ckpts, INT8_ANY), INT8_ANY, prompts, log=lambda s: None)
    with torch.no_grad():
        diff = max((naive(input_ids=torch.tensor([p])).logits - ref(input_ids=torch.tensor([p])).logits).abs().max()
                   for p in prompts)
    agree = sum(a == b for p in prompts for a, b in zip(greedy_tokens(naive, p), greedy_tokens(ref, p)))
    assert diff > 0.1 and agree / (16 * len(prompts)) < 0.5


@pytest.mark.parametrize("field, kwargs", [
    ("max_seq_len", dict(max_seq_len=256)),        # > max_position_embeddings=128
    ("max_input_len", dict(max_input_len=64)),     # >= max_seq_len
    ("max_num_tokens", dict(max_num_tokens=16)),   # < max_input_len
    ("dtype", dict(dtype="float8")),
])
def test_unbuildable_request_names_field(field, kwargs, exported, tmp_path):
    out, _ = exported("none")
    with pytest.raises(EngineBuildError, match=field):
        build_torch_engine(out, tmp_path / "e", **{**LIMITS, **kwargs})


def test_unknown_export_algo_is_refused(exported, tmp_path):
    out, _ = exported(INT8_ANY)
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    q = json.loads((bad / "hf_quant_config.json").read_text())
    q["quantization"]["quant_algo"] = "NVFP4"
    (bad / "hf_quant_config.json").write_text(json.dumps(q))
    with pytest.raises(EngineBuildError, match="quant_algo='NVFP4'"):
        build_torch_engine(bad, tmp_path / "e", **LIMITS)


@pytest.mark.parametrize("fmt", sorted(GPU_ONLY_FORMATS))
def test_gpu_only_format_refused_on_cpu(fmt, ckpts, prompts, tmp_path):
    with pytest.raises(QuantizeError) as err:
        quantize_checkpoint(ckpts[64], tmp_path / "q", fmt, prompts, log=lambda s: None)
    assert "CPU" in str(err.value) and all(f in str(err.value) for f in CPU_FORMATS)


def test_int4_needs_whole_groups(ckpts, prompts, tmp_path):
    with pytest.raises(QuantizeError, match="128"):
        quantize_checkpoint(ckpts[64], tmp_path / "q", "int4_awq", prompts, log=lambda s: None)
