"""The measuring side: datasets, accuracy scoring and the LoadGen SUT against a real
tritonserver (CPU) serving the zero-cost echo model (harness/serving/testing/echo_model.py).

Server-backed tests share one module-scoped server (models ``echo``: zero cost, errors on
prompts containing token 999; ``echo_slow``: 2 ms per token).  The server-death test starts
and SIGKILLs a second server of its own.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from harness.backends.torch.repo import render_torch_model_config
from harness.loadgen import (
    LoadgenError,
    latency_constraints,
    parse_summary,
    run_loadgen,
)
from harness.mlperf.accuracy import (
    AccuracyLogError,
    check,
    parse_accuracy_log,
    reference_scores_for,
    rouge_scores,
    score_outputs,
    score_texts,
)
from harness.model.datasets import (
    DatasetError,
    Sample,
    builtin_prompt_split,
    load_dataset,
    write_jsonl,
)
from harness.serving import ports as P
from harness.serving.testing.echo_model import echo_tokens
from harness.serving.triton import cpu_server as CS
from harness.serving import shm
from harness.serving.triton import server as TS
from harness.serving.triton.pbtxt import write_model_repo

pytestmark = pytest.mark.timeout(240)

ECHO_PY = Path(__file__).resolve().parent.parent / "harness" / "serving" / "testing" / "echo_model.py"
ERROR_TOKEN = 999
MAX_NEW = 8


# ====================================================================== datasets

@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from harness.model.tiny import train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    train_tokenizer(512, d)
    return d


def test_builtin_dataset_is_deterministic_prefixes(tokenizer_dir):
    from transformers import AutoTokenizer

    from harness.model.corpus import corpus_lines

    a = load_dataset("builtin", None, tokenizer_dir, 20, max_input_len=64)
    b = load_dataset("builtin", None, tokenizer_dir, 20, max_input_len=64)
    assert [s.input_ids for s in a] == [s.input_ids for s in b]
    assert [s.index for s in a] == list(range(20))
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    lines = corpus_lines()
    for i, s in enumerate(a):
        assert len(s.input_text.split()) == 6 + i % 5
        assert lines[i].startswith(s.input_text) and (s.input_text + " " + s.reference_text) == " ".join(lines[i].split())
        assert s.input_ids == tok.encode(s.input_text, add_special_tokens=False)
    assert builtin_prompt_split("a b c", 0) == ("a b", "c")
    short = load_dataset("builtin", None, tokenizer_dir, 3, max_input_len=2)
    assert all(len(s.input_ids) == 2 and s.meta["truncated_from"] > 2 for s in short)
    # past one prompt per corpus line, later passes cut the same lines elsewhere: all distinct
    many = load_dataset("builtin", None, tokenizer_dir, 24576)
    assert [s.input_text for s in many[:len(a)]] == [s.input_text for s in a]
    assert len({s.input_text for s in many}) > 5000  # short lines give the same cut in several passes
    assert all((s.input_text + " " + s.reference_text) == " ".join(lines[s.index % 800].split()) for s in many)
    with pytest.raises(DatasetError, match="exceeds the 24800 builtin prompts"):
        load_dataset("builtin", None, tokenizer_dir, 24801)


def test_mlperf_pickle_dataset(tmp_path):
    import pandas as pd

    df = pd.DataFrame({
        "input": ["q0", "q1", "q2"],
        "tok_input": [[1, 5, 6], np.array([1, 7], dtype=np.int64), [1, 8, 9, 10]],
        "output": ["answer zero", "answer one", "answer two"],
        "tok_output": [[11, 12], [13], [14, 15]],
    })
    path = tmp_path / "open_orca.pkl"
    df.to_pickle(path)
    samples = load_dataset("mlperf_pickle", path, None, 3, max_input_len=3)
    assert [s.input_ids for s in samples] == [[1, 5, 6], [1, 7], [1, 8, 9]]
    assert [s.reference_text for s in samples] == ["answer zero", "answer one", "answer two"]
    assert samples[2].reference_ids == [14, 15] and samples[2].meta["truncated_from"] == 4
    with pytest.raises(DatasetError, match="3 rows, fewer than num_samples=4"):
        load_dataset("mlperf_pickle", path, None, 4)

    df.drop(columns=["output"]).to_pickle(tmp_path / "noout.pkl")
    with pytest.raises(DatasetError, match=r"missing column 'output'"):
        load_dataset("mlperf_pickle", tmp_path / "noout.pkl", None, 1)
    bad = df.copy()
    bad.at[1, "tok_input"] = "1 7"
    bad.to_pickle(tmp_path / "bad.pkl")
    with pytest.raises(DatasetError, match=r"row 1: field 'tok_input' must be a list"):
        load_dataset("mlperf_pickle", tmp_path / "bad.pkl", None, 3)
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(DatasetError, match="cannot read as a pandas pickle"):
        load_dataset("mlperf_pickle", tmp_path / "junk.pkl", None, 1)
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("mlperf_pickle", tmp_path / "missing.pkl", None, 1)


def test_jsonl_dataset(tmp_path, tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([
        json.dumps({"input": "Karl is a builder", "output": "who lives in Zurich."}),
        "",
        json.dumps({"input_ids": [3, 4, 5], "reference": "ref text"}),
        json.dumps({"input_ids": [6], "reference_ids": [7, 8]}),
    ]) + "\n")
    s = load_dataset("jsonl", path, tokenizer_dir, 3)
    assert s[0].input_ids == tok.encode("Karl is a builder", add_special_tokens=False)
    assert s[0].reference_text == "who lives in Zurich."
    assert s[1].input_ids == [3, 4, 5] and s[1].reference_text == "ref text"
    assert s[2].reference_ids == [7, 8] and s[2].reference_text is None
    assert [x.index for x in s] == [0, 1, 2]
    back = load_dataset("jsonl", write_jsonl(s, tmp_path / "rt.jsonl"), None, 3)
    assert [(x.input_ids, x.reference_text, x.reference_ids) for x in back] == \
        [(x.input_ids, x.reference_text, x.reference_ids) for x in s]

    def bad(lines: list[str], match: str, tokdir=None):
        p = tmp_path / "bad.jsonl"
        p.write_text("\n".join(lines) + "\n")
        with pytest.raises(DatasetError, match=match):
            load_dataset("jsonl", p, tokdir, len([x for x in lines if x.strip()]))

    ok = json.dumps({"input_ids": [1], "output": "x"})
    bad([ok, "{not json"], r"line 2: invalid JSON")
    bad([ok, json.dumps({"prompt": "x", "output": "y"})], r"line 2: missing field 'input' \(text\), 'input_ids' \(token ids\) or 'messages'")
    bad([json.dumps({"input_ids": [1, "a"], "output": "y"})], r"line 1: field 'input_ids'\[1\] is 'a'")
    bad([json.dumps({"input_ids": [], "output": "y"})], r"line 1: field 'input_ids' is empty")
    bad([json.dumps({"input_ids": [1], "output": 5})], r"line 1: field 'output' must be text")
    bad([json.dumps({"input_ids": [1]})], r"line 1: missing reference: field 'output'")
    bad([json.dumps({"input": "text", "output": "y"})], r"needs a tokenizer")
    with pytest.raises(DatasetError, match="unknown dataset format"):
        load_dataset("csv", path, None, 1)


# ====================================================================== accuracy

def test_rouge_and_length_scores():
    assert rouge_scores(["the cat sat on the mat"], ["the cat sat on the mat"]) == \
        {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0, "rougeLsum": 100.0}
    r = rouge_scores(["the cats are running", "nothing alike"], ["The cat runs quickly", "completely different"])
    # stemming (cats->cat, running->run) as MLPerf's use_stemmer=True; mean of F x 100
    assert r["rouge1"] == pytest.approx((0.75 + 0.0) / 2 * 100, abs=1e-4)
    s = score_texts([" a b. c d ", "e"], ["a b. c d", "f"], [4, 2])
    assert s["gen_num"] == 2 and s["gen_len"] == len("a b. c d") + 1
    assert s["gen_tok_len"] == 6 and s["tokens_per_sample"] == 3.0
    assert s["rouge1"] == 50.0


def test_check_against_mlperf_references():
    ref = reference_scores_for("llama2-70b")
    assert ref == {"rouge1": 44.4312, "rouge2": 22.0352, "rougeL": 28.6162, "tokens_per_sample": 294.45}
    good = {"rouge1": 44.0, "rouge2": 21.9, "rougeL": 28.4, "tokens_per_sample": 290.0}
    res = check(good, "llama2-70b-99")
    assert res["passed"] and res["failed"] == [] and res["reference_model"] == "llama2-70b"
    assert res["metrics"]["rouge1"]["threshold"] == pytest.approx(44.4312 * 0.99, abs=1e-4)
    res = check({**good, "rouge2": 21.5}, "llama2-70b", target=0.99)
    assert not res["passed"] and res["failed"] == ["rouge2"]
    assert not check(good, "llama2-70b", target=0.999)["passed"]  # 99.9% category is stricter
    assert not check({**good, "tokens_per_sample": 294.45 * 1.11}, "llama2-70b")["passed"]
    assert not check({**good, "tokens_per_sample": 294.45 * 0.89}, "llama2-70b")["passed"]
    mix = check({"rouge1": 45.6, "rouge2": 23.4, "rougeL": 30.5, "tokens_per_sample": 145.9 * 1.09}, "mixtral-8x7b")
    # A required metric never computed fails the check and is named (not silently skipped).
    assert not mix["passed"] and sorted(mix["missing"]) == ["gsm8k", "mbxp"]
    assert sorted(mix["failed"]) == ["gsm8k", "mbxp"]
    mix = check({"rouge1": 45.6, "rouge2": 23.4, "rougeL": 30.5, "tokens_per_sample": 145.9 * 1.09,
                 "gsm8k": 73.0, "mbxp": 60.0}, "mixtral-8x7b")
    assert mix["passed"], mix
    assert reference_scores_for("llama3.1-405b") == {"rougeL": 21.6666, "exact_match": 90.1335,
                                                     "tokens_per_sample": 684.68}
    own = check({"rouge1": 99.5, "tokens_per_sample": 10}, {"rouge1": 100.0, "tokens_per_sample": 10.5})
    assert own["passed"]
    assert not check({}, "llama2-70b")["passed"]


def test_parse_accuracy_log_and_score_outputs(tmp_path, tokenizer_dir):
    from transformers import AutoTokenizer

    def hexs(ids):
        return np.asarray(ids, dtype=np.int32).tobytes().hex().upper()

    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([
        {"seq_id": 0, "qsl_idx": 1, "data": hexs([5, 6, 70000]), "token_count": 3},
        {"seq_id": 1, "qsl_idx": 0, "data": hexs([]), "token_count": 0},
        {"seq_id": 2, "qsl_idx": 1, "data": hexs([9]), "token_count": 1},  # duplicate: first wins
    ]))
    assert parse_accuracy_log(log) == {1: [5, 6, 70000], 0: []}
    assert parse_accuracy_log(tmp_path) == {1: [5, 6, 70000], 0: []}
    log.write_text(json.dumps([{"qsl_idx": 0, "data": "ABC"}]))
    with pytest.raises(AccuracyLogError, match="qsl_idx 0"):
        parse_accuracy_log(log)
    with pytest.raises(AccuracyLogError, match="does not exist"):
        parse_accuracy_log(tmp_path / "nope.json")

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    refs = ["Karl is a builder who lives in Zurich.", "Mia has a grey parrot."]
    samples = [Sample(index=i, input_ids=[1], reference_text=r) for i, r in enumerate(refs)]
    outs = {i: tok.encode(r, add_special_tokens=False) for i, r in enumerate(refs)}
    s = score_outputs(outs, samples, tokenizer_dir)
    assert s["rouge1"] == 100.0 and s["rougeL"] == 100.0 and s["gen_num"] == 2
    assert s["tokens_per_sample"] == round(sum(map(len, outs.values())) / 2, 1)


# ====================================================================== LoadGen SUT

def _ports(n: int = 3) -> list[int]:
    return P.free_ports(n)


def _start_server(root: Path, models: dict[str, dict[str, str]], backend_dir: Path,
                  not_decoupled: tuple[str, ...] = ()) -> CS.TritonServer:
    cfgs = {name: render_torch_model_config(name, decoupled=name not in not_decoupled, max_batch_size=64,
                                            engine_dir="unused", extra_parameters=params)
            for name, params in models.items()}
    repo = write_model_repo(root / "repo", cfgs, ECHO_PY.read_text())
    grpc, http, metrics = _ports()
    h = CS.start_tritonserver(repo, root / "server.log", grpc_port=grpc, http_port=http, metrics_port=metrics,
                             backend_dir=backend_dir)
    try:
        CS.wait_ready(h, timeout_s=120)
    except BaseException:
        CS.stop_server(h, timeout=10)
        raise
    return h


@pytest.fixture(scope="module")
def backend_dir(tmp_path_factory) -> Path:
    return TS.prepare_backend_dir(tmp_path_factory.mktemp("backends"))


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory, backend_dir):
    h = _start_server(tmp_path_factory.mktemp("echo_server"), {
        "echo": {"error_token_id": str(ERROR_TOKEN)},
        "echo_slow": {"token_delay_ms": "2"},
        "echo_chunks": {"token_delay_ms": "2", "tokens_per_response": "4"},  # a stream interval of 4
        "echo_plain": {"error_token_id": str(ERROR_TOKEN)},  # not decoupled: one response per request
    }, backend_dir, not_decoupled=("echo_plain",))
    try:
        yield h
    finally:
        CS.stop_server(h, timeout=20)
    assert not shm.shm_regions(h.spec.shm_prefix), "the stopped server's shared memory is left in /dev/shm"


def _prompts(n: int) -> list[list[int]]:
    return [[10 + i, 40 + i % 7, 30, 31 + i % 3] for i in range(n)]


def _lg_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "harness.loadgen" in " ".join(p.cmdline()) or p.name().startswith("perfdag-frontend"):
                out.append(p)
            elif "multiprocessing" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def test_offline_multi_frontend(echo_server, tmp_path):
    samples = _prompts(48)
    seen: list[dict] = []
    t0 = time.monotonic()
    # the same server listed twice: two "servers" for the round-robin spread
    r = run_loadgen([echo_server.grpc_url, "grpc://" + echo_server.grpc_url], "echo", samples,
                    {"offline_expected_qps": 10, "min_duration_ms": 1000, "min_query_count": 48,
                     "performance_sample_count": 48, "scenario": "Offline", "seed": 0},
                    tmp_path, scenario="Offline", mode="PerformanceOnly", frontends=2, clients_per_frontend=2,
                    warmup_queries=4, max_new_tokens=MAX_NEW, request_timeout_s=30, progress=seen.append)
    assert time.monotonic() - t0 < 60
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json", "result.json",
                 "requests.csv", "user.conf"):
        assert (tmp_path / name).is_file(), name
    assert r["scenario"] == "Offline" and r["mode"] == "PerformanceOnly"
    assert r["valid"] in ("VALID", "INVALID")
    assert r["samples_per_s"] > 0
    # n_tokens on every completion: LoadGen's tokens/s is samples/s x tokens per sample
    assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * MAX_NEW, rel=0.01)
    assert r["ttft_ms"] is None and r["harness"]["streaming"] is False  # Offline does not stream
    assert r["latency_ms"]["p99"] > 0 and r["num_errors"] == 0
    reqs = r["requests"]
    assert len(reqs) == r["measured"]["requests"] >= 48
    assert all(q["n_tokens"] == MAX_NEW and q["latency_ms"] > 0 for q in reqs)
    assert r["harness"]["warmup_queries"] == 4 and r["harness"]["frontends"] == 2
    per_server = [p["completed"] for p in r["harness"]["per_server"]]
    assert per_server == [len(reqs) // 2] * 2  # Offline: round-robin over servers
    assert sorted(q["server"] for q in reqs) == [0] * (len(reqs) // 2) + [1] * (len(reqs) // 2)
    assert json.loads((tmp_path / "result.json").read_text())["tokens_per_s"] == r["tokens_per_s"]
    assert parse_summary(tmp_path)["samples_per_s"] == r["samples_per_s"]
    assert seen and seen[-1]["event"] == "progress"
    assert not _lg_children()


def test_server_streams_first_tokens(echo_server, tmp_path):
    samples = _prompts(32)
    r = run_loadgen([echo_server.grpc_url], ["echo_slow"], samples,
                    {"server_target_qps": 25, "min_duration_ms": 2000, "min_query_count": 40},
                    tmp_path, scenario="Server", frontends=1, clients_per_frontend=3, warmup_queries=3,
                    max_new_tokens=MAX_NEW, request_timeout_s=30, progress=False)
    assert r["scenario"] == "Server" and r["harness"]["streaming"] is True
    assert r["ttft_constraint_ms"] == 2000.0 and r["tpot_constraint_ms"] == 200.0  # llama2-70b presets
    assert r["ttft_source"] == "loadgen" and r["tpot_source"] == "loadgen"
    assert 0 < r["ttft_ms"]["p50"] <= r["ttft_ms"]["p99"] < 2000
    assert r["tpot_ms"]["p50"] >= 1.5  # echo_slow: 2 ms per token
    assert r["tokens_per_s"] > 0 and r["samples_per_s"] > 0
    assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * MAX_NEW, rel=0.02)
    assert r["perf_constraints_met"] is True
    assert r["early_stopping"] is not None and "met" in r["early_stopping"]
    assert r["query_count"] >= 40
    assert all(q["ttft_ms"] is not None and 0 < q["ttft_ms"] < q["latency_ms"] for q in r["requests"])
    assert r["measured"]["ttft_ms"]["p99"] > 0
    assert (tmp_path / "mlperf_log_detail.txt").read_text().count("requested_server_ttft_latency") == 1
    # requests.jsonl over gRPC: the same rows, without the HTTP fields (no connect, headers or body bytes)
    head, *rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == len(r["requests"]) and set(head["fields"]) == set(rows[0])
    assert not any(k in rows[0] for k in ("client_headers_at_ms", "client_connect_ms", "client_connection_reused"))
    for row, q in zip(rows, r["requests"]):
        assert row["sample_index"] == q["sample_index"]
        assert row["loadgen_issue_at_ms"] <= row["client_sent_at_ms"] <= row["client_first_token_at_ms"] \
            <= row["client_done_at_ms"]


def test_chunked_stream_first_token_and_counts_match_a_bare_tritonclient_loop(echo_server, tmp_path):
    """4 tokens per response: TTFT is the first response's arrival, n_tokens exact and TPOT the
    rest over n-1 tokens, as a bare tritonclient.grpc.aio loop measures them on the same model."""
    from bench.bare_clients import raw_grpc_aio_loop, triton_aio_loop

    samples = _prompts(24)
    r = run_loadgen([echo_server.grpc_url], ["echo_chunks"], samples,
                    {"server_target_qps": 40, "min_duration_ms": 0, "min_query_count": 24,
                     "performance_sample_count": 24}, tmp_path, scenario="Server", frontends=1,
                    clients_per_frontend=2, warmup_queries=2, max_new_tokens=16, request_timeout_s=30, progress=False)
    bare = triton_aio_loop(echo_server.grpc_url, samples, 8, 16, True, 2, conns=2, model="echo_chunks")
    assert sorted(q["n_tokens"] for q in r["requests"]) == [16] * 24 == sorted(bare["n_tokens"].values())
    # the raw grpc.aio loop (bench/harness_overhead.py's fourth gRPC baseline) counts what tritonclient's does,
    # streamed (4 tokens a response) and not (one response a request)
    for streaming, responses in ((True, 24 * 4), (False, 24)):
        raw = raw_grpc_aio_loop(echo_server.grpc_url, samples, 8, 16, streaming, 2, conns=2, model="echo_chunks")
        assert sorted(raw["n_tokens"].values()) == [16] * 24 and (raw["requests"], raw["responses"]) == (24, responses)
    mine = sorted(q["ttft_ms"] for q in r["requests"])[12]
    theirs = sorted(v / 1e6 for v in bare["ttft_ns"].values())[12]
    assert 8 * 0.9 <= mine < max(3 * theirs, theirs + 20)  # the first 4-token response, 4 x 2 ms
    assert r["ttft_ms"]["p50"] >= 8 * 0.9  # LoadGen's own TTFT
    tpot = sorted(q["tpot_ms"] for q in r["requests"])[12]
    assert 1.6 * 0.8 <= tpot < 8.0  # 12 tokens x 2 ms / 15


def test_interactive_accuracy_log_decodes_to_expected_tokens(echo_server, tmp_path):
    end_id = 71  # prompts with a 70 stop after their first token; one prompt starts with 70: no tokens
    samples = [Sample(index=i, input_ids=[10 + i if i != 5 else 70, 70 if i % 3 == 0 else 40, 30])
               for i in range(24)]
    r = run_loadgen([echo_server.grpc_url], "echo_slow", samples,
                    {"server_target_qps": 40, "min_duration_ms": 500, "min_query_count": 24},
                    tmp_path, scenario="Interactive", mode="AccuracyOnly", frontends=1, clients_per_frontend=2,
                    warmup_queries=2, end_id=end_id, max_new_tokens=MAX_NEW, request_timeout_s=30)
    assert r["mode"] == "AccuracyOnly" and r["scenario"] == "Interactive"
    assert r["loadgen_scenario"] == "Server"  # LoadGen runs Interactive as Server
    assert r["ttft_constraint_ms"] == 450.0 and r["tpot_constraint_ms"] == 40.0
    got = parse_accuracy_log(tmp_path / "mlperf_log_accuracy.json")
    made = {s.index: echo_tokens(s.input_ids, MAX_NEW, end_id=end_id) for s in samples}
    assert len(made[5]) == 0 and len(made[3]) == 1 and len(made[1]) == MAX_NEW
    # fewer than 2 tokens are padded with the end token to 2, as NVIDIA's harness does (cores/base.py)
    want = {i: t + [end_id] * (2 - len(t)) for i, t in made.items()}
    assert got == want and r["loadgen_errors"]["count"] == 0  # (LoadGen logs no num_errors in accuracy runs)
    entries = json.loads((tmp_path / "mlperf_log_accuracy.json").read_text())
    assert {e["qsl_idx"]: e["token_count"] for e in entries} == {i: len(t) for i, t in want.items()}


def test_a_model_that_is_not_decoupled_gets_one_unary_call_per_request(echo_server, tmp_path):
    # Hundreds of non-decoupled requests on one ModelStreamInfer stream crash tritonserver 2.51 now
    # and then; unary ModelInfer calls carry them instead (decoupled models keep their stream).
    samples = [Sample(index=i, input_ids=[10 + i, 40 + i % 7, 30]) for i in range(300)]
    r = run_loadgen([echo_server.grpc_url], "echo_plain", samples,
                    {"offline_expected_qps": 1000, "min_query_count": 300, "performance_sample_count": 300},
                    tmp_path / "acc", scenario="Offline", mode="AccuracyOnly", frontends=1, clients_per_frontend=2,
                    warmup_queries=2, max_new_tokens=MAX_NEW, request_timeout_s=30, progress=False)
    assert r["harness"]["methods"]["rpc"] == "ModelInfer"
    got = parse_accuracy_log(tmp_path / "acc" / "mlperf_log_accuracy.json")
    assert got == {s.index: echo_tokens(s.input_ids, MAX_NEW) for s in samples}
    streamed = run_loadgen([echo_server.grpc_url], "echo", samples[:8], {"min_query_count": 8},
                           tmp_path / "stream", scenario="Offline", frontends=1, clients_per_frontend=1,
                           warmup_queries=0, max_new_tokens=4, request_timeout_s=30, progress=False)
    assert streamed["harness"]["methods"]["rpc"] == "ModelStreamInfer"
    # a failed unary call ends the run naming the server and the model, as on a stream
    bad = [s.input_ids for s in samples[:16]]
    bad[5] = [1, ERROR_TOKEN, 2]
    with pytest.raises(LoadgenError) as ei:
        run_loadgen([echo_server.grpc_url], "echo_plain", bad, {"min_query_count": 16}, tmp_path / "bad",
                    scenario="Offline", frontends=1, clients_per_frontend=1, warmup_queries=0, max_new_tokens=4,
                    request_timeout_s=30, progress=False)
    assert "'echo_plain'" in str(ei.value) and f"error_token_id {ERROR_TOKEN}" in str(ei.value)
    assert not _lg_children()


def test_request_error_ends_run_naming_server(echo_server, tmp_path):
    samples = _prompts(16)
    samples[7] = [1, ERROR_TOKEN, 2]
    t0 = time.monotonic()
    with pytest.raises(LoadgenError) as ei:
        run_loadgen([echo_server.grpc_url], "echo", samples, {"offline_expected_qps": 100, "min_query_count": 16},
                    tmp_path, scenario="Offline", frontends=1, clients_per_frontend=1, warmup_queries=0,
                    max_new_tokens=4, request_timeout_s=30, progress=False)
    msg = str(ei.value)
    assert echo_server.grpc_url in msg and "'echo'" in msg and f"error_token_id {ERROR_TOKEN}" in msg
    assert ei.value.server == echo_server.grpc_url
    assert time.monotonic() - t0 < 30
    assert not _lg_children()
    with pytest.raises(LoadgenError, match=r"server .*model 'nope'.*cannot connect"):
        run_loadgen([echo_server.grpc_url], "nope", samples[:4], {}, tmp_path / "nope", scenario="Offline",
                    frontends=1, clients_per_frontend=1, request_timeout_s=10, progress=False)


def test_killed_server_ends_run_with_clear_error(echo_server, tmp_path, backend_dir):
    victim = _start_server(tmp_path / "victim", {"echo_slow": {"token_delay_ms": "20"}}, backend_dir)
    shm_prefix = victim.spec.shm_prefix

    def kill_later():
        time.sleep(3.0)
        os.killpg(victim.pid, signal.SIGKILL)  # a crash: no graceful shutdown

    killer = threading.Thread(target=kill_later, daemon=True)
    try:
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(LoadgenError) as ei:
            run_loadgen([echo_server.grpc_url, victim.grpc_url], "echo_slow", _prompts(32),
                        {"server_target_qps": 20, "min_duration_ms": 60_000, "min_query_count": 100},
                        tmp_path / "run", scenario="Server", frontends=2, clients_per_frontend=1,
                        warmup_queries=2, max_new_tokens=MAX_NEW, request_timeout_s=20, progress=False)
        elapsed = time.monotonic() - t0
    finally:
        killer.join(10)
        left = sorted(Path("/dev/shm").glob(shm_prefix + "*"))  # a killed server leaves its regions ...
        CS.stop_server(victim, timeout=5)
    assert left and not list(Path("/dev/shm").glob(shm_prefix + "*"))  # ... and stop_server removes them
    msg = str(ei.value)
    assert victim.grpc_url in msg and echo_server.grpc_url not in msg, msg
    assert ei.value.server == victim.grpc_url
    assert elapsed < 20, f"took {elapsed:.1f}s to notice the dead server"
    assert not _lg_children()
    assert CS.is_ready(echo_server, ["echo"])  # the healthy server was left alone


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match=r"unknown LoadGen setting\(s\) \['server_qps'\]"):
        run_loadgen(["127.0.0.1:1"], "m", [[1]], {"server_qps": 3}, "/tmp/unused", scenario="Server")
    with pytest.raises(ValueError, match="every server needs at least one client"):
        run_loadgen(["a:1", "b:2", "c:3"], "m", [[1]], {}, "/tmp/unused", frontends=1, clients_per_frontend=2)
    with pytest.raises(ValueError, match="scenario must be one of"):
        run_loadgen(["a:1"], "m", [[1]], {}, "/tmp/unused", scenario="MultiStream")
    with pytest.raises(ValueError, match="contradicts"):
        run_loadgen(["a:1"], "m", [[1]], {"scenario": "Server"}, "/tmp/unused", scenario="Offline")
    assert latency_constraints("Interactive", "llama2-70b") == (450.0, 40.0)
    assert latency_constraints("Server", "llama3.1-405b") == (6000.0, 175.0)
    assert latency_constraints("Server", "tiny-llama") == (2000.0, 200.0)
    assert latency_constraints("Offline") is None


def test_samples_become_one_int32_array_with_offsets_and_a_bad_sample_is_named():
    """The QSL's ids in one array (lists, numpy arrays, Sample objects, any iterable), and each kind
    of bad sample refused with its position."""
    from harness.loadgen.runner import _samples_to_arrays

    rng = np.random.default_rng(0)
    seqs = [list(rng.integers(0, 2**31 - 1, size=int(n))) for n in rng.integers(1, 40, size=200)]
    mixed = [np.asarray(s, dtype=np.int32) if i % 3 == 0 else (iter(s) if i % 3 == 1 else s)
             for i, s in enumerate(seqs)]
    flat, offsets = _samples_to_arrays(mixed)
    assert flat.dtype == np.int32 and offsets.dtype == np.int64 and offsets[0] == 0
    assert [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [[int(x) for x in s] for s in seqs]
    samples = [Sample(index=i, input_ids=s, reference_text="") for i, s in enumerate(seqs[:8])]
    flat, offsets = _samples_to_arrays(samples)
    assert flat[offsets[3]:offsets[4]].tolist() == samples[3].input_ids

    for bad, why in (([], "no samples"), ([[1, 2], [], [3]], r"samples\[1\] has no input ids"),
                     ([[1], [2, -1]], r"samples\[1\] has token ids outside INT32"),
                     ([[1], [3], [2**31]], r"samples\[2\] has token ids outside INT32"),
                     ([[1], np.ones((2, 2), dtype=np.int64)], r"samples\[1\] has no input ids")):
        with pytest.raises(ValueError, match=why):
            _samples_to_arrays(bad)
    samples[2].index = 5
    with pytest.raises(ValueError, match=r"samples\[2\]\.index is 5"):
        _samples_to_arrays(samples)
