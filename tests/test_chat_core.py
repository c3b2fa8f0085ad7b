"""The chat completions core (/v1/chat/completions) against real servers: `transformers serve` on CPU
beside a bare aiohttp chat client, and the echo server (reasoning deltas, images hashed as they
arrive, tools, a server that sends no usage)."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from harness.errors import InputError
from harness.loadgen import run_loadgen
from harness.loadgen.openai_chat_api import chat_parts
from harness.model.datasets import Sample
from harness.model.tiny import train_tokenizer
from harness.serving.openai import chat
from harness.serving.openai.client import probe
from harness.serving.ports import free_port

SETTINGS = {"offline_expected_qps": 100, "server_target_qps": 20, "min_duration_ms": 0, "min_query_count": 6,
            "performance_sample_count": 6}
TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {% if m['content'] is string %}{{ m['content'] }}"
            "{% else %}{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}"
            "{% endfor %}{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def _wait(url: str, proc, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe(url):
        assert proc.poll() is None, f"server exited with {proc.returncode}"
        assert time.monotonic() < deadline, "server not ready"
        time.sleep(0.2)


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory) -> Path:
    """A seeded, untrained tiny Llama with a chat template: what `transformers serve` needs for chat."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny_chat")
    tok = train_tokenizer(384, out, [f"tell me about item {i} é t{i} r{i}" for i in range(200)], corpus=False)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def _echo(*flags: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port), *flags],
                            cwd=REPO)
    url = f"127.0.0.1:{port}"
    _wait(url, proc, 30)
    return url, proc


def _samples(rows: list[dict]) -> list[Sample]:
    return [Sample(i, [1, 2, 3], meta={"columns": row}) for i, row in enumerate(rows)]


def _texts(n: int) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"tell me about item {i} é"}]} for i in range(n)]


def _run(url, rows, tmp_path, *, kind="vllm", scenario="Server", mode="AccuracyOnly", tokens=8, tokenizer=None,
         log="text", in_flight=8):
    samples = _samples(rows)
    api = {"kind": kind, "log": log, **({"tokenizer": str(tokenizer)} if tokenizer else {})}
    r = run_loadgen([url], "", samples, {**SETTINGS, "min_query_count": len(rows),
                                         "performance_sample_count": len(rows)},
                    tmp_path, scenario=scenario, mode=mode, frontends=1, clients_per_frontend=1,
                    warmup_queries=1, max_new_tokens=tokens, progress=False, protocol="openai-chat",
                    prompt_texts=chat_parts(samples, kind), api=api, max_in_flight=in_flight)
    entries = json.loads((tmp_path / "mlperf_log_accuracy.json").read_text()) if mode == "AccuracyOnly" else []
    raw = {e["qsl_idx"]: (bytes.fromhex(e["data"]), e.get("token_count")) for e in entries}
    logged = {k: (data.decode() if log == "text" else data, n) for k, (data, n) in raw.items()}
    return r, logged, chat.read_answers(tmp_path)


def _bare_chat(url: str, bodies: list[bytes]) -> list[dict]:
    """A bare aiohttp chat client: one request at a time, the first event with output text is the
    first token, usage.completion_tokens the count."""
    import aiohttp

    async def main():
        out = []
        async with aiohttp.ClientSession() as s:
            for body in bodies:
                t0 = time.monotonic_ns()
                first, content, usage, buf = None, [], None, b""
                async with s.post(f"http://{url}/v1/chat/completions", data=body,
                                  headers={"Content-Type": "application/json"}) as r:
                    assert r.status == 200, await r.text()
                    async for chunk in r.content.iter_any():
                        buf += chunk
                        while b"\n\n" in buf:
                            ev, buf = buf.split(b"\n\n", 1)
                            if not ev.startswith(b"data:") or ev[5:].strip() == b"[DONE]":
                                continue
                            obj = json.loads(ev[5:])
                            if obj.get("usage"):
                                usage = obj["usage"]["completion_tokens"]
                            for c in obj.get("choices") or ():
                                d = c.get("delta") or {}
                                if (d.get("content") or d.get("reasoning_content")) and first is None:
                                    first = time.monotonic_ns() - t0
                                content.append(d.get("content") or "")
                out.append({"ttft_ns": first, "content": "".join(content), "usage": usage})
        return out

    return asyncio.run(main())


