"""What the chat core is told: each sample's request part (messages, images, tools), encoded once, and
how answers are logged. The openai-chat protocol's record (serving/protocols.py) names these."""
from __future__ import annotations

from harness.errors import InputError
from harness.mlperf import benchmarks
from harness.serving.openai.chat import sample_part


def chat_messages(sample, system_prompt: str = "") -> list:
    """A sample's conversation: its row's `messages` as they are (images and all), else its prompt
    text as one user message, after the benchmark's system prompt where it has one."""
    cols = getattr(sample, "meta", {}).get("columns", {})
    if cols.get("messages") is not None:
        return list(cols["messages"])
    text = sample.input_text if getattr(sample, "input_text", None) is not None else cols.get("input")
    if text is None:
        raise InputError(f"sample {sample.index}: neither messages nor input text to send as a chat; give the "
                         "dataset rows a `messages` list or an `input` text")
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + \
        [{"role": "user", "content": text}]


def chat_parts(samples, kind: str, system_prompt: str = "") -> list[bytes]:
    """Each sample's request part (messages, tools, tool_choice), encoded once."""
    parts = []
    for s in samples:
        cols = getattr(s, "meta", {}).get("columns", {})
        if kind == "transformers" and cols.get("tool_choice") is not None:
            raise InputError(f"dataset row {s.index}: tool_choice: transformers serve refuses it (HTTP 422); remove "
                             "it or serve with openai.server=vllm, sglang or trtllm-serve")
        parts.append(sample_part(chat_messages(s, system_prompt), cols.get("tools"), cols.get("tool_choice")))
    return parts


def chat_api(params, samples, tokenizer_dir) -> tuple[dict, list[bytes]]:
    """The chat core's settings, and each sample's encoded request part (in place of prompt texts)."""
    name = benchmarks.canonical_name(params.loadgen.mlperf_model)
    system = benchmarks.REGISTRY[name].system_prompt if name else ""
    api = {"kind": params.openai.server, "log": benchmarks.accuracy_log_of(params.loadgen.mlperf_model), "tokenizer": str(tokenizer_dir)}
    return api, chat_parts(samples, params.openai.server, system)


def chat_request_settings(params) -> dict:
    """What enters a chat measurement's key beside the core's code."""
    return {"openai": {"server": params.openai.server, "api": "chat", "log": benchmarks.accuracy_log_of(params.loadgen.mlperf_model)}}
