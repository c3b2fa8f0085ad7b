"""The transcription core (/v1/audio/transcriptions) against the echo transcription server, vLLM's way
and transformers serve's, streamed and not: every clip uploaded intact (the echo's first word is the
hash of the bytes it received), LoadGen's accuracy log holding int64 label indices of the text as the
reference SUT logs them, n_tokens from usage where the server sends it, else re-tokenized plus the end
token. transformers serve itself answers the core in tests/test_whisper_fullrun.py."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from echo_servers import TRANSCRIPTION, start_echo

from harness.errors import InputError
from harness.loadgen import run_loadgen
from harness.loadgen.openai_transcription_api import transcription_api
from harness.mlperf.benchmarks.whisper import LABELS
from harness.model.corpus import SPEECH_STANDIN
from harness.model.datasets import Sample
from harness.model.tiny_whisper import train_tokenizer
from harness.serving.openai import transcription as tr

CLIPS = sorted((SPEECH_STANDIN.parent / "audio").glob("*.flac"))[:6]
WORDS = 5


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer([f"w{k} {hashlib.sha256(c.read_bytes()).hexdigest()[:16]}" for k in range(WORDS) for c in CLIPS],
                    out, 300).save_pretrained(out)
    return out


def _echo(style: str):
    return start_echo(TRANSCRIPTION, "--words", str(WORDS), "--style", style)


def _samples() -> list[Sample]:
    return [Sample(index=i, input_ids=[1, 2, 3, 4], reference_text="x", meta={"columns": {"audio": str(c)}})
            for i, c in enumerate(CLIPS)]


@pytest.mark.parametrize("style, stream", [("vllm", True), ("transformers", True)])  # whole answers: below
def test_every_clip_arrives_and_is_logged_as_the_reference_logs_it(tmp_path, tokenizer, style, stream):
    url, proc = _echo(style)
    try:
        samples = _samples()
        params = type("P", (), {"openai": type("O", (), {"server": "vllm" if style == "vllm" else "transformers"})})
        api, clips = transcription_api(params, samples, tokenizer)
        r = run_loadgen([url], "m", samples, {"offline_expected_qps": 100, "min_duration_ms": 0,
                                             "min_query_count": len(samples), "performance_sample_count": len(samples)},
                        tmp_path, scenario="Offline", mode="AccuracyOnly", frontends=1, clients_per_frontend=1,
                        warmup_queries=1, max_new_tokens=200, progress=False, protocol="openai-transcription",
                        prompt_texts=clips, api=api, max_in_flight=2, streaming=stream)
    finally:
        proc.terminate()
        proc.wait(10)
    entries = json.loads((tmp_path / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(len(CLIPS)))
    for e in entries:
        labels = np.frombuffer(bytes.fromhex(e["data"]), dtype="<i8")
        text = "".join(LABELS[int(c)] for c in labels)
        sha = hashlib.sha256(CLIPS[e["qsl_idx"]].read_bytes()).hexdigest()[:16]
        assert text == f"{sha} " + " ".join(f"w{k}" for k in range(1, WORDS))  # stripped, as the reference
        assert e["token_count"] >= WORDS  # the words (one token or more each) and the end token
    methods = r["harness"]["methods"]
    assert methods["output_tokens"] == ("usage" if style == "vllm" and stream else "tokenizer+end")
    if style == "vllm" and stream:
        assert {e["token_count"] for e in entries} == {WORDS + 1}  # the server's completion_tokens


def test_forms_hold_only_what_each_server_takes():
    b = tr.boundary("0")
    vllm = dict(tr.form_fields("vllm", "whisper", 200, True))
    assert vllm == {"model": "whisper", "language": "en", "temperature": "0", "response_format": "json",
                    "max_completion_tokens": "200", "stream": "true", "stream_include_usage": "true"}
    assert dict(tr.form_fields("transformers", "/m", 200, False)) == {"model": "/m", "stream": "false"}
    body = tr.multipart([("model", "m")], "a.flac", b"\x00\x01audio", b)
    assert body.startswith(f"--{b}\r\n".encode()) and body.endswith(f"\r\n--{b}--\r\n".encode())
    assert b'filename="a.flac"\r\nContent-Type: audio/flac\r\n\r\n\x00\x01audio\r\n' in body


def test_whole_answers_of_both_servers():
    assert tr.whole_answer(b'{"text":" hi","usage":{"type":"duration","seconds":3}}') == tr.Transcript(" hi", None)
    assert tr.whole_answer(b'{"text":" hi"}') == tr.Transcript(" hi", None)
    with pytest.raises(RuntimeError, match="not a transcription"):
        tr.whole_answer(b'{"detail":"x"}')


def test_stream_pieces_of_both_servers():
    assert tr.stream_piece('{"choices":[{"delta":{"content":" hi"}}]}') == (" hi", None)
    assert tr.stream_piece('{"choices":[],"usage":{"completion_tokens":7}}') == ("", 7)
    assert tr.stream_piece(" {raw text") == (" {raw text", None)
    with pytest.raises(RuntimeError, match="server error: boom"):
        tr.stream_piece('{"error": "boom"}')


def test_a_sample_without_a_clip_is_refused():
    params = type("P", (), {"openai": type("O", (), {"server": "vllm"})})
    with pytest.raises(InputError, match="no audio clip"):
        transcription_api(params, [Sample(index=0, input_ids=[1])], "tok")
