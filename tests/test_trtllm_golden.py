"""The GPU examples, end to end on CPU: exact trtllm-build and tritonserver/mpirun command lines,
and every rendered config.pbtxt parsed with protobuf and compared field by field with golden files.

Regenerate the goldens after an intended change with PERFDAG_UPDATE_GOLDEN=1.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from harness.backends.trtllm.build import build_problems, trtllm_build_args
from harness.backends.trtllm.launch import tritonserver_commands
from harness.backends.trtllm.layout import server_layout
from harness.backends.trtllm.repo import render_server_repos
from harness.config.resolve import deep_merge, load_params_file
from harness.config.rules import cross_field_problems
from harness.config.schema import Params
from harness.serving.triton.pbtxt import validate_model_config

EXAMPLES = REPO / "params" / "examples"
GOLDEN = Path(__file__).resolve().parent / "golden" / "trtllm"
UPDATE = os.environ.get("PERFDAG_UPDATE_GOLDEN") == "1"
RUNNABLE = ["llama2-70b-h100x8-offline", "llama2-70b-h100x8-server", "llama2-70b-h200x8-offline",
            "llama2-70b-h200x8-server", "mixtral-8x7b-h100x8-offline", "llama3.1-405b-h200x8-offline"]
CKPT, ENGINE, REPO_DIR = "/ckpt", "/engine", "/repo"


@pytest.fixture(scope="module")
def placeholders(tmp_path_factory):
    """Stand-ins for the examples' checkpoint directory and dataset file (validation checks they exist)."""
    root = tmp_path_factory.mktemp("placeholders")
    # The architecture matters to validation (reduce_fusion, int8 MoE export), so each example gets its own.
    for arch in ("LlamaForCausalLM", "MixtralForCausalLM"):
        (root / arch).mkdir()
        (root / arch / "config.json").write_text(json.dumps({"architectures": [arch]}))
    (root / "data.pkl").write_bytes(b"")
    return root


def ckpt(name: str, root: Path) -> Path:
    return root / ("MixtralForCausalLM" if name.startswith("mixtral") else "LlamaForCausalLM")


def example(name: str, root: Path, **sections) -> Params:
    problems: list[str] = []
    doc = load_params_file(EXAMPLES / f"{name}.yaml", problems)
    assert not problems, problems
    doc = deep_merge(doc, {"model": {"checkpoint": str(ckpt(name, root))}, "dataset": {"path": str(root / "data.pkl")}})
    return Params.model_validate(deep_merge(doc, sections))


def ports(n: int) -> list[tuple[int, int, int]]:
    return [(8001 + 10 * i, 8000 + 10 * i, 8002 + 10 * i) for i in range(n)]


def snapshot(p: Params) -> dict:
    specs = tritonserver_commands(p, REPO_DIR, ports(len(server_layout(p))))
    decoupled = p.loadgen.scenario != "Offline"
    configs = {}
    for repo, models in render_server_repos(p, ENGINE, decoupled=decoupled).items():
        for name, text in models.items():
            msg = text_format.Parse(text, model_config_pb2.ModelConfig())
            configs[f"{repo}/{name}"] = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return {"trtllm_build": trtllm_build_args(p, CKPT, ENGINE),
            "launch": [{"server": s.index, "mode": s.mode, "env": s.env, "models": list(s.models), "argv": s.argv}
                       for s in specs],
            "configs": configs}


