"""OpenAI chat completions as perfdag sends and reads them: request bodies, and what a stream holds.

A request is encoded once per sample: the sample's part (`messages`, and `tools` / `tool_choice`
where its row has them) as JSON bytes, spliced after the run's part (model, max_tokens, greedy,
stream). Image parts go as the dataset has them (`image_url` with a data URL or a URL): perfdag
never decodes, resizes or re-encodes an image, and JSON encoding keeps a data URL's bytes as they
are (base64 has nothing to escape).

A streamed answer is read as bytes: the first event whose delta carries non-empty `content`,
`reasoning_content` (`reasoning`, as newer vLLM calls it) or a tool call is the first token;
`usage.completion_tokens` (the last one sent) is the token count. Only where the text is needed
(accuracy runs, or a server that sent no usage) are the events decoded: `Answer` keeps content,
reasoning and tool calls apart.

Servers differ in what they accept: transformers serve refuses `stream_options` and `tool_choice`
(422) and always sends usage in its last event; vLLM, SGLang and trtllm-serve send usage in a
stream only when asked (`stream_options.include_usage`).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from dataclasses import dataclass, field

from harness.serving.openai.sse import DONE, SSEParser
from harness.serving.openai.toolcalls import as_openai, merge_piece, merge_stream, new_slot

#: Servers that take `stream_options` (and send no usage in a stream without it) and `tool_choice`.
USAGE_ON_REQUEST = ("trtllm-serve", "vllm", "sglang")
#: A delta that is output: non-empty content or reasoning text, or a tool call.
FIRST_OUTPUT = re.compile(rb'"(?:content|reasoning_content|reasoning)"\s*:\s*"[^"]|"tool_calls"\s*:\s*\[\s*\{')
COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')


def sample_part(messages: list, tools: list | None = None, tool_choice=None) -> bytes:
    """The per-sample part of a request body, encoded once: `"messages":[...]` (and tools)."""
    doc = {"messages": messages}
    if tools:
        doc["tools"] = tools
    if tool_choice is not None:
        doc["tool_choice"] = tool_choice
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()[1:-1]


def run_part(kind: str, model: str, max_tokens: int, stream: bool) -> bytes:
    """The part every request of a run shares: model, output bound, greedy decoding, streaming."""
    doc = {"max_tokens": int(max_tokens), "temperature": 0, "stream": bool(stream)}
    if model:
        doc["model"] = model
    if stream and kind in USAGE_ON_REQUEST:
        doc["stream_options"] = {"include_usage": True}
    return json.dumps(doc, separators=(",", ":")).encode()[1:-1]


def body(run: bytes, sample: bytes) -> bytes:
    return b"{" + run + b"," + sample + b"}"


def usage_tokens(region: bytes) -> int | None:
    """The last `completion_tokens` in a stretch of events (None: the server sent no usage)."""
    found = None
    for m in COMPLETION_TOKENS.finditer(region):
        found = int(m.group(1))
    return found


@dataclass
class Answer:
    """A decoded chat answer: content, reasoning and tool calls kept apart."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict] = field(default_factory=dict)
    usage: int | None = None

    def add(self, obj: dict) -> None:
        if "error" in obj and not obj.get("choices"):
            raise RuntimeError(f"server error: {obj['error']}")
        if isinstance(obj.get("usage"), dict) and obj["usage"].get("completion_tokens") is not None:
            self.usage = int(obj["usage"]["completion_tokens"])
        for choice in obj.get("choices") or ():
            part = choice.get("delta") or choice.get("message") or {}
            if part.get("content"):
                self.content.append(part["content"])
            reasoning = part.get("reasoning_content") or part.get("reasoning")
            if reasoning:
                self.reasoning.append(reasoning)
            if "delta" in choice:
                merge_stream(self.tool_calls, part.get("tool_calls"))
            else:  # a whole message's calls are its list, in order
                for call in part.get("tool_calls") or ():
                    self.tool_calls[len(self.tool_calls)] = slot = new_slot()
                    merge_piece(slot, call)

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    def calls(self) -> list[dict]:
        return [self.tool_calls[k] for k in sorted(self.tool_calls)]

    def scored(self) -> str:
        """What MLCommons' endpoints client scores for a chat answer: its tool calls as a JSON list of
        OpenAI tool calls when there are any (bfcl_v4_scorer.py), else its reasoning then its content."""
        if self.tool_calls:
            return json.dumps(as_openai(self.tool_calls), ensure_ascii=False)
        return self.reasoning_text + self.text

    def generated_text(self) -> str:
        """Everything the model generated, for a tokenizer's count: reasoning, content, tool calls."""
        return self.reasoning_text + self.text + "".join(c["name"] + c["arguments"] for c in self.calls())


def decode(raw: bytes, streamed: bool) -> Answer:
    """A whole answer (a stream's bytes, or a non-streamed JSON body) decoded."""
    answer = Answer()
    if not streamed:
        answer.add(json.loads(raw))
        return answer
    parser = SSEParser()
    for data in parser.feed(raw) + parser.close():
        if data != DONE:
            answer.add(json.loads(data))
    return answer


def raise_errors(region: bytes) -> None:
    """An event that is an error object (no choices) ends the request with the server's words."""
    parser = SSEParser()
    for data in parser.feed(region) + parser.close():
        if data == DONE:
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        if isinstance(obj, dict) and "error" in obj and not obj.get("choices"):
            raise RuntimeError(f"server error: {obj['error']}")


def read_answers(out_dir) -> dict[int, dict]:
    """An accuracy run's decoded answers (content, reasoning, tool calls) by sample, from every client."""
    out: dict[int, dict] = {}
    for path in sorted(Path(out_dir).glob("chat_answers.*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            out[int(rec["sample"])] = rec
    return out
