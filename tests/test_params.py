"""Parameter resolution and validation: layering, and bad documents failing clearly, writing nothing."""
from __future__ import annotations

import pytest
import yaml
from conftest import REPO, run_luigi

from harness.backends import resolve
from harness.config import ParamsError
from pipeline import BuildEngine, PrepareModel

DEFAULT = REPO / "params" / "default.yaml"


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults_file_env_overrides_layer_in_order(tmp_path):
    write(tmp_path, "base.yaml", "build:\n  max_batch_size: 8\n  max_num_tokens: 1000\n")
    child = write(tmp_path, "child.yaml", "extends: base.yaml\nbuild:\n  max_batch_size: 16\n")
    env = {"TRTLLM_BUILD_FLAGS": "max_num_tokens:1500,max_batch_size:24"}
    p = resolve(child, "build.max_batch_size=40", env=env)
    assert p.build.max_batch_size == 40          # override beats env
    assert p.build.max_num_tokens == 1500        # env beats file
    assert p.build.max_seq_len == 256            # built-in default
    assert resolve(child, "", env={}).build.max_batch_size == 16  # child beats its base


def test_env_flag_aliases_and_typed_values():
    p = resolve(None, "", env={"TRTLLM_BUILD_FLAGS": "tensor_parallelism:1,max_seq_len:300",
                               "TRTLLM_CHECKPOINT_FLAGS": "calib_size:8"})
    assert (p.build.tp_size, p.build.max_seq_len, p.quantize.calib_size) == (1, 300, 8)


def test_override_values_may_hold_commas():
    p = resolve(None, "triton.num_servers=2,triton.grpc_ports=[9001,9002],build.max_batch_size=4")
    assert p.triton.grpc_ports == [9001, 9002] and p.build.max_batch_size == 4


def test_every_problem_is_reported_at_once():
    with pytest.raises(ParamsError) as e:
        resolve(None, "build.max_batch_size=-1,quantize.format=int3,loadgen.scenario=Batch")
    assert len(e.value.problems) == 3
    assert str(e.value).count("\n  - ") == 3


BAD = [
    # (id, yaml text or None, overrides, env, words the message must contain)
    ("unknown-key", "build:\n  max_batchsize: 8\n", "", {}, ["build.max_batchsize", "unknown key", "max_batch_size"]),
    ("unknown-section", "bulid:\n  max_batch_size: 8\n", "", {}, ["bulid", "unknown section"]),
    ("wrong-type", "build:\n  max_batch_size: lots\n", "", {}, ["build.max_batch_size", "integer", "lots"]),
    ("negative-size", "build:\n  max_num_tokens: -5\n", "", {}, ["build.max_num_tokens", "greater than"]),
    ("zero-servers", "triton:\n  num_servers: 0\n", "", {}, ["triton.num_servers"]),
    ("unknown-quant-format", "quantize:\n  format: int3\n", "", {}, ["quantize.format", "int8_sq", "int3"]),
    ("unknown-backend", "build:\n  backend: onnx\n", "", {}, ["build.backend", "torch", "onnx"]),
    ("missing-checkpoint-dir", "model:\n  checkpoint: /no/such/dir\n", "", {}, ["model.checkpoint", "does not exist"]),
    ("malformed-yaml", "build:\n  max_batch_size: [8\n", "", {}, ["malformed YAML", "line"]),
    ("top-level-list", "- build\n- quantize\n", "", {}, ["top level must be a mapping"]),
    ("extends-missing", "extends: nowhere.yaml\n", "", {}, ["nowhere.yaml", "not found"]),
    ("malformed-override", None, "build.max_batch_size", {}, ["--overrides", "section.key=value"]),
    ("override-unknown-section", None, "bild.max_batch_size=3", {}, ["--overrides", "bild", "sections are"]),
    ("malformed-env-flags", None, "", {"TRTLLM_BUILD_FLAGS": "max_batch_size=8"}, ["TRTLLM_BUILD_FLAGS", "key:value"]),
    ("unknown-env-build-flag", None, "", {"TRTLLM_BUILD_FLAGS": "gemm_plugin:auto"}, ["build.flags.gemm_plugin", "torch backend"]),
    ("input-longer-than-seq", None, "build.max_input_len=300,build.max_seq_len=256", {}, ["build.max_input_len", "max_seq_len"]),
    ("gpu-only-format-on-cpu", None, "quantize.format=nvfp4", {}, ["quantize.format", "needs a GPU", "int4_awq"]),
    ("torch-tensor-parallel", None, "build.tp_size=2", {}, ["build.tp_size", "torch backend"]),
    ("fp16-on-cpu", None, "build.dtype=float16", {}, ["build.dtype", "float32"]),
    ("ports-vs-servers", None, "triton.num_servers=2,triton.grpc_ports=[9001]", {}, ["triton.grpc_ports", "one per server"]),
    ("bad-endpoint", None, "triton.endpoints=[nohost]", {}, ["triton.endpoints", "host:port"]),
    ("jsonl-without-path", None, "dataset.format=jsonl", {}, ["dataset", "needs dataset.path"]),
    ("more-samples-than-builtin", None, "dataset.num_samples=24801", {}, ["dataset.num_samples", "at most 24800"]),
    ("bad-scenario", None, "loadgen.scenario=Batch", {}, ["loadgen.scenario", "Offline"]),
    ("accuracy-target-range", None, "accuracy.target=1.5", {}, ["accuracy.target", "less than or equal"]),
    ("tiny-heads", None, "model.tiny.num_heads=3", {}, ["model.tiny", "num_heads"]),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_params_give_clear_error_and_write_nothing(case, tmp_path, artifacts, monkeypatch):
    _, text, overrides, env, words = case
    params_file = write(tmp_path, "bad.yaml", text) if text is not None else DEFAULT
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ParamsError) as e:
        BuildEngine(params_file=str(params_file), overrides=overrides)
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert not artifacts.exists()


