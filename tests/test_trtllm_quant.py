"""modelopt presets and KV-cache configs for TensorRT-LLM, checkpoint flags, and the export plan.

modelopt 0.47 (the CPU quick start's) holds `quant_cfg` as a list of entries, 0.37 (TensorRT-LLM
1.1/1.2's) as a dict with a "default" key; the configs are built for whichever runs, and both shapes
are also tested here with stand-in modules, so each environment checks both.
"""
from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest

from harness.backends.mtq_config import QuantizeError, set_awq_block_size
from harness.backends.trtllm import TrtllmError
from harness.backends.trtllm.quant import (
    build_modelopt_config,
    checkpoint_flag_problems,
    export_plan,
    merge_kv_entries,
    modelopt_quant_cfg,
)
from harness.config.schema import Params


def trt(**quantize) -> Params:
    return Params.model_validate({"quantize": quantize, "build": {
        "backend": "trtllm", "device": "cuda", "dtype": "bfloat16", "tp_size": 4, "pp_size": 2},
        "runtime": {"num_gpus": 8}})


@pytest.mark.parametrize("fmt, kv, want", [
    ("fp8", "fp8", ("FP8_DEFAULT_CFG", "FP8_KV_CFG")),
    ("fp8", "none", ("FP8_DEFAULT_CFG", None)),
    ("int8_sq", "int8", ("INT8_SMOOTHQUANT_CFG", "INT8_KV")),
    ("int4_awq", "fp8", ("INT4_AWQ_CFG", "FP8_KV_CFG")),
    ("w4a8_awq", "fp8", ("W4A8_AWQ_BETA_CFG", "FP8_KV_CFG")),
    ("nvfp4", "fp8", ("NVFP4_DEFAULT_CFG", "FP8_KV_CFG")),
    ("int8", "none", ("INT8_WEIGHT_ONLY_CFG", None)),
    ("none", "fp8", (None, "FP8_KV_CFG")),
    ("none", "none", (None, None)),
])
def test_preset_names(fmt, kv, want):
    assert modelopt_quant_cfg(fmt, kv) == want


def test_unknown_names_are_errors():
    with pytest.raises(ValueError, match="nvfp4x"):
        modelopt_quant_cfg("nvfp4x", "none")
    with pytest.raises(ValueError, match="fp4"):
        modelopt_quant_cfg("fp8", "fp4")


def test_kv_entries_append_to_the_list_shaped_quant_cfg():
    model = {"quant_cfg": [{"quantizer_name": "*", "enable": False},
                           {"quantizer_name": "*weight_quantizer", "cfg": {"num_bits": (4, 3), "axis": None}}],
             "algorithm": "max"}
    kv = [{"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": (4, 3), "axis": None}}]
    merged = merge_kv_entries(model, kv)
    assert merged["quant_cfg"] == model["quant_cfg"] + kv
    assert len(model["quant_cfg"]) == 2  # the preset itself is untouched
    kv_only = merge_kv_entries(None, kv)
    assert kv_only == {"quant_cfg": [{"quantizer_name": "*", "enable": False}] + kv, "algorithm": "max"}
    with pytest.raises(QuantizeError, match="dict-shaped quant_cfg"):
        merge_kv_entries({"quant_cfg": {"*": {"enable": False}}}, kv)


def test_kv_entries_merge_into_the_dict_shaped_quant_cfg():
    """modelopt 0.37: KV patterns become keys; "default" (applied first wherever it sits) stays."""
    model = {"quant_cfg": {"*weight_quantizer": {"num_bits": 8, "axis": 0}, "default": {"enable": False}},
             "algorithm": "smoothquant"}
    kv = {"*[kv]_bmm_quantizer": {"num_bits": 8, "axis": None, "enable": True}}
    merged = merge_kv_entries(model, kv)
    assert merged == {"quant_cfg": {**model["quant_cfg"], **kv}, "algorithm": "smoothquant"}
    assert "*[kv]_bmm_quantizer" not in model["quant_cfg"]
    assert merge_kv_entries(None, kv) == {"quant_cfg": {"default": {"enable": False}, **kv}, "algorithm": "max"}
    with pytest.raises(QuantizeError, match="list-shaped quant_cfg"):
        merge_kv_entries({"quant_cfg": [{"quantizer_name": "*", "enable": False}]}, kv)


