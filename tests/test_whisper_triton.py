"""whisper's Triton form (TensorRT-LLM's Whisper example), rendered and checked on CPU: convert_checkpoint.py's and
both trtllm-build command lines parsed by those programs' own options (tests/golden/trtllm/whisper_upstream.json,
read from TensorRT-LLM's sources), both config.pbtxt files parsed as Triton's ModelConfig and held to the upstream
tensors and parameter keys, golden files, whisper_bls's request arrays against its config, and the refusals before
any stage. Nothing here starts a server or needs a GPU.

Regenerate the golden file after an intended change with PERFDAG_UPDATE_GOLDEN=1.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest
import yaml
from conftest import REPO
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from harness.backends import resolve
from harness.backends.trtllm import whisper
from harness.config import ParamsError
from harness.config import resolve as resolve_document

EXAMPLE = REPO / whisper.EXAMPLE
GOLDEN = REPO / "tests" / "golden" / "trtllm"
UPSTREAM = json.loads((GOLDEN / "whisper_upstream.json").read_text())
UPDATE = os.environ.get("PERFDAG_UPDATE_GOLDEN") == "1"
MANIFEST = REPO / "harness" / "data" / "standins" / "whisper" / "manifest.json"  # a real manifest for dataset.path


@pytest.fixture
def models(tmp_path):
    """Stand-ins for OpenAI's checkpoint file, whisper's assets and NVIDIA's whisper_bls/1 (validation checks they
    exist; nothing reads them here)."""
    root = tmp_path / "models"
    (root / "assets").mkdir(parents=True)
    (root / "bls").mkdir()
    for name in ("large-v3.pt", "medium.pt", "weights.pt"):
        (root / name).write_bytes(b"")
    for name in whisper.ASSETS:
        (root / "assets" / name).write_bytes(b"asset " + name.encode())
    for name in whisper.BLS_SOURCES:
        (root / "bls" / name).write_text(f"# stands for NVIDIA's {name}\n")
    return root


def overrides(models, extra: str = "") -> str:
    base = (f"trtllm_whisper.checkpoint={models / 'large-v3.pt'},trtllm_whisper.assets_dir={models / 'assets'},"
            f"trtllm_whisper.bls_model_dir={models / 'bls'},dataset.path={MANIFEST},dataset.num_samples=24")
    return base + (f",{extra}" if extra else "")


def form(models, extra: str = ""):
    """The example's params as `pipeline whisper-triton` reads them (its own checks, not FullRun's refusal)."""
    return resolve_document(EXAMPLE, overrides(models, extra), env={}, checks=(whisper.problems,))


def parser_of(program: str) -> argparse.ArgumentParser:
    """`program`'s options as its own argparse parser defines them (whisper_upstream.json), rebuilt with argparse."""
    ap = argparse.ArgumentParser(prog=program, exit_on_error=False)
    for name, spec in UPSTREAM[program]["options"].items():
        if spec.get("action") == "store_true":
            ap.add_argument(name, action="store_true")
        else:
            ap.add_argument(name, type=int if spec["type"] == "int" else str, choices=spec.get("choices"),
                            nargs=spec.get("nargs"))
    return ap


def parse(program: str, argv: list[str]) -> argparse.Namespace:
    ap = parser_of(program)
    args, unknown = ap.parse_known_args(argv)
    assert unknown == [], f"{program} has no option(s) {unknown}"
    return args


def snapshot(p, models) -> dict:
    done = whisper.render(p, checkpoint_dir="/ckpt", engine_dir="/engines")
    done["configs"] = {name: json_format.MessageToDict(text_format.Parse(text, model_config_pb2.ModelConfig()),
                                                       preserving_proto_field_name=True)
                       for name, text in done["configs"].items()}
    return json.loads(json.dumps(done).replace(str(models), "<models>"))


