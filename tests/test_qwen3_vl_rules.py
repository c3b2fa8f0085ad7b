"""qwen3-vl-235b-a22b's rules, refused before any stage: no prefix caching (named for every server), no
image resizing through server options; its chat endpoint chosen by default."""
from __future__ import annotations

import pytest
from conftest import REPO
from luigi.task_register import Register

from harness.backends import resolve
from harness.config import ParamsError
from harness.config.openai import endpoint, protocol
from pipeline import STAGES, FullRun

QWEN = "build.backend=openai,loadgen.mlperf_model=qwen3-vl-235b-a22b"
GPU = "build.device=cuda,build.dtype=bfloat16,runtime.num_gpus=1"


def _params_file(tmp_path, body: str):
    f = tmp_path / "qwen.yaml"
    f.write_text(f"extends: {REPO / 'params' / 'default.yaml'}\n" + body)
    return f


def test_a_params_file_enabling_prefix_caching_is_refused_before_any_stage(tmp_path, artifacts):
    """runtime.enable_kv_cache_reuse: true for qwen3-vl stops the run at validation, naming the field and
    each server's switch; nothing is written."""
    f = _params_file(tmp_path, "build: {backend: openai}\nloadgen: {mlperf_model: qwen3-vl-235b-a22b}\n"
                               "runtime: {enable_kv_cache_reuse: true}\n")
    with pytest.raises(ParamsError) as e:
        FullRun(params_file=str(f))
    msg = str(e.value)
    assert "runtime.enable_kv_cache_reuse: qwen3-vl-235b-a22b's rules forbid prefix caching" in msg
    for flag in ("--no-enable-prefix-caching", "--disable-radix-cache", "enable_block_reuse: false"):
        assert flag in msg
    assert not artifacts.exists()


@pytest.mark.parametrize("server, change, field", [
    ("vllm", "openai.extra_args=[--enable-prefix-caching]", "openai.extra_args: --enable-prefix-caching"),
    ("vllm", "openai.extra_args=[--mm-processor-kwargs]", "openai.extra_args: --mm-processor-kwargs"),
    ("trtllm-serve", "openai.llm_api_options={kv_cache_config: {enable_block_reuse: true}}",
     "openai.llm_api_options.kv_cache_config.enable_block_reuse"),
])
def test_server_options_that_turn_it_back_on_are_refused(server, change, field):
    """Behind enable_kv_cache_reuse=false, a server option that re-enables prefix caching (or resizes
    images) is refused too, naming the option."""
    with pytest.raises(ParamsError, match=field.replace("[", r"\[").replace("{", r"\{")):
        resolve(REPO / "params" / "default.yaml", f"{QWEN},{GPU},openai.server={server},{change}")


def test_the_same_options_pass_for_another_benchmark():
    """The rule is qwen3-vl's: llama2-70b may cache prefixes."""
    p = resolve(REPO / "params" / "default.yaml", f"build.backend=openai,{GPU},openai.server=vllm,"
                                                   "runtime.enable_kv_cache_reuse=true")
    assert p.runtime.enable_kv_cache_reuse and endpoint(p) == "completions" and protocol(p) == "openai-http"


def test_qwen3_vl_measures_through_chat_unless_told():
    """The benchmark's reference sends chat completions: auto picks chat; openai.api overrides."""
    p = resolve(REPO / "params" / "default.yaml", QWEN)
    assert endpoint(p) == "chat" and protocol(p) == "openai-chat"
    p = resolve(REPO / "params" / "default.yaml", f"{QWEN},openai.api=completions")
    assert protocol(p) == "openai-http"


def test_the_measuring_stages_key_the_chat_core_only_when_they_use_it():
    """RunLoadgen's key names the chat core's code and request settings for a chat run, and a completions
    run's key names nothing of chat (changing openai.api re-measures; chat code never re-keys completions)."""
    def parts(overrides):
        Register.clear_instance_cache()
        return STAGES["RunLoadgen"](params_file=str(REPO / "params" / "default.yaml"), overrides=overrides).key_parts()

    chat, plain = parts(QWEN), parts(f"{QWEN},openai.api=completions")
    assert "harness.loadgen.cores.openai_chat" in chat.code and "harness.loadgen.openai_chat_api" in chat.code
    assert not any("chat" in m for m in plain.code)


@pytest.mark.parametrize("change, field", [
    ("build.backend=torch", "model.checkpoint: builtin-vl (the tiny LLaVA) is served by transformers serve"),
    ("build.backend=openai,openai.server=vllm,build.device=cuda", "model.checkpoint: builtin-vl"),
    ("build.backend=openai,quantize.format=int8", "quantize.format: int8; a vision-language checkpoint is served"),
])
def test_the_builtin_llava_is_served_as_it_is_by_transformers_serve(change, field):
    """model.checkpoint: builtin-vl has no torch engine and no quantized form: anything else is refused
    before any stage, naming the field."""
    with pytest.raises(ParamsError, match=field.replace("(", r"\(").replace(")", r"\)")):
        resolve(REPO / "params" / "standins" / "qwen3-vl-235b-a22b.yaml", change)


@pytest.mark.parametrize("change, field", [
    ("quantize.format=int8", "quantize.format: int8; a vision-language checkpoint is served as it is"),
    (f"quantize.format=int8,openai.server=vllm,{GPU}", "quantize.format: int8; a vision-language checkpoint"),
    ("build.backend=torch,quantize.format=none", "is a vision-language model, which this backend's text-only engine"),
])
def test_an_outside_vision_language_checkpoint_is_served_as_it_is_by_an_openai_server(tmp_path, change, field):
    """A user's LLaVA directory (config.json with a vision_config) is served as it is too: never quantized
    (Quantize's modelopt path loads text models only, whichever server follows), never by a text-only
    engine. Refused before any stage, naming the field."""
    ckpt = tmp_path / "llava"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"architectures": ["LlavaForConditionalGeneration"], "vision_config": {}}')
    with pytest.raises(ParamsError, match=field.replace("(", r"\(")):
        resolve(REPO / "params" / "standins" / "qwen3-vl-235b-a22b.yaml", f"model.checkpoint={ckpt},{change}")


def test_interactive_is_judged_on_its_8k_subset_by_its_own_gate():
    """constants.py v6.1: Interactive's accuracy target is F1 0.7878 x 0.99 over 8,000 samples (the
    Shopify-product-catalogue-8k subset), Offline's and Server's 0.7903 x 0.99 over 48,289; latency
    limits 1.5 s and 12 s end to end."""
    from harness.mlperf import benchmarks

    b = benchmarks.get("qwen3-vl-235b-a22b")
    assert b.gates("99", "Interactive")["f1"]["min"] == pytest.approx(0.7878 * 0.99)
    assert b.gates("99", "Offline")["f1"]["min"] == b.gates("99", "Server")["f1"]["min"] == pytest.approx(0.7903 * 0.99)
    assert (b.dataset_size_for("Interactive"), b.accuracy_samples_for("Interactive")) == (8000, 8000)
    assert (b.dataset_size_for("Offline"), b.accuracy_samples_for("Server")) == (48289, 48289)
    assert b.target_latency_ms == {"Server": 12000.0, "Interactive": 1500.0}
    assert "Shopify-product-catalogue-8k" in b.scenario_datasets["Interactive"][0]
    # an F1 between the two gates passes Interactive and fails Offline
    from harness.mlperf.accuracy import check_gates

    assert check_gates({"f1": 0.781}, b.gates("99", "Interactive"))["passed"]
    assert not check_gates({"f1": 0.781}, b.gates("99", "Offline"))["passed"]