def _fake_mtq(shape: str) -> SimpleNamespace:
    """Stand-ins for modelopt.torch.quantization's presets in 0.37's dict shape or 0.47's list shape."""
    if shape == "dict":
        tail = {"*lm_head*": {"enable": False}, "default": {"enable": False}}
        return SimpleNamespace(
            FP8_DEFAULT_CFG={"quant_cfg": {"*weight_quantizer": {"num_bits": (4, 3), "axis": None},
                                           "*input_quantizer": {"num_bits": (4, 3), "axis": None}, **tail},
                             "algorithm": "max"},
            INT8_SMOOTHQUANT_CFG={"quant_cfg": {"*weight_quantizer": {"num_bits": 8, "axis": 0}, **tail},
                                  "algorithm": "smoothquant"},
            INT4_AWQ_CFG={"quant_cfg": {"*weight_quantizer": {"num_bits": 4, "block_sizes": {-1: 128, "type": "static"},
                                                              "enable": True}, **tail},
                          "algorithm": {"method": "awq_lite", "alpha_step": 0.1}},
            W4A8_AWQ_BETA_CFG={"quant_cfg": {"*weight_quantizer": [
                {"num_bits": 4, "block_sizes": {-1: 128, "type": "static"}, "enable": True},
                {"num_bits": (4, 3), "axis": None, "enable": True}], **tail}, "algorithm": "awq_lite"},
            FP8_KV_CFG={"quant_cfg": {"*[kv]_bmm_quantizer": {"num_bits": (4, 3), "axis": None, "enable": True},
                                      "default": {"enable": False}}, "algorithm": "max"})
    head = [{"quantizer_name": "*", "enable": False}]
    return SimpleNamespace(
        FP8_DEFAULT_CFG={"quant_cfg": head + [{"quantizer_name": "*weight_quantizer", "cfg": {"num_bits": (4, 3)}}],
                         "algorithm": "max"},
        INT8_WEIGHT_ONLY_CFG={"quant_cfg": head + [{"quantizer_name": "*weight_quantizer", "cfg": {"num_bits": 8}}],
                              "algorithm": "max"},
        INT4_AWQ_CFG={"quant_cfg": head + [{"quantizer_name": "*weight_quantizer",
                                            "cfg": {"num_bits": 4, "block_sizes": {-1: 128}}}],
                      "algorithm": "awq_lite"},
        FP8_KV_CFG={"quant_cfg": [{"quantizer_name": "*[kv]_bmm_quantizer",
                                   "cfg": {"num_bits": (4, 3), "axis": None}}]})


def test_dict_shaped_modelopt_configs():
    """What perfdag hands modelopt 0.37 (TensorRT-LLM 1.1/1.2) for each case, from its own presets."""
    mtq = _fake_mtq("dict")
    before = copy.deepcopy(mtq.__dict__)
    cfg = build_modelopt_config("fp8", "fp8", mtq=mtq)
    assert cfg["quant_cfg"]["*[kv]_bmm_quantizer"] == {"num_bits": (4, 3), "axis": None, "enable": True}
    assert cfg["quant_cfg"]["default"] == {"enable": False} and cfg["algorithm"] == "max"
    sq = build_modelopt_config("int8_sq", "int8", mtq=mtq)
    assert sq["quant_cfg"]["*[kv]_bmm_quantizer"] == {"num_bits": 8, "axis": None, "enable": True}
    assert sq["algorithm"] == "smoothquant"
    awq = build_modelopt_config("int4_awq", "none", awq_block_size=64, mtq=mtq)
    assert awq["quant_cfg"]["*weight_quantizer"]["block_sizes"][-1] == 64
    w4a8 = build_modelopt_config("w4a8_awq", "fp8", awq_block_size=64, mtq=mtq)
    assert w4a8["quant_cfg"]["*weight_quantizer"][0]["block_sizes"][-1] == 64
    kv_only = build_modelopt_config("none", "fp8", mtq=mtq)
    assert kv_only == {"quant_cfg": {"default": {"enable": False}, "*[kv]_bmm_quantizer": {
        "num_bits": (4, 3), "axis": None, "enable": True}}, "algorithm": "max"}
    assert mtq.__dict__ == before  # presets are module globals: never edited