def test_renders_the_golden_commands_and_configs(models):
    got = snapshot(form(models), models)
    golden = GOLDEN / "whisper-trtllm-h200.json"
    if UPDATE:
        golden.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(golden.read_text())
    # The example's commands, spelled out (NVIDIA's README builds the same two engines).
    assert got["convert_checkpoint"] == ["python3", "convert_checkpoint.py", "--model_dir", "<models>", "--model_name",
                                         "large-v3", "--dtype", "float16", "--output_dir", "/ckpt"]
    assert got["trtllm_build"]["encoder"] == [
        "trtllm-build", "--checkpoint_dir", "/ckpt/encoder", "--output_dir", "/engines/encoder", "--max_batch_size", "64",
        "--max_input_len", "3000", "--max_seq_len", "3000", "--moe_plugin", "disable", "--gemm_plugin", "disable",
        "--bert_attention_plugin", "float16"]
    assert got["trtllm_build"]["decoder"] == [
        "trtllm-build", "--checkpoint_dir", "/ckpt/decoder", "--output_dir", "/engines/decoder", "--max_beam_width", "1",
        "--max_batch_size", "64", "--max_seq_len", "114", "--max_input_len", "14", "--max_encoder_input_len", "3000",
        "--moe_plugin", "disable", "--gemm_plugin", "float16", "--bert_attention_plugin", "float16",
        "--gpt_attention_plugin", "float16"]


@pytest.mark.parametrize("extra", ["", "trtllm_whisper.weight_only_precision=int8", "trtllm_whisper.weight_only_precision=int4",
                                   "build.max_batch_size=8,trtllm_whisper.decoder_max_seq_len=250"])
def test_every_flag_parses_with_the_upstream_options(models, extra):
    p = form(models, extra)
    done = whisper.render(p, checkpoint_dir="/ckpt", engine_dir="/engines")
    conv = parse("convert_checkpoint.py", done["convert_checkpoint"][2:])
    assert (conv.model_dir, conv.model_name, conv.dtype, conv.output_dir) == (str(models), "large-v3", "float16", "/ckpt")
    precision = p.trtllm_whisper.weight_only_precision
    assert conv.use_weight_only == (precision != "none")
    if precision != "none":
        assert conv.weight_only_precision == precision
    enc = parse("trtllm-build", done["trtllm_build"]["encoder"][1:])
    dec = parse("trtllm-build", done["trtllm_build"]["decoder"][1:])
    assert (enc.checkpoint_dir, enc.output_dir) == ("/ckpt/encoder", "/engines/encoder")
    assert (dec.checkpoint_dir, dec.output_dir) == ("/ckpt/decoder", "/engines/decoder")
    assert enc.max_input_len == enc.max_seq_len == dec.max_encoder_input_len == whisper.ENCODER_FRAMES
    assert enc.max_batch_size == dec.max_batch_size == p.build.max_batch_size
    assert (dec.max_seq_len, dec.max_input_len) == (p.trtllm_whisper.decoder_max_seq_len, 14)
    assert (enc.gemm_plugin, enc.bert_attention_plugin, dec.gemm_plugin, dec.gpt_attention_plugin) == \
        ("disable", "float16", "float16", "float16")


def test_the_rebuilt_parsers_refuse_what_upstream_refuses():
    """The check can fail: an option the program lacks, a value outside its choices."""
    with pytest.raises(AssertionError, match="no option"):
        parse("trtllm-build", ["--checkpoint_dir", "/c", "--max_encoder_len", "3000"])
    with pytest.raises(argparse.ArgumentError):
        parse("convert_checkpoint.py", ["--model_name", "large-v4"])
    with pytest.raises(argparse.ArgumentError):
        parse("trtllm-build", ["--gemm_plugin", "fp16"])


def _tensors(cfg, outputs=False):
    return {t.name: (model_config_pb2.DataType.Name(t.data_type), list(t.dims)) +
            (() if outputs else (t.optional,)) for t in (cfg.output if outputs else cfg.input)}