def compare(got, want, path="") -> list[str]:
    """Every differing leaf, as 'path: got != want'."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in want if k not in got]
        out += [f"{path}.{k}: unexpected {got[k]!r}" for k in got if k not in want]
        for k in want:
            if k in got:
                out += compare(got[k], want[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in compare(g, w, f"{path}[{i}]")]
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


@pytest.mark.parametrize("name", RUNNABLE)
def test_example_validates_clean(name, placeholders, tmp_path):
    p = example(name, placeholders)
    assert cross_field_problems(p) + build_problems(p) == []
    # ... and through the command a user runs: every stage gets a key, nothing is built.
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(tmp_path / "artifacts")}
    out = subprocess.run([sys.executable, "-m", "pipeline", "status", "--json", "--params-file",
                          str(EXAMPLES / f"{name}.yaml"), "--overrides",
                          f"model.checkpoint={ckpt(name, placeholders)},dataset.path={placeholders / 'data.pkl'}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["status"] for r in rows] == ["missing"] * len(rows)
    # Every stage of the DAG has a key (stages others add keep this true without a count to update).
    assert {"PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "LaunchServers", "PrepareDataset",
            "RunLoadgen", "CheckAccuracy", "FullRun"} <= {r["stage"] for r in rows}


@pytest.mark.parametrize("name", RUNNABLE)
def test_example_matches_golden(name, placeholders):
    got = snapshot(example(name, placeholders))
    golden = GOLDEN / f"{name}.json"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(got, indent=1) + "\n")
    want = json.loads(golden.read_text())
    assert got["trtllm_build"] == want["trtllm_build"]
    assert got["launch"] == want["launch"]
    assert sorted(got["configs"]) == sorted(want["configs"])
    assert compare(got["configs"], want["configs"]) == []


def test_h100_server_config_pbtxt_field_by_field(placeholders):
    """One config.pbtxt spelled out: the TRT-LLM contract, decoupled, parameters, GPU ids."""
    p = example("llama2-70b-h100x8-server", placeholders)
    text = render_server_repos(p, ENGINE, decoupled=True)["server_1"]["tensorrt_llm"]
    assert validate_model_config(text, expected_name="tensorrt_llm") == []
    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())
    golden_file = GOLDEN / "llama2-70b-h100x8-server.server_1.config.pbtxt"
    if UPDATE:
        golden_file.write_text(text)
    golden = text_format.Parse(golden_file.read_text(), model_config_pb2.ModelConfig())
    assert cfg == golden
    assert (cfg.name, cfg.backend, cfg.max_batch_size) == ("tensorrt_llm", "tensorrtllm", 1024)
    assert cfg.model_transaction_policy.decoupled is True
    inputs = {t.name: t for t in cfg.input}
    assert list(inputs) == ["input_ids", "input_lengths", "request_output_len", "end_id", "pad_id", "streaming",
                            "exclude_input_in_output"]
    assert inputs["input_ids"].data_type == model_config_pb2.TYPE_INT32 and list(inputs["input_ids"].dims) == [-1]
    assert inputs["input_ids"].allow_ragged_batch and inputs["input_ids"].optional
    assert inputs["streaming"].data_type == model_config_pb2.TYPE_BOOL and inputs["streaming"].optional
    assert not inputs["input_lengths"].optional and inputs["input_lengths"].HasField("reshape")
    outputs = {t.name: list(t.dims) for t in cfg.output}
    assert outputs == {"output_ids": [-1, -1], "sequence_length": [-1]}
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params["gpt_model_type"] == "inflight_fused_batching"
    assert params["gpt_model_path"] == ENGINE
    assert params["gpu_device_ids"] == "0,1"  # ordinals under CUDA_VISIBLE_DEVICES=2,3
    assert params["batch_scheduler_policy"] == "max_utilization"
    assert params["kv_cache_free_gpu_mem_fraction"] == "0.9"
    assert (params["enable_chunked_context"], params["enable_kv_cache_reuse"], params["exclude_input_in_output"]) == \
        ("true", "false", "true")
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 0
    assert [(g.count, g.kind) for g in cfg.instance_group] == [(1, model_config_pb2.ModelInstanceGroup.KIND_CPU)]


def test_offline_and_server_differ_only_where_they_should(placeholders):
    off = snapshot(example("llama2-70b-h200x8-offline", placeholders))
    srv = snapshot(example("llama2-70b-h200x8-server", placeholders))
    assert [s["env"]["CUDA_VISIBLE_DEVICES"] for s in srv["launch"]] == [str(i) for i in range(8)]
    assert [s["env"]["CUDA_VISIBLE_DEVICES"] for s in off["launch"]] == ["0,1,2,3,4,5,6,7"]
    assert all(c["model_transaction_policy"].get("decoupled") for c in srv["configs"].values())
    assert not any(c["model_transaction_policy"].get("decoupled") for c in off["configs"].values())
    gpu_ids = [c["parameters"]["gpu_device_ids"]["string_value"] for c in off["configs"].values()]
    assert gpu_ids == [str(i) for i in range(8)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpi_segments(argv: list[str]) -> list[list[str]]:
    """The per-rank tritonserver argv of an mpirun MPMD line (or the line itself)."""
    if argv[0] != "mpirun":
        return [argv]
    segs, cur = [], []
    for a in argv[1:] + [":"]:
        if a == ":":
            segs.append(cur[cur.index("-n") + 2:])
            cur = []
        else:
            cur.append(a)
    return segs


def test_tritonserver_accepts_every_generated_flag(placeholders, tmp_path):
    """Runs each generated rank's argv with the tritonserver bundled in nvidia-pytriton (CPU), on an
    empty repository: an unknown or malformed option makes it exit at once with a usage message."""
    from harness.serving.processes import ServerError
    from harness.serving.triton.server import server_env, tritonserver_binary
    try:
        binary = str(tritonserver_binary())
    except ServerError as e:
        pytest.skip(str(e))
    repo = tmp_path / "empty"
    repo.mkdir()
    argvs = []
    for name in ("llama2-70b-h100x8-offline", "llama2-70b-h100x8-server"):  # orchestrator, leader+worker
        p = example(name, placeholders)
        triples = [(_free_port(), _free_port(), _free_port()) for _ in server_layout(p)]
        spec = tritonserver_commands(p, repo, triples)[0]
        argvs += _mpi_segments(spec.argv)[:2]
    for argv in argvs:
        argv = [binary, f"--model-repository={repo}"] + [a for a in argv[2:] if not a.startswith("--load-model")]
        log = tmp_path / "ts.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=server_env(), cwd=tmp_path)
        try:
            time.sleep(3)
            assert proc.poll() is None, f"tritonserver rejected {argv}:\n{log.read_text()[-2000:]}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