def test_int8_weight_only_refused_without_the_preset():
    """modelopt 0.37 has no INT8_WEIGHT_ONLY_CFG and would export int8 weights as W8A8_SQ_PER_CHANNEL."""
    with pytest.raises(QuantizeError) as e:
        build_modelopt_config("int8", "none", mtq=_fake_mtq("dict"))
    msg = str(e.value)
    assert "quantize.format='int8'" in msg and "INT8_WEIGHT_ONLY_CFG" in msg and "W8A8_SQ_PER_CHANNEL" in msg
    assert "int8_sq" in msg  # the fix
    assert build_modelopt_config("int8", "none", mtq=_fake_mtq("list"))["quant_cfg"][1]["cfg"] == {"num_bits": 8}


def test_awq_block_size_needs_a_weight_quantizer():
    with pytest.raises(QuantizeError, match="block_sizes"):
        set_awq_block_size({"quant_cfg": {"default": {"enable": False}}}, 64)


@pytest.fixture(scope="module")
def mtq():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import modelopt.torch.quantization as mtq
    return mtq


@pytest.mark.parametrize("fmt", ["fp8", "int8_sq", "int4_awq", "w4a8_awq", "nvfp4"])
def test_real_modelopt_config_matches_modelopts_own_merge(mtq, fmt):
    """Against the installed modelopt: 0.47, the same result as mtq.update_quant_cfg_with_kv_cache_quant;
    0.37 (which has no such function), its FP8_KV_CFG patterns merged without its "default".
    The preset object is never mutated."""
    preset = getattr(mtq, modelopt_quant_cfg(fmt, "fp8")[0])
    before = copy.deepcopy(preset)
    cfg = build_modelopt_config(fmt, "fp8", mtq=mtq)
    if isinstance(preset["quant_cfg"], list):
        assert cfg == mtq.update_quant_cfg_with_kv_cache_quant(preset, mtq.FP8_KV_CFG["quant_cfg"])
        assert cfg["quant_cfg"][-1]["quantizer_name"] == "*[kv]_bmm_quantizer"
    else:
        kv = {k: v for k, v in mtq.FP8_KV_CFG["quant_cfg"].items() if k != "default"}
        assert kv and cfg == {**preset, "quant_cfg": {**preset["quant_cfg"], **kv}}
        assert cfg["quant_cfg"]["default"] == {"enable": False}
    assert preset == before
    assert build_modelopt_config(fmt, "none", mtq=mtq) == preset


def _weight_cfg(cfg: dict):
    inner = cfg["quant_cfg"]
    if isinstance(inner, dict):
        return inner["*weight_quantizer"]
    return next(e for e in inner if e["quantizer_name"] == "*weight_quantizer")["cfg"]


def test_real_modelopt_int8_kv_and_awq_block_size(mtq):
    cfg = build_modelopt_config("int4_awq", "int8", awq_block_size=64, mtq=mtq)
    assert _weight_cfg(cfg)["block_sizes"][-1] == 64
    if isinstance(cfg["quant_cfg"], list):
        assert cfg["quant_cfg"][-1] == {"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": 8, "axis": None}}
    else:
        assert cfg["quant_cfg"]["*[kv]_bmm_quantizer"] == {"num_bits": 8, "axis": None, "enable": True}
    assert _weight_cfg(mtq.INT4_AWQ_CFG)["block_sizes"][-1] == 128
    w4a8 = build_modelopt_config("w4a8_awq", "none", awq_block_size=64, mtq=mtq)
    stages = _weight_cfg(w4a8)
    assert stages[0]["block_sizes"][-1] == 64 and tuple(stages[1]["num_bits"]) == (4, 3)
    assert build_modelopt_config("none", "none", mtq=mtq) is None
    # The quantize.format -> TRT-LLM quant_algo the checkpoint will carry: modelopt's names.
    from modelopt.torch.export.model_utils import MODEL_NAME_TO_TYPE
    assert MODEL_NAME_TO_TYPE["MixtralForCausalLM"] == "llama" and MODEL_NAME_TO_TYPE["Llama"] == "llama"


