"""The invalidation matrix: a change re-keys exactly the stages downstream of what it touches."""
from __future__ import annotations

import pytest
from conftest import REPO
from luigi.task_register import Register

from pipeline import STAGES

DEFAULT = REPO / "params" / "default.yaml"
ALL = set(STAGES)
SERVE = {"FillTritonRepo", "LaunchServers", "RunSessions"}  # RunSessions: the servers and its own section only
# Everything that measures against the servers and the dataset (whatever stages measure).
MEASURE = set(STAGES) - {"PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "LaunchServers", "PrepareDataset",
                         "RunSessions"}
FROM_BUILD = {"BuildEngine"} | SERVE | MEASURE
FROM_QUANTIZE = {"Quantize"} | FROM_BUILD
NONE: set[str] = set()


def keys(params_file=DEFAULT, overrides=""):
    Register.clear_instance_cache()  # luigi reuses instances with equal params; env may differ
    return {name: cls(params_file=str(params_file), overrides=overrides).key for name, cls in STAGES.items()}


# (section, how, change, expected re-keyed stages). `how` is file | env | override.
MATRIX = [
    ("model", "override", "model.tiny.seed=1", ALL),
    ("model", "file", "model:\n  tiny:\n    train_steps: 100\n", ALL),
    ("model", "override", "model.name=my-label", {"FullRun"}),  # a label: only the report shows it
    ("quantize", "override", "quantize.format=fp8", FROM_QUANTIZE),
    ("quantize", "file", "quantize:\n  calib_size: 16\n", FROM_QUANTIZE),
    ("quantize", "env", ("TRTLLM_CHECKPOINT_FLAGS", "calib_size:8"), FROM_QUANTIZE),
    ("build", "override", "build.max_batch_size=8", FROM_BUILD),
    ("build", "file", "build:\n  dtype: bfloat16\n", FROM_BUILD),
    ("build", "env", ("TRTLLM_BUILD_FLAGS", "max_num_tokens:1024"), FROM_BUILD),
    ("build", "override", "build.max_input_len=100", FROM_BUILD | {"PrepareDataset"}),  # prompts are cut to it
    ("build", "override", "build.device=cuda", FROM_QUANTIZE),  # calibration runs on the device
    ("runtime", "override", "runtime.max_queue_delay_microseconds=100", SERVE | MEASURE),
    ("runtime", "env", ("TRTLLM_RUNTIME_FLAGS", "batch_scheduler_policy:guaranteed_no_evict"), SERVE | MEASURE),
    ("triton", "override", "triton.num_servers=2", SERVE | MEASURE),
    ("triton", "override", "triton.bind=0.0.0.0", {"LaunchServers", "RunSessions"} | MEASURE),
    ("triton", "override", "triton.protocol=generate", {"LaunchServers", "RunSessions"} | MEASURE),  # HTTP port, another core
    ("openai", "override", "build.backend=openai", FROM_BUILD),  # the quantized checkpoint is shared
    ("harness", "override", "harness.clients_per_frontend=8", MEASURE),
    ("loadgen", "override", "loadgen.min_duration_ms=5000", {"RunLoadgen", "RunTest01", "RunTest06", "RunTest07",
                                                                 "RunTest09", "FullRun"}),
    ("loadgen", "file", "loadgen:\n  scenario: Server\n", SERVE | MEASURE),  # the repo turns decoupled
    ("dataset", "override", "dataset.max_new_tokens=16", {"PrepareDataset"} | MEASURE),
    # the default is judged against its own references: TEST07's own threshold is target x theirs
    ("accuracy", "override", "accuracy.target=0.999", {"CheckAccuracy", "RunTest07", "FullRun"}),
    ("submission", "override", "submission.submitter=Someone", NONE),  # names in the results tree only
    ("slurm", "override", "slurm.gpus=1,slurm.partition=gpu", NONE),  # where a stage runs, not what it makes
    ("sessions", "override", "sessions.users=4", {"RunSessions"}),
    ("sessions", "file", "sessions:\n  salt: false\n", {"RunSessions"}),
    ("search", "override", "search.tolerance=0.05", NONE),  # read by FindMaxLoad alone, no stage
    ("layout", "file", "layout:\n  roles:\n    server: {count: 2, gpus_per_instance: 0}\n", SERVE | MEASURE),  # two servers
]


@pytest.mark.parametrize("section,how,change,expected", MATRIX,
                         ids=[f"{m[0]}-{m[1]}-{i}" for i, m in enumerate(MATRIX)])
def test_invalidation_matrix(section, how, change, expected, tmp_path, monkeypatch, artifacts):
    before = keys()
    if how == "override":
        after = keys(overrides=change)
    elif how == "env":
        monkeypatch.setenv(*change)
        after = keys()
    else:
        f = tmp_path / "changed.yaml"
        f.write_text(f"extends: {DEFAULT}\n{change}")
        after = keys(params_file=f)
    changed = {s for s in STAGES if before[s] != after[s]}
    assert changed == expected
    assert not artifacts.exists()  # computing keys builds nothing


# Sections no stage reads: `python -m pipeline whisper-triton` renders trtllm_whisper, and every stage
# refuses parameters that hold it (the test below), so it can key nothing.
RENDERED_ONLY = {"trtllm_whisper"}


