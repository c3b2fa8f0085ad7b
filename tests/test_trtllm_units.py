"""trtllm pieces one at a time: build argv and engine config checks, tool versions for the key,
runtime flags in config.pbtxt, the DP layout, launch command structure, the repo writer."""
from __future__ import annotations

import json
import subprocess

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from harness.backends.trtllm import TrtllmError
from harness.backends.trtllm.build import engine_key_tools, gpu_compute_capability, trtllm_build_args
from harness.backends.trtllm.engine_check import check_engine_config
from harness.backends.trtllm.launch import pick_ports, tritonserver_commands
from harness.backends.trtllm.layout import (
    data_parallel_layout,
    default_num_servers,
    server_layout,
)
from harness.backends.trtllm.repo import fill_trtllm_repos, render_trtllm_model_config
from harness.config.schema import Params


def p(**sections) -> Params:
    doc = {"quantize": {"format": "fp8", "kv_cache_dtype": "fp8"},
           "build": {"backend": "trtllm", "device": "cuda", "dtype": "float16", "tp_size": 2, "max_batch_size": 64,
                     "max_num_tokens": 512, "max_input_len": 256, "max_seq_len": 512},
           "runtime": {"num_gpus": 4}}
    for k, v in sections.items():
        doc[k] = {**doc.get(k, {}), **v}
    return Params.model_validate(doc)


def test_build_argv_flags_normalized_and_sorted():
    argv = trtllm_build_args(p(build={"flags": {"workers": "2", "use_fused_mlp": True, "gemm_plugin": "AUTO",
                                                "strip_plan": True, "weight_sparsity": False}}), "/c", "/e")
    assert argv[:13] == ["trtllm-build", "--checkpoint_dir", "/c", "--output_dir", "/e", "--max_batch_size", "64",
                         "--max_num_tokens", "512", "--max_seq_len", "512", "--max_input_len", "256"]
    assert argv[13:] == ["--gemm_plugin", "auto", "--output_timing_cache", "/e/timing.cache", "--strip_plan",
                         "--use_fused_mlp", "enable", "--workers", "2"]
    with pytest.raises(ValueError, match="build.flags.bogus"):
        trtllm_build_args(p(build={"flags": {"bogus": 1}}), "/c", "/e")


def engine_config(**over) -> dict:
    cfg = {"version": "0.17.0",
           "pretrained_config": {"architecture": "LlamaForCausalLM", "dtype": "float16",
                                 "mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1},
                                 "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}},
           "build_config": {"max_input_len": 256, "max_seq_len": 512, "max_batch_size": 64, "max_beam_width": 1,
                            "max_num_tokens": 512, "kv_cache_type": "PAGED",
                            "plugin_config": {"use_paged_context_fmha": True, "gemm_plugin": None, "tokens_per_block": 32}}}
    for path, value in over.items():
        node = cfg
        *parents, leaf = path.split("__")
        for k in parents:
            node = node[k]
        node[leaf] = value
    return cfg


def test_engine_config_matches_and_mismatches(tmp_path):
    params = p(build={"flags": {"use_paged_context_fmha": "enable", "gemm_plugin": "disable", "tokens_per_block": 32}})
    (tmp_path / "config.json").write_text(json.dumps(engine_config()))
    assert check_engine_config(tmp_path, params, tools={"tensorrt_llm": "0.17.0"}) == []
    stale = engine_config(build_config__max_num_tokens=8192, pretrained_config__mapping={"tp_size": 1, "pp_size": 1},
                          build_config__plugin_config={"use_paged_context_fmha": False, "tokens_per_block": 64})
    problems = check_engine_config(stale, params, tools={"tensorrt_llm": "0.18.0"})
    assert any("build_config.max_num_tokens: 8192, asked 512" in x for x in problems)
    assert any("mapping.tp_size: 1, asked 2" in x for x in problems)
    assert any("plugin_config.use_paged_context_fmha: False, asked True" in x for x in problems)
    assert any("plugin_config.tokens_per_block: 64, asked 32" in x for x in problems)
    assert any("TensorRT-LLM 0.17.0" in x and "0.18.0" in x for x in problems)
    quant = check_engine_config(engine_config(pretrained_config__quantization={"quant_algo": "W4A16_AWQ"}), params)
    assert len(quant) == 2 and all("quantization" in x for x in quant)


def test_engine_key_tools_absent_and_present(monkeypatch):
    import torch

    from harness.cache.versions import package_version

    def no_smi(*a, **k):
        raise FileNotFoundError("nvidia-smi")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    tools = engine_key_tools(run=no_smi)
    assert set(tools) == {"tensorrt_llm", "gpu_compute_capability"}
    assert tools["gpu_compute_capability"] == "absent"
    assert tools["tensorrt_llm"] in (package_version("tensorrt_llm"), package_version("tensorrt-llm"))

    def smi(*a, **k):
        return subprocess.CompletedProcess(a, 0, stdout="9.0\n9.0\n9.0\n", stderr="")
    assert gpu_compute_capability(run=smi) == "9.0"


def test_runtime_flags_reach_config_pbtxt():
    params = p(runtime={"flags": {"kvcache_free_gpu_mem_frac": 0.85, "batch_scheduler_policy": "max_util",
                                  "exclude_input_from_output": False, "max_queue_size": 512, "decoding_mode": "top_k",
                                  "enable_context_fmha_fp32_acc": True, "use_inflight_batching": True},
                        "max_tokens_in_paged_kv_cache": 100000, "max_queue_delay_microseconds": 100})
    text = render_trtllm_model_config(params, "/e", model_name="m", decoupled=False, gpu_device_ids=None)
    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())
    got = {k: v.string_value for k, v in cfg.parameters.items()}
    assert got["kv_cache_free_gpu_mem_fraction"] == "0.85" and got["batch_scheduler_policy"] == "max_utilization"
    assert got["exclude_input_in_output"] == "false" and got["max_tokens_in_paged_kv_cache"] == "100000"
    assert got["decoding_mode"] == "top_k" and got["enable_context_fmha_fp32_acc"] == "true"
    assert "gpu_device_ids" not in got
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    assert cfg.dynamic_batching.default_queue_policy.max_queue_size == 512
    assert cfg.model_transaction_policy.decoupled is False
    with pytest.raises(TrtllmError, match="runtime.flags.bogus"):
        render_trtllm_model_config(p(runtime={"flags": {"bogus": 1}}), "/e", model_name="m", decoupled=False,
                                   gpu_device_ids=None)


