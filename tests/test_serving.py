"""Serving harness: a real tritonserver (CPU) running the torch engine's Python-backend model.

One module-scoped server hosts two models built from a tiny seeded Llama:
  llm       decoupled, in-flight batching, loaded through harness.backends.torch.engine
  llm_sync  non-decoupled, loaded from the plain HF directory (fallback path)
Greedy outputs must equal single-request ``generate`` exactly (fp32).
"""
from __future__ import annotations

import os
import random
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import torch

from harness.backends.torch.repo import MODEL_PY, render_torch_model_config
from harness.serving import ports as P
from harness.serving.processes import ServerError
from harness.serving.triton import client as TC
from harness.serving.triton import cpu_server as CS
from harness.serving.triton import server as TS
from harness.serving.triton.pbtxt import (
    ModelConfigError,
    check_model_config,
    validate_model_config,
    write_model_repo,
)

pytestmark = pytest.mark.timeout(300)

VOCAB = 256


def _tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def hf_greedy(model, prompt: list[int], max_new_tokens: int, end_id: int | None = None) -> list[int]:
    """Single-request greedy generate; the end token itself is not returned (TRT-LLM semantics).

    The attention mask is explicit: generate would otherwise mask prompt tokens equal to
    pad_token_id."""
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=end_id, pad_token_id=0)
    new = out[0, len(prompt):].tolist()
    if end_id is not None and end_id in new:
        new = new[: new.index(end_id)]
    return new