def test_chat_core_matches_a_bare_aiohttp_client_on_transformers_serve(tiny_chat_model, tmp_path):
    """Through a real `transformers serve`, the chat core logs the same answer text and token count as a
    bare aiohttp chat client for every sample, counts from the server's usage (and says so), and its
    first-token latency is the bare client's to within the noise of a shared host."""
    port = free_port()
    exe = Path(sys.executable).parent / "transformers"
    proc = subprocess.Popen([str(exe), "serve", str(tiny_chat_model), "--device", "cpu", "--host", "127.0.0.1",
                             "--port", str(port), "--dtype", "float32"], cwd=tmp_path,
                            env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"127.0.0.1:{port}"
    try:
        _wait(url, proc, 180)
        rows = _texts(6)
        r, logged, answers = _run(url, rows, tmp_path / "core", kind="transformers", tokens=12, in_flight=1)
        run = chat.run_part("transformers", "", 12, True)
        bare = _bare_chat(url, [chat.body(run, p) for p in chat_parts(_samples(rows), "transformers")])
    finally:
        _stop(proc)
    assert r["harness"]["methods"]["output_tokens"] == "usage"
    for i, b in enumerate(bare):
        assert logged[i][0] == b["content"] == answers[i]["content"]
        assert logged[i][1] == max(b["usage"], 2) and answers[i]["completion_tokens"] == max(b["usage"], 2)
    bare_ttft_ms = sorted(b["ttft_ns"] for b in bare)[len(bare) // 2] / 1e6
    assert 0 < r["ttft_ms"]["p50"] < 3 * bare_ttft_ms + 50
    assert r["ttft_ms"]["p50"] > bare_ttft_ms / 3


def test_a_reasoning_delta_is_the_first_token_and_stays_apart(tmp_path):
    """The first reasoning_content delta is the first token (not the empty role chunk before it, nor the
    first content delta after it); reasoning and content are kept apart in chat_answers, and LoadGen logs
    the reasoning then the content (what MLCommons' endpoints client scores)."""
    url, proc = _echo("--reasoning-tokens", "6", "--token-delay-ms", "40")
    try:
        r, logged, answers = _run(url, _texts(3), tmp_path)
    finally:
        _stop(proc)
    assert 35 <= r["ttft_ms"]["p50"] < 200  # first reasoning delta ~40 ms; first content ~280 ms
    for i in range(3):
        assert answers[i]["reasoning_content"].count(" r") == 6 and " r" not in answers[i]["content"]
        assert logged[i][0] == answers[i]["reasoning_content"] + answers[i]["content"]
        assert answers[i]["content"].count(" t") == 2 and logged[i][0].count(" r") == 6
        assert logged[i][1] == 8  # usage counts every generated token, reasoning included


def test_a_reasoning_benchmark_logs_the_token_ids_of_reasoning_then_content(tiny_chat_model, tmp_path):
    """Logged as token ids (deepseek-r1's and gpt-oss-120b's scripts read ids): the ids of the reasoning
    followed by the content, so the script sees the whole generation and tokens per sample count it."""
    from transformers import AutoTokenizer

    url, proc = _echo("--reasoning-tokens", "5")
    try:
        _, logged, answers = _run(url, _texts(3), tmp_path, tokenizer=tiny_chat_model, log="token_ids")
    finally:
        _stop(proc)
    tok = AutoTokenizer.from_pretrained(tiny_chat_model)
    for i in range(3):
        whole = answers[i]["reasoning_content"] + answers[i]["content"]
        assert answers[i]["reasoning_content"].count(" r") == 5
        ids = np.frombuffer(logged[i][0], dtype=np.int32).tolist()
        assert ids == tok.encode(whole, add_special_tokens=False)
        assert tok.decode(ids).count(" r") == 5


def test_image_parts_arrive_byte_identical(tmp_path):
    """An image part reaches the server byte for byte: a data URL's bytes (every byte value, a PNG
    header, nothing re-encoded) and a plain URL hash at the server to what the dataset holds."""
    images = [bytes(range(256)) * 3 + b"\x89PNG\r\n\x1a\n", os.urandom(5000)]
    url_img = "https://example.invalid/img/ü.png?x=1&y=%20"
    rows = [{"messages": [
        {"role": "system", "content": "describe"},
        {"role": "user", "content": [
            {"type": "text", "text": f"item {i} \u2603"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(img).decode()}},
            {"type": "image_url", "image_url": {"url": url_img}}]}]} for i, img in enumerate(images)]
    url, proc = _echo()
    try:
        _, logged, _ = _run(url, rows, tmp_path, scenario="Offline")
    finally:
        _stop(proc)
    for i, img in enumerate(images):
        want = f"[sha256:{hashlib.sha256(img).hexdigest()}][sha256:{hashlib.sha256(url_img.encode()).hexdigest()}]"
        assert logged[i][0].startswith(want)


def test_tool_calls_are_logged_and_counts_fall_back_to_the_tokenizer(tiny_chat_model, tmp_path):
    """Tools pass through and the call the server returns is logged; with no usage from the server, counts
    come from the tokenizer over everything generated, and result.json says so."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    rows = [{**r, "tools": tools} for r in _texts(2)]
    url, proc = _echo("--no-usage")
    try:
        r, logged, answers = _run(url, rows, tmp_path, tokenizer=tiny_chat_model)
    finally:
        _stop(proc)
    assert r["harness"]["methods"]["output_tokens"] == "tokenizer"
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tiny_chat_model)
    for i in range(2):
        call = answers[i]["tool_calls"]
        assert call == [{"id": "call_0", "name": "get_weather", "arguments": json.dumps({"echo": 8})}]
        generated = answers[i]["content"] + call[0]["name"] + call[0]["arguments"]
        assert answers[i]["counted_by"] == "tokenizer"
        assert logged[i][1] == len(tok.encode(generated, add_special_tokens=False))


def test_tool_choice_is_refused_for_transformers_serve_before_anything_is_sent():
    """transformers serve answers tool_choice with 422: the row and field are named before the run."""
    rows = [{"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"}]
    with pytest.raises(InputError, match="dataset row 0: tool_choice"):
        chat_parts(_samples(rows), "transformers")
    assert b'"tool_choice":"auto"' in chat_parts(_samples(rows), "vllm")[0]


@pytest.mark.parametrize("event, first", [
    (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n', False),
    (b'data: {"choices":[{"delta":{"content":null}}]}\n\n', False),
    (b'data: {"choices":[{"delta":{"tool_calls":[]}}]}\n\n', False),
    (b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n', True),
    (b'data: {"choices":[{"delta":{"content":"\\n"}}]}\n\n', True),
    (b'data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}\n\n', True),
    (b'data: {"choices":[{"delta":{"reasoning": "hm"}}]}\n\n', True),
    (b'data: {"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}\n\n', True),
])
def test_first_output_scan(event, first):
    """Only a delta that carries output is a first token: empty or null content and empty tool lists are not."""
    assert bool(chat.FIRST_OUTPUT.search(event)) is first


def test_usage_scan_takes_the_last_count_and_ignores_text():
    """The count is the last usage sent; text that mentions completion_tokens (escaped inside a string)
    is not usage; no usage is None."""
    region = (b'data: {"choices":[{"delta":{"content":"\\"completion_tokens\\": 99"}}],"usage":null}\n\n'
              b'data: {"choices":[],"usage":{"completion_tokens":3}}\n\n'
              b'data: {"choices":[],"usage":{"completion_tokens":7}}\n\n')
    assert chat.usage_tokens(region) == 7
    assert chat.usage_tokens(region.split(b"\n\n")[0]) is None