def test_configs_hold_the_upstream_contract(models):
    configs = whisper.model_configs(form(models), "/engines")
    bls = text_format.Parse(configs["whisper_bls"], model_config_pb2.ModelConfig())
    llm = text_format.Parse(configs["tensorrt_llm"], model_config_pb2.ModelConfig())
    up_bls, up_llm = UPSTREAM["whisper_bls"], UPSTREAM["tensorrt_llm"]
    assert (bls.name, bls.backend, llm.name, llm.backend) == ("whisper_bls", up_bls["backend"], "tensorrt_llm",
                                                              up_llm["backend"])
    assert _tensors(bls) == {k: (v[0], v[1], v[2]) for k, v in up_bls["inputs"].items()}
    assert _tensors(bls, outputs=True) == {k: tuple(v) for k, v in up_bls["outputs"].items()}
    assert set(bls.parameters) == set(up_bls["parameters"])
    params = {k: v.string_value for k, v in bls.parameters.items()}
    assert params == {"n_mels": "128", "engine_dir": "/engines/encoder", "zero_pad": "false"}
    assert [(g.count, g.kind) for g in bls.instance_group] == [(8, model_config_pb2.ModelInstanceGroup.KIND_CPU)]
    assert bls.max_batch_size == llm.max_batch_size == 64
    assert not bls.model_transaction_policy.decoupled and not llm.model_transaction_policy.decoupled
    # Every tensor whisper_bls sends is declared as the template declares it; the outputs it asks for exist.
    llm_in = _tensors(llm)
    assert set(up_bls["sends_to_tensorrt_llm"]) <= set(llm_in)
    for name, (dtype, dims) in up_llm["inputs"].items():
        assert llm_in[name][:2] == (dtype, dims), name
    assert {k: (v[0], v[1]) for k, v in _tensors(llm, outputs=True).items()} == \
        {k: tuple(v) for k, v in up_llm["outputs"].items()}
    assert set(up_bls["requests_outputs"]) <= set(_tensors(llm, outputs=True))
    # Only parameters the tensorrtllm backend reads (and not the Python backend's FORCE_CPU_ONLY_INPUT_TENSORS).
    assert set(llm.parameters) <= set(up_llm["parameters"]) - {"FORCE_CPU_ONLY_INPUT_TENSORS"}
    lp = {k: v.string_value for k, v in llm.parameters.items()}
    assert (lp["gpt_model_path"], lp["encoder_model_path"]) == ("/engines/decoder", "/engines/encoder")
    assert (lp["cross_kv_cache_fraction"], lp["kv_cache_free_gpu_mem_fraction"]) == ("0.5", "0.5")
    assert lp["gpt_model_type"] == "inflight_fused_batching"


def test_mel_bins_follow_the_checkpoint(models):
    assert whisper.n_mels(form(models)) == 128
    p = form(models, f"trtllm_whisper.checkpoint={models / 'medium.pt'}")
    assert whisper.n_mels(p) == 80 and whisper.n_mels(p) in UPSTREAM["whisper_bls"]["n_mels"]
    assert '"n_mels"' in whisper.bls_model_config(p, "/e") and 'string_value: "80"' in whisper.bls_model_config(p, "/e")