@pytest.mark.parametrize("fmt, kv, block", [("int8_sq", "int8", None), ("int4_awq", "fp8", 64), ("none", "fp8", None)])
def test_real_modelopt_quantizes_and_exports_with_the_config(fmt, kv, block, tmp_path):
    """The configs really quantize with the installed modelopt, and its TensorRT-LLM export (on CPU)
    carries the quant algos the plan expects (checkpoint_config_problems is empty)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from harness.backends.trtllm.quant import calibrate, checkpoint_config_problems, export_checkpoint, load_for_export
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(tmp_path / "src")
    flags = {"awq_block_size": block} if block else {}
    p = Params.model_validate({"quantize": {"format": fmt, "kv_cache_dtype": kv, "flags": flags},
                               "build": {"backend": "trtllm", "device": "cuda", "dtype": "float16"}})
    plan = export_plan(p, architecture="LlamaForCausalLM")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = load_for_export(tmp_path / "src", dtype="float32", device="cpu")
        calibrate(model, plan, [list(range(i, i + 16)) for i in range(0, 96, 16)], log=lambda s: None)
        export_checkpoint(model, plan, tmp_path / "ckpt", json.loads((tmp_path / "src" / "config.json").read_text()))
    finally:
        torch.set_num_threads(n)
    assert checkpoint_config_problems(tmp_path / "ckpt", p) == []


def test_export_plan_for_trtllm():
    plan = export_plan(trt(format="fp8", kv_cache_dtype="fp8"), architecture="MixtralForCausalLM")
    assert plan["exporter"] == "export_tensorrt_llm_checkpoint"
    assert plan["kwargs"] == {"decoder_type": "llama", "dtype": "bfloat16", "inference_tensor_parallel": 4,
                              "inference_pipeline_parallel": 2}
    assert (plan["quant_preset"], plan["kv_preset"], plan["quant_algo"], plan["kv_cache_quant_algo"]) == \
        ("FP8_DEFAULT_CFG", "FP8_KV_CFG", "FP8", "FP8")


def test_export_plan_never_passes_tp_zero():
    p = trt(format="int4_awq")
    assert export_plan(p)["kwargs"]["inference_tensor_parallel"] >= 1


def test_export_plan_for_torch_is_the_unified_hf_checkpoint():
    plan = export_plan(Params.model_validate({"quantize": {"format": "int8_sq"}}))
    assert plan["exporter"] == "export_hf_checkpoint" and plan["kwargs"] == {"dtype": "float32"}


def test_checkpoint_flags_map_onto_the_plan():
    p = trt(format="int4_awq", flags={"qformat": "int4_awq", "kv_cache_dtype": "fp8", "calib_size": 64,
                                      "calib_max_seq_length": 2048, "awq_block_size": 64, "tp_size": 4,
                                      "pipeline_parallelism": 2, "dtype": "float16", "decoder_type": "llama",
                                      "seed": 3})
    assert checkpoint_flag_problems(p) == []
    plan = export_plan(p)
    assert (plan["kv_preset"], plan["calib_size"], plan["calib_max_len"], plan["awq_block_size"], plan["seed"]) == \
        ("FP8_KV_CFG", 64, 2048, 64, 3)
    assert plan["kwargs"]["dtype"] == "float16" and plan["kwargs"]["decoder_type"] == "llama"
    assert export_plan(trt(format="none", flags={"qformat": "full_prec"}))["quant_preset"] is None


def test_unknown_checkpoint_flag_is_an_error():
    p = trt(format="fp8", flags={"batch_size": 16, "calib_sise": 4})
    with pytest.raises(TrtllmError) as e:
        export_plan(p)
    assert len(e.value.problems) == 2
    assert "did you mean 'calib_size'" in e.value.problems[1]