def _triton_procs() -> set[int]:
    """PIDs of tritonserver / backend stub processes that descend from this test process."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name() in ("tritonserver", "triton_python_backend_stub"):
                found.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def _ports(n: int = 3) -> list[int]:
    return P.free_ports(n)


@pytest.fixture(scope="module")
def backend_dir(tmp_path_factory) -> Path:
    return TS.prepare_backend_dir(tmp_path_factory.mktemp("backends"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # robust under CPU oversubscription; the server uses 1 thread too
    root = tmp_path_factory.mktemp("tiny_llama")
    model = _tiny_llama()
    model.save_pretrained(root / "hf")
    try:
        yield model, root / "hf"
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny, backend_dir):
    from harness.backends.torch.engine import build_torch_engine

    model, hf_dir = tiny
    root = tmp_path_factory.mktemp("serving")
    build_torch_engine(hf_dir, root / "engine", dtype="float32", max_batch_size=16, max_num_tokens=512,
                       max_seq_len=256, max_input_len=128)
    repo = write_model_repo(root / "repo", {
        "llm": render_torch_model_config("llm", decoupled=True, max_batch_size=16,
                                         engine_dir=root / "engine", max_num_tokens=512),
        "llm_sync": render_torch_model_config("llm_sync", decoupled=False, max_batch_size=16,
                                              engine_dir=hf_dir),
    }, MODEL_PY.read_text())
    grpc, http, metrics = _ports()
    handle = CS.start_tritonserver(repo, root / "server.log", grpc_port=grpc, http_port=http,
                                  metrics_port=metrics, backend_dir=backend_dir, die_with_parent=True)
    try:
        CS.wait_ready(handle, timeout_s=150)
        yield handle
    finally:
        CS.stop_server(handle, timeout=20)
        assert not handle.alive()


# ---------------------------------------------------------------- repository rendering

def test_rendered_config_is_valid_trtllm_contract(tmp_path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    text = render_torch_model_config("llm", decoupled=True, max_batch_size=8, engine_dir="/x/engine",
                                     instance_count=2, max_queue_delay_us=100)
    assert validate_model_config(text, expected_name="llm") == []
    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert cfg.backend == "python" and cfg.max_batch_size == 8
    assert cfg.model_transaction_policy.decoupled is True
    assert cfg.instance_group[0].count == 2
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    ins = {t.name: t for t in cfg.input}
    assert list(ins["input_ids"].dims) == [-1] and ins["input_ids"].allow_ragged_batch
    assert ins["input_ids"].data_type == model_config_pb2.TYPE_INT32
    for name in ("input_lengths", "request_output_len", "end_id", "pad_id"):
        assert list(ins[name].dims) == [1] and ins[name].data_type == model_config_pb2.TYPE_INT32
    assert ins["streaming"].data_type == model_config_pb2.TYPE_BOOL and ins["streaming"].optional
    assert ins["end_id"].optional and ins["pad_id"].optional and not ins["request_output_len"].optional
    outs = {t.name: list(t.dims) for t in cfg.output}
    assert outs == {"output_ids": [-1, -1], "sequence_length": [-1]}
    assert cfg.parameters["engine_dir"].string_value == "/x/engine"
    sync = render_torch_model_config("s", decoupled=False, max_batch_size=8, engine_dir="/x")
    assert "decoupled: false" in sync

    bad = text.replace("/x/engine", "${engine_dir}")
    assert any("${engine_dir}" in p for p in validate_model_config(bad))
    dup = text.replace('name: "pad_id"', 'name: "end_id"')
    assert any("duplicate tensor name 'end_id'" in p for p in validate_model_config(dup))
    assert any("not a valid ModelConfig" in p for p in validate_model_config("name: {"))
    with pytest.raises(ModelConfigError, match="placeholder"):
        check_model_config(bad)
    with pytest.raises(ModelConfigError, match="directory name"):
        write_model_repo(tmp_path / "r", {"other": text})
    repo = write_model_repo(tmp_path / "r", {"llm": text}, "print('hi')\n")
    assert (repo / "llm" / "config.pbtxt").read_text() == text
    assert (repo / "llm" / "1" / "model.py").read_text() == "print('hi')\n"


def test_inflight_batcher_joins_mid_flight_and_is_exact(tiny):
    """In-process scheduler: requests arrive between decode steps, join the running batch,
    and every output equals single-request greedy generate."""
    from harness.backends.torch.batcher import GenRequest, InflightBatcher

    model, _ = tiny
    rng = random.Random(7)
    reqs = [([rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 30))], rng.randint(1, 20)) for _ in range(12)]
    ref = [hf_greedy(model, p, n) for p, n in reqs]
    b = InflightBatcher(model, max_batch_size=6, max_num_tokens=64, max_seq_len=256)
    got = {i: [] for i in range(len(reqs))}
    finals = {i: 0 for i in range(len(reqs))}
    pending = list(range(len(reqs)))

    def cb(i):
        def on_tokens(toks, final):
            got[i].extend(toks)
            finals[i] += final
        return on_tokens

    while pending or not b.idle:
        for _ in range(rng.randint(0, 2)):
            if pending:
                i = pending.pop(0)
                b.submit(GenRequest(input_ids=reqs[i][0], max_new_tokens=reqs[i][1], on_tokens=cb(i),
                                    on_error=pytest.fail))
        b.step()
    assert [got[i] for i in range(len(reqs))] == ref
    assert all(v == 1 for v in finals.values())
    assert b.stats["max_batch"] > 1


def test_inflight_batcher_limits_and_cancellation(tiny):
    from harness.backends.torch.batcher import GenRequest, InflightBatcher

    model, _ = tiny
    b = InflightBatcher(model, max_batch_size=4, max_num_tokens=40, max_seq_len=32,
                        cancellation_check_period_ms=0)
    errors, outs = {}, {}

    def req(i, prompt, n, cancel_after=None):
        outs[i] = []
        state = {"calls": 0}

        def is_cancelled():
            state["calls"] += 1
            return cancel_after is not None and len(outs[i]) >= cancel_after

        return GenRequest(input_ids=prompt, max_new_tokens=n, is_cancelled=is_cancelled,
                          on_tokens=lambda t, f: outs[i].extend(t),
                          on_error=lambda msg: errors.__setitem__(i, msg))

    b.submit(req(0, list(range(3, 44)), 4))          # 41 tokens > max_num_tokens=40
    b.submit(req(1, [3] * 32, 4))                    # no room under max_seq_len=32
    b.submit(req(2, [5, 6, 7], 100))                 # clipped to max_seq_len: 29 new tokens
    b.submit(req(3, [5, 6, 7, 8], 100, cancel_after=3))
    b.submit(req(4, [9] * 30, 1))                    # prompt 30 + 1 > remaining budget: waits a step
    b.run_until_idle()
    assert "max_num_tokens" in errors[0] and "max_input_len" in errors[1]
    assert len(outs[2]) == 29 and outs[2] == hf_greedy(model, [5, 6, 7], 29)
    assert errors[3] == "request cancelled" and 3 <= len(outs[3]) < 10
    assert outs[4] == hf_greedy(model, [9] * 30, 1) and 4 not in errors
    assert b.stats["cancelled"] == 1 and b.idle


# ---------------------------------------------------------------- real server

def test_streamed_tokens_equal_hf_generate(server, tiny):
    model, _ = tiny
    prompt = [5, 17, 99, 3, 250, 42, 7]
    ref = hf_greedy(model, prompt, 24)
    assert len(ref) == 24
    assert TC.generate(server.grpc_url, "llm", prompt, 24, streaming=True) == ref


def test_concurrent_requests_match_one_at_a_time(server, tiny):
    model, _ = tiny
    rng = random.Random(3)
    reqs = [([rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 48))], rng.randint(1, 32)) for _ in range(16)]
    serial = [TC.generate(server.grpc_url, "llm", p, n) for p, n in reqs]
    with ThreadPoolExecutor(max_workers=16) as pool:
        concurrent = list(pool.map(lambda r: TC.generate(server.grpc_url, "llm", r[0], r[1]), reqs))
    assert concurrent == serial
    assert serial == [hf_greedy(model, p, n) for p, n in reqs]
    assert [len(c) for c in concurrent] == [n for _, n in reqs]


def test_end_id_stops_generation(server, tiny):
    model, _ = tiny
    prompt = [9, 8, 7, 6]
    full = hf_greedy(model, prompt, 16)
    end_id = full[5]
    expected = full[: full.index(end_id)]
    assert TC.generate(server.grpc_url, "llm", prompt, 16, end_id=end_id) == expected
    assert TC.generate(server.grpc_url, "llm", prompt, 16, end_id=end_id, streaming=False) == expected


def test_non_streaming_returns_full_sequence(server, tiny):
    model, _ = tiny
    prompt = [11, 22, 33, 44, 55]
    ref = hf_greedy(model, prompt, 20)
    # decoupled model, streaming off: one response carrying every generated token
    assert TC.generate(server.grpc_url, "llm", prompt, 20, streaming=False) == ref
    # non-decoupled model (unary infer): output_ids = prompt + generated, as TRT-LLM by default
    assert TC.infer(server.grpc_url, "llm_sync", prompt, 20) == prompt + ref


def test_invalid_request_gets_error_response(server):
    with pytest.raises(ServerError, match="max_input_len"):
        TC.generate(server.grpc_url, "llm", list(range(3, 3 + 129)) , 4)
    # the server keeps serving afterwards
    assert len(TC.generate(server.grpc_url, "llm", [4, 5], 3)) == 3


# ---------------------------------------------------------------- process management

def test_port_in_use_is_a_clear_error(tmp_path, backend_dir):
    (tmp_path / "repo").mkdir()
    grpc, http, metrics = _ports()
    before = _triton_procs()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", grpc))
        sock.listen(1)
        assert P.port_in_use("127.0.0.1", grpc)
        with pytest.raises(ServerError, match=rf"already in use.*grpc={grpc}"):
            CS.start_tritonserver(tmp_path / "repo", tmp_path / "server.log", grpc_port=grpc, http_port=http,
                                 metrics_port=metrics, backend_dir=backend_dir, die_with_parent=True)
    assert _triton_procs() == before


def test_killed_server_is_detected(tmp_path, backend_dir):
    (tmp_path / "repo").mkdir()  # no models: the server is ready within a second or two
    before = _triton_procs()
    grpc, http, metrics = _ports()
    h = CS.start_tritonserver(tmp_path / "repo", tmp_path / "a.log", grpc_port=grpc, http_port=http,
                             metrics_port=metrics, backend_dir=backend_dir, die_with_parent=True)
    try:
        CS.wait_ready(h, timeout_s=60)
        assert CS.is_ready(h)
        os.kill(h.pid, signal.SIGKILL)
        h.process.proc.wait(timeout=10)
        assert not CS.is_ready(h)
        with pytest.raises(ServerError, match=r"exited with code -9"):
            CS.wait_ready(h, timeout_s=10)
    finally:
        CS.stop_server(h, timeout=5)

    # killed right after launch, before it could come up
    grpc, http, metrics = _ports()
    h = CS.start_tritonserver(tmp_path / "repo", tmp_path / "b.log", grpc_port=grpc, http_port=http,
                             metrics_port=metrics, backend_dir=backend_dir, die_with_parent=True)
    try:
        os.kill(h.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(ServerError, match=r"exited with code -9.*last log lines"):
            CS.wait_ready(h, timeout_s=30)
        assert time.monotonic() - t0 < 10
    finally:
        CS.stop_server(h, timeout=5)
    assert _triton_procs() == before


def test_broken_config_reports_log_tail_and_leaves_no_process(tmp_path, tiny, backend_dir):
    _, hf_dir = tiny
    good = render_torch_model_config("llm", decoupled=True, max_batch_size=4, engine_dir=hf_dir)
    broken = good.replace('data_type: TYPE_INT32', 'data_type: TYPE_NOPE', 1)
    assert validate_model_config(broken)  # our own validator catches it up front ...
    repo = write_model_repo(tmp_path / "repo", {"llm": broken}, MODEL_PY.read_text(), validate=False)  # ... forced through
    before = _triton_procs()
    grpc, http, metrics = _ports()
    h = CS.start_tritonserver(repo, tmp_path / "server.log", grpc_port=grpc, http_port=http,
                             metrics_port=metrics, backend_dir=backend_dir, die_with_parent=True)
    try:
        with pytest.raises(ServerError) as err:
            CS.wait_ready(h, timeout_s=60)
        msg = str(err.value)
        assert "last log lines" in msg and "TYPE_NOPE" in msg
    finally:
        CS.stop_server(h, timeout=5)
    assert not h.alive()
    assert _triton_procs() == before


def test_model_that_fails_to_initialize_reports_traceback(tmp_path, backend_dir):
    """Valid config, but the engine directory does not exist: the Python model's initialize()
    raises inside the backend stub; the server exits and the error names the cause."""
    text = render_torch_model_config("llm", decoupled=True, max_batch_size=4, engine_dir=tmp_path / "missing")
    repo = write_model_repo(tmp_path / "repo", {"llm": text}, MODEL_PY.read_text())
    before = _triton_procs()
    grpc, http, metrics = _ports()
    h = CS.start_tritonserver(repo, tmp_path / "server.log", grpc_port=grpc, http_port=http,
                             metrics_port=metrics, backend_dir=backend_dir, die_with_parent=True)
    try:
        with pytest.raises(ServerError, match=r"(?s)exited with code.*error lines:.*engine directory \S*missing does not exist"):
            CS.wait_ready(h, timeout_s=90)
    finally:
        CS.stop_server(h, timeout=5)
    assert _triton_procs() == before


@pytest.mark.parametrize("die_with_parent", [True, False])
def test_server_vs_a_killed_launcher(tmp_path, backend_dir, die_with_parent):
    """die_with_parent=True: a harness killed with SIGKILL (no finally, no atexit) leaves no
    tritonserver behind.  False (default, for servers reused across runs): it keeps serving
    and is stopped later by pid."""
    import subprocess
    import sys

    (tmp_path / "repo").mkdir()
    script = (
        "import sys, time; from harness.serving.triton import cpu_server as CS; from harness.serving import ports as P\n"
        "p = [P.free_port() for _ in range(3)]\n"
        f"h = CS.start_tritonserver({str(tmp_path / 'repo')!r}, {str(tmp_path / 's.log')!r}, grpc_port=p[0],"
        f" http_port=p[1], metrics_port=p[2], backend_dir={str(backend_dir)!r}, die_with_parent={die_with_parent})\n"
        "CS.wait_ready(h, 60); print(h.pid, h.grpc_url, flush=True); time.sleep(600)\n")
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parent.parent)
    server_pid = None

    def gone() -> bool:
        try:
            return psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    try:
        pid, url = launcher.stdout.readline().split()
        server_pid = int(pid)
        assert psutil.pid_exists(server_pid)
        launcher.kill()
        launcher.wait(10)
        deadline = time.monotonic() + (20 if die_with_parent else 2)
        while time.monotonic() < deadline and not gone():
            time.sleep(0.1)
        if die_with_parent:
            assert gone(), "tritonserver outlived its SIGKILLed launcher"
        else:
            assert not gone()
            import contextlib

            import tritonclient.grpc as grpcclient
            with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
                assert client.is_server_ready()
            CS.stop_server(server_pid, timeout=10)
            assert gone()
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
        if server_pid is not None and not gone():
            CS.stop_server(server_pid, timeout=5)