def test_bls_request_matches_its_config(models):
    """One clip as tritonclient would send it to whisper_bls: every input the config declares (WAV_LENS too: model.py
    reads it though the config calls it optional), with the config's types."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    cfg = text_format.Parse(whisper.model_configs(form(models), "/e")["whisper_bls"], model_config_pb2.ModelConfig())
    arrays = whisper.bls_request_arrays(np.linspace(-1, 1, 16000), "<|startoftranscript|><|en|>")
    declared = {t.name: model_config_pb2.DataType.Name(t.data_type).removeprefix("TYPE_") for t in cfg.input}
    assert set(arrays) == set(declared)
    for name, arr in arrays.items():
        triton_type = np_to_triton_dtype(arr.dtype)
        assert triton_type == {"STRING": "BYTES"}.get(declared[name], declared[name]), name
        assert arr.shape[0] == 1  # the batch dimension of a max_batch_size > 0 model
        grpcclient.InferInput(name, list(arr.shape), triton_type).set_data_from_numpy(arr)
    assert arrays["WAV_LENS"].item() == 16000 and arrays["WAV"].dtype == np.float32


@pytest.mark.parametrize("change,needle", [
    ("trtllm_whisper.checkpoint=null", "trtllm_whisper.checkpoint: not set"),
    ("trtllm_whisper.assets_dir=null", "trtllm_whisper.assets_dir: not set"),
    ("trtllm_whisper.bls_model_dir=null", "trtllm_whisper.bls_model_dir: not set"),
    ("trtllm_whisper.checkpoint=<models>/nope.pt", "is not a file"),
    ("trtllm_whisper.checkpoint=<models>/weights.pt", "is not <model_name>.pt"),
    ("trtllm_whisper.assets_dir=<models>/bls", "lacks multilingual.tiktoken, mel_filters.npz"),
    ("build.dtype=bfloat16", "build.dtype: bfloat16"),
    ("quantize.format=int8", "quantize.format: int8"),
    ("build.device=cpu", "build.device: cpu"),
    ("runtime.num_gpus=2", "runtime.num_gpus"),
    ("trtllm_whisper.decoder_max_seq_len=40", "trtllm_whisper.decoder_max_seq_len: 40"),
    ("trtllm_whisper.max_beam_width=4", "trtllm_whisper.max_beam_width: 4"),
    ("harness.stream=true", "harness.stream: true"),
])
def test_bad_or_missing_fields_are_named(models, change, needle):
    with pytest.raises(ParamsError) as e:
        form(models, change.replace("<models>", str(models)))
    assert needle in str(e.value)
    # FullRun's resolve names the same field, beside the form's refusal.
    with pytest.raises(ParamsError) as e:
        resolve(EXAMPLE, overrides(models, change.replace("<models>", str(models))), env={})
    assert needle in str(e.value)


def test_fullrun_refuses_the_form_and_its_section_elsewhere(models):
    with pytest.raises(ParamsError) as e:
        resolve(EXAMPLE, overrides(models), env={})
    assert len(e.value.problems) == 1 and "rendered and checked, not run" in e.value.problems[0]  # the only problem
    with pytest.raises(ParamsError, match="trtllm_whisper: build.backend=openai does not read it"):
        resolve(REPO / "params" / "standins" / "whisper.yaml", f"trtllm_whisper.checkpoint={models / 'large-v3.pt'}",
                env={})


def _pipeline(*args, env_root):
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(env_root)}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_missing_section_is_refused_before_any_stage(models, tmp_path):
    """A whisper params file that asks for the Triton form without its section: one line naming it, exit 2, nothing
    written (pipeline status, FullRun's own validation)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    del doc["trtllm_whisper"]
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({**doc, "dataset": {**doc["dataset"], "path": str(MANIFEST), "num_samples": 24}}))
    root = tmp_path / "artifacts"
    out = _pipeline("status", "--params-file", str(bare), env_root=root)
    assert out.returncode != 0
    assert "trtllm_whisper: not set" in out.stderr and "trtllm_whisper.checkpoint" in out.stderr
    assert not root.exists() or not any(root.iterdir())
    out = _pipeline("whisper-triton", "--params-file", str(bare), "--out", str(tmp_path / "out"), env_root=root)
    assert out.returncode == 2 and "trtllm_whisper: not set" in out.stderr
    assert not (tmp_path / "out").exists()


def test_whisper_triton_command_writes_a_whole_repository(models, tmp_path):
    out_dir = tmp_path / "render"
    out = _pipeline("whisper-triton", "--params-file", str(EXAMPLE), "--overrides", overrides(models),
                    "--out", str(out_dir), env_root=tmp_path / "artifacts")
    assert out.returncode == 0, out.stderr
    assert "not run" in out.stdout
    repo = out_dir / "model_repo"
    assert sorted(x.name for x in repo.iterdir()) == ["tensorrt_llm", "whisper_bls"]
    assert sorted(x.name for x in (repo / "whisper_bls" / "1").iterdir()) == sorted(whisper.ASSETS + whisper.BLS_SOURCES)
    assert (repo / "whisper_bls" / "1" / "mel_filters.npz").read_bytes() == b"asset mel_filters.npz"
    for name in ("whisper_bls", "tensorrt_llm"):
        cfg = text_format.Parse((repo / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        assert cfg.name == name
    lp = text_format.Parse((repo / "tensorrt_llm" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()).parameters
    assert lp["encoder_model_path"].string_value == str(out_dir / "engines" / "encoder")
    lines = (out_dir / "commands.sh").read_text().splitlines()
    assert lines[-3].startswith("python3 convert_checkpoint.py") and lines[-1].startswith("trtllm-build")
    assert [x.name for x in tmp_path.iterdir() if x.name.startswith(".render")] == []  # no temporary left
    again = _pipeline("whisper-triton", "--params-file", str(EXAMPLE), "--overrides", overrides(models),
                      "--out", str(out_dir), env_root=tmp_path / "artifacts")
    assert again.returncode == 2 and "exists; give a new directory" in again.stderr