def test_every_section_is_covered_by_the_matrix():
    from harness.config import SECTIONS
    assert {m[0] for m in MATRIX} | RENDERED_ONLY == set(SECTIONS)


def test_a_rendered_only_section_is_refused_before_any_key(tmp_path):
    from harness.config import ParamsError
    with pytest.raises(ParamsError, match="trtllm_whisper"):
        keys(overrides="trtllm_whisper.zero_pad=true")


def test_cosmetic_changes_change_nothing(tmp_path):
    """Key order, comments, spelling a default out, and an equivalent layering keep every key."""
    cosmetic = tmp_path / "cosmetic.yaml"
    cosmetic.write_text(
        "# same document, written differently\n"
        "build:   # engine\n  max_input_len: 128\n  max_seq_len: 256\n  backend: torch\n"
        "quantize: {calib_size: 32, format: int8}\n"
        "loadgen: {min_query_count: 512, server_target_qps: 20.0}\n"
        "model:\n  tiny: {train_steps: 300, seed: 0, num_layers: 2, hidden_size: 128, vocab_size: 512}\n"
        "  checkpoint: builtin\n")
    assert keys(cosmetic) == keys()
    assert keys(overrides="build.max_batch_size=32") == keys()


def test_tool_version_change_rekeys_its_stage_and_downstream(monkeypatch):
    import harness.cache.versions as versions

    before = keys()
    real = versions.package_version
    monkeypatch.setattr(versions, "package_version",
                        lambda d: "99.0" if d == "nvidia-modelopt" else real(d))
    after = keys()
    assert {s for s in STAGES if before[s] != after[s]} == FROM_QUANTIZE


def test_real_checkpoint_enters_by_content_not_path(tmp_path, built_fast, artifacts):
    """Copying a checkpoint elsewhere keeps its key; changing one byte of it changes the key."""
    import shutil

    model_dir = next((built_fast / "PrepareModel").glob("*/model"))
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(model_dir, a)
    shutil.copytree(model_dir, b)
    ka = keys(overrides=f"model.checkpoint={a}")
    kb = keys(overrides=f"model.checkpoint={b}")
    assert ka == kb
    with open(b / "config.json", "a") as f:
        f.write("\n")
    kb2 = keys(overrides=f"model.checkpoint={b}")
    assert kb2["PrepareModel"] != ka["PrepareModel"]


# --- the trtllm sections: what a GPU flag change re-keys (keys only: nothing runs on CPU) ---------
H100 = REPO / "params" / "examples" / "llama2-70b-h100x8-offline.yaml"


TRTLLM_MATRIX = [
    ("runtime flag keeps the engine", ("TRTLLM_RUNTIME_FLAGS", "kv_cache_free_gpu_mem_fraction:0.8"), SERVE | MEASURE),
    ("runtime field keeps the engine", "runtime.enable_kv_cache_reuse=true", SERVE | MEASURE),
    ("build flag keeps the checkpoint", ("TRTLLM_BUILD_FLAGS", "max_num_tokens:4096"), FROM_BUILD),
    ("build plugin flag keeps the checkpoint", "build.flags.gemm_plugin=auto", FROM_BUILD),
    ("checkpoint flag re-quantizes", ("TRTLLM_CHECKPOINT_FLAGS", "calib_size:256"), FROM_QUANTIZE),
    ("tensor parallelism reshards the checkpoint", "build.tp_size=4,runtime.num_gpus=8", FROM_QUANTIZE),
]


@pytest.mark.parametrize("what,change,expected", TRTLLM_MATRIX, ids=[m[0] for m in TRTLLM_MATRIX])
def test_trtllm_invalidation_matrix(what, change, expected, gpu_overrides, monkeypatch, artifacts):
    before = keys(H100, gpu_overrides)
    if isinstance(change, tuple):
        monkeypatch.setenv(*change)
        after = keys(H100, gpu_overrides)
    else:
        after = keys(H100, f"{gpu_overrides},{change}")
    assert {s for s in STAGES if before[s] != after[s]} == expected


@pytest.mark.parametrize("tool,value,expected", [
    ("tensorrt_llm", "0.99.0", FROM_QUANTIZE),       # engine (and its checkpoint format) never cross versions
    ("gpu_compute_capability", "10.0", FROM_BUILD),  # an SM 9.0 (H100/H200) engine is not reused on SM 10.0 (B200)
])
def test_trtllm_tool_changes(tool, value, expected, gpu_overrides, monkeypatch):
    import harness.backends.trtllm as trtllm_backend
    import harness.backends.trtllm.build as trt_build

    before = keys(H100, gpu_overrides)
    trtllm_backend.engine_key_tools_cached.cache_clear()
    if tool == "tensorrt_llm":
        monkeypatch.setattr(trt_build, "trtllm_version", lambda: value)
    else:
        monkeypatch.setattr(trt_build, "gpu_compute_capability", lambda run=None: value)
    after = keys(H100, gpu_overrides)
    trtllm_backend.engine_key_tools_cached.cache_clear()
    assert {s for s in STAGES if before[s] != after[s]} == expected
