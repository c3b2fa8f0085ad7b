"""The openai backend: server command lines (golden files, flag names read from each project's own
argument parser), validation, and what re-keys what."""
from __future__ import annotations

import json
import os

import pytest
from conftest import REPO
from luigi.task_register import Register

from harness.backends import resolve
from harness.backends.openai.servers import llm_api_options, server_argv
from harness.cache.executed import normalise
from harness.config import ParamsError
from pipeline import STAGES

GOLDEN = REPO / "tests" / "golden" / "openai"
UPDATE = os.environ.get("PERFDAG_UPDATE_GOLDEN") == "1"

# The reference configuration: tp 8, max batch 256, 8192 tokens per step, 2048 context, KV 0.9.
GPU = ("build.backend=openai,build.device=cuda,build.dtype=bfloat16,build.tp_size=8,build.max_batch_size=256,"
       "build.max_num_tokens=8192,build.max_seq_len=2048,build.max_input_len=1024,quantize.format=fp8,"
       "runtime.num_gpus=8,runtime.kv_cache_free_gpu_mem_fraction=0.9,dataset.max_new_tokens=1024,"
       "model.tiny.max_position_embeddings=4096")


def params(server: str, extra: str = ""):
    base = GPU if server != "transformers" else "build.backend=openai"
    return resolve(REPO / "params" / "default.yaml", f"{base},openai.server={server}" + (f",{extra}" if extra else ""))


@pytest.mark.parametrize("server", ["trtllm-serve", "vllm", "sglang", "transformers"])
def test_server_argv_matches_golden(server):
    p = params(server)
    argv = normalise(server_argv(p, "/ckpt", 8000, config_path="/repo/server_0/extra_llm_api_options.yaml"))
    got = {"argv": argv[1:], "llm_api_options": llm_api_options(p) if server == "trtllm-serve" else None}
    f = GOLDEN / f"{server}.json"
    if UPDATE:
        f.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(f.read_text())


def test_reference_argvs_spelled_out():
    """The flags each project's own parser takes (checked against TensorRT-LLM serve.py, vLLM 0.33's
    and SGLang 0.5.23's parsers)."""
    assert server_argv(params("vllm"), "/ckpt", 8000)[1:] == [
        "serve", "/ckpt", "--host", "127.0.0.1", "--port", "8000", "--served-model-name", "tiny-llama",
        "--tensor-parallel-size", "8", "--pipeline-parallel-size", "1", "--max-num-seqs", "256",
        "--max-num-batched-tokens", "8192", "--max-model-len", "2048", "--gpu-memory-utilization", "0.9",
        "--dtype", "bfloat16", "--no-enable-prefix-caching"]
    t = server_argv(params("trtllm-serve"), "/ckpt", 8000, config_path="/x.yaml")[1:]
    assert t[:6] == ["/ckpt", "--host", "127.0.0.1", "--port", "8000", "--backend"] and "--extra_llm_api_options" in t
    s = server_argv(params("sglang"), "/ckpt", 8000)
    assert s[1:4] == ["-m", "sglang.launch_server", "--model-path"] and "--mem-fraction-static" in s


@pytest.mark.parametrize("change,needle", [
    ("openai.server=vllm", "build.device"),                              # a GPU server on CPU
    ("quantize.format=fp8", "quantize.format"),                          # activations in a plain checkpoint
    ("openai.prompt=token_ids", "openai.prompt"),                        # transformers serve refuses ids
    ("runtime.num_gpus=2", "runtime.num_gpus"),                          # ignored by transformers serve
    ("triton.grpc_ports=[9001]", "triton.grpc_ports"),                    # triton.* is not read
    ("openai.endpoints=[https://h:1]", "openai.endpoints"),
    ("openai.extra_args=[\"--a\\x01\"]", "openai.extra_args"),
])
def test_bad_openai_params_are_refused(change, needle):
    with pytest.raises(ParamsError, match=needle.replace(".", r"\.")):
        resolve(REPO / "params" / "default.yaml", f"build.backend=openai,{change}")


def _keys(overrides: str):
    Register.clear_instance_cache()
    return {n: c(params_file="params/examples/openai-cpu.yaml", overrides=overrides).key for n, c in STAGES.items()}


# Everything from the servers on (the measuring stages, whatever they are).
FROM_LAUNCH = set(STAGES) - {"PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "PrepareDataset"}


@pytest.mark.parametrize("change,expected", [
    ("openai.extra_args=[--log-level,info]", FROM_LAUNCH),
    ("openai.cb_num_blocks=256", FROM_LAUNCH),
    ("openai.output_tokens=retokenize", set()),  # what auto already chose for transformers serve
    ("build.max_batch_size=8", FROM_LAUNCH | {"BuildEngine", "FillTritonRepo"}),
])
def test_a_server_flag_relaunches_and_keeps_the_checkpoint(change, expected, artifacts):
    before, after = _keys(""), _keys(change)
    assert {s for s in before if before[s] != after[s]} == expected


def test_offline_and_server_share_one_server_configuration_and_launch(artifacts):
    """The openai backend's server key holds only what shapes the server: the scenario (Triton's
    decoupled mode) changes the measurement's key, not the servers' or their configuration's."""
    offline, server = _keys(""), _keys("loadgen.scenario=Server")
    assert offline["FillTritonRepo"] == server["FillTritonRepo"]
    assert offline["LaunchServers"] == server["LaunchServers"]
    assert offline["RunLoadgen"] != server["RunLoadgen"]