def test_extends_cycle(tmp_path, artifacts):
    write(tmp_path, "a.yaml", "extends: b.yaml\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ParamsError, match=r"extends: cycle a.yaml -> b.yaml -> a.yaml"):
        PrepareModel(params_file=str(tmp_path / "a.yaml"))
    assert not artifacts.exists()


def test_unknown_rerun_from_stage(artifacts):
    with pytest.raises(ParamsError, match="--rerun-from: unknown stage 'Quantise'"):
        BuildEngine(rerun_from="Quantise")


def test_luigi_cli_exits_nonzero_with_one_line_per_problem(tmp_path):
    root = tmp_path / "artifacts"
    proc = run_luigi("BuildEngine", "--overrides", "build.max_batch_size=-1,quantize.format=int3",
                     artifacts=root, check=False)
    assert proc.returncode != 0
    assert "invalid parameters (2 problems)" in proc.stderr
    assert "build.max_batch_size" in proc.stderr and "quantize.format" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not root.exists()


def test_status_cli_rejects_bad_params(tmp_path, capsys, artifacts):
    from pipeline.cli import main

    assert main(["status", "--overrides", "quantize.format=bogus"]) == 2
    assert "quantize.format" in capsys.readouterr().err
    assert not artifacts.exists()


def test_default_params_file_is_valid_yaml_with_all_sections():
    doc = yaml.safe_load(DEFAULT.read_text())
    assert set(doc) <= {"model", "quantize", "build", "runtime", "triton", "harness", "loadgen", "dataset", "accuracy"}
    resolve(DEFAULT, "", env={})


@pytest.mark.parametrize("name", ["llama3.1-8b", "llama3.1-405b", "mixtral-8x7b", "deepseek-r1", "gpt-oss-120b",
                                  "llama3.1-8b-edge", "qwen3-vl-235b-a22b", "whisper"])
def test_the_submission_params_ask_for_what_the_checker_requires(name, tmp_path):
    """params/submission/<family>.yaml: an open entry for its own benchmark in a round that has it, 600 s,
    the benchmark's dataset size (a stand-in repeated to it), all of it as performance samples."""
    from harness.data import make_standins
    from harness.mlperf import benchmarks

    over = "" if name == "llama3.1-8b" else f"dataset.path={make_standins.full_size(name, tmp_path / 'full.jsonl')}"
    p = resolve(REPO / "params" / "submission" / f"{name}.yaml", over)
    b = benchmarks.get(name)
    assert p.loadgen.mlperf_model == p.submission.maps_to == name and p.submission.division == "open"
    assert p.loadgen.round in b.targets and p.loadgen.min_duration_ms >= 600_000
    assert p.dataset.num_samples == b.dataset_size and p.loadgen.performance_sample_count == 0  # 0: all
    assert p.accuracy.num_samples == (b.accuracy_sample_count or 0)
