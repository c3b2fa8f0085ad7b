"""modelopt presets and KV-cache configs for TensorRT-LLM, checkpoint flags, and the export plan."""
from __future__ import annotations

import copy

import pytest

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
    with pytest.raises(TypeError, match="list-shaped"):
        merge_kv_entries({"quant_cfg": {"*": {"enable": False}}}, kv)


@pytest.fixture(scope="module")
def mtq():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import modelopt.torch.quantization as mtq
    return mtq


@pytest.mark.parametrize("fmt", ["fp8", "int8_sq", "int4_awq", "w4a8_awq", "nvfp4"])
def test_real_modelopt_config_matches_modelopts_own_merge(mtq, fmt):
    """Against the installed modelopt (0.47): same result as mtq.update_quant_cfg_with_kv_cache_quant,
    and the preset object is not mutated."""
    preset = getattr(mtq, modelopt_quant_cfg(fmt, "fp8")[0])
    before = copy.deepcopy(preset)
    cfg = build_modelopt_config(fmt, "fp8", mtq=mtq)
    assert cfg == mtq.update_quant_cfg_with_kv_cache_quant(preset, mtq.FP8_KV_CFG["quant_cfg"])
    assert cfg["quant_cfg"][-1]["quantizer_name"] == "*[kv]_bmm_quantizer"
    assert preset == before
    assert build_modelopt_config(fmt, "none", mtq=mtq) == preset


def test_real_modelopt_int8_kv_and_awq_block_size(mtq):
    cfg = build_modelopt_config("int4_awq", "int8", awq_block_size=64, mtq=mtq)
    weight = next(e for e in cfg["quant_cfg"] if e["quantizer_name"] == "*weight_quantizer")
    assert weight["cfg"]["block_sizes"][-1] == 64
    assert cfg["quant_cfg"][-1] == {"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": 8, "axis": None}}
    assert next(e for e in mtq.INT4_AWQ_CFG["quant_cfg"]
                if e["quantizer_name"] == "*weight_quantizer")["cfg"]["block_sizes"][-1] == 128
    w4a8 = build_modelopt_config("w4a8_awq", "none", awq_block_size=64, mtq=mtq)
    stages = next(e for e in w4a8["quant_cfg"] if e["quantizer_name"] == "*weight_quantizer")["cfg"]
    assert stages[0]["block_sizes"][-1] == 64 and stages[1]["num_bits"] == (4, 3)
    assert build_modelopt_config("none", "none", mtq=mtq) is None
    # The quantize.format -> TRT-LLM quant_algo the checkpoint will carry: modelopt's names.
    from modelopt.torch.export.model_utils import MODEL_NAME_TO_TYPE
    assert MODEL_NAME_TO_TYPE["MixtralForCausalLM"] == "llama" and MODEL_NAME_TO_TYPE["Llama"] == "llama"


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