def test_layout_modes_and_device_ordinals():
    assert data_parallel_layout(p()) == [[0, 1], [2, 3]]
    assert data_parallel_layout(p(runtime={"gpu_device_ids": [[0, 3], [1, 2]]})) == [[0, 3], [1, 2]]
    one_server = server_layout(p())
    assert [(s.mode, s.gpus, s.models) for s in one_server] == [("orchestrator", (0, 1, 2, 3),
                                                                ("tensorrt_llm_0", "tensorrt_llm_1"))]
    assert one_server[0].local_device_ids == [[0, 1], [2, 3]]
    two = server_layout(p(triton={"num_servers": 2}, runtime={"gpu_device_ids": [[0, 3], [1, 2]]}))
    assert [(s.mode, s.cuda_visible_devices, s.local_device_ids) for s in two] == [
        ("leader", "0,3", [[0, 1]]), ("leader", "1,2", [[0, 1]])]
    single = server_layout(p(build={"tp_size": 1}))
    assert single[0].mode == "single" and single[0].local_device_ids == [[0], [1], [2], [3]]
    assert default_num_servers(p(loadgen={"scenario": "Server"})) == 2
    assert default_num_servers(p()) == 1


def test_leader_mode_command_structure():
    params = p(triton={"num_servers": 2}, build={"tp_size": 2})
    specs = tritonserver_commands(params, "/r", [(9001, 9000, 9002), (9011, 9010, 9012)], binary="/bin/ts")
    argv = specs[1].argv
    ranks = " ".join(argv).split(" : ")
    assert argv[:4] == ["mpirun", "--allow-run-as-root", "-n", "1"] and len(ranks) == 2
    assert "--grpc-port=9011" in ranks[0] and "--model-control-mode" not in ranks[0]
    assert "--model-control-mode=explicit --load-model=tensorrt_llm" in ranks[1] and "--grpc-port" not in ranks[1]
    assert "--allow-grpc=false" in ranks[1]
    prefixes = [a for a in argv if a.startswith("--backend-config=python,shm-region-prefix-name=")]
    assert len(set(prefixes)) == 2
    assert specs[1].env == {"CUDA_VISIBLE_DEVICES": "2,3"}
    with pytest.raises(ValueError, match="2 servers"):
        tritonserver_commands(params, "/r", [(9001, 9000, 9002)])
    with pytest.raises(ValueError, match="external"):
        tritonserver_commands(p(triton={"endpoints": ["h:1"]}), "/r", [])


def test_pick_ports_uses_configured_grpc_ports():
    free = iter(range(20000, 20100))
    got = pick_ports(p(triton={"num_servers": 2, "grpc_ports": [9001, 9002]}), lambda host: next(free))
    assert [g.grpc for g in got] == [9001, 9002] and got[0].http == 20000


def test_fill_repos_writes_tensorrtllm_models(tmp_path):
    layout = fill_trtllm_repos(tmp_path, "/engines/e", p(), decoupled=True)
    assert layout["servers"] == [{"repo": "server_0", "models": ["tensorrt_llm_0", "tensorrt_llm_1"],
                                  "gpus": [0, 1, 2, 3], "mode": "orchestrator", "world_size": 2}]
    for i, ids in enumerate(["0,1", "2,3"]):
        d = tmp_path / "server_0" / f"tensorrt_llm_{i}"
        assert (d / "1").is_dir() and not any((d / "1").iterdir())
        cfg = text_format.Parse((d / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        assert cfg.backend == "tensorrtllm" and cfg.parameters["gpu_device_ids"].string_value == ids
