"""OpenAI `/v1/audio/transcriptions` as perfdag sends and reads it: one multipart form per clip, built
once, and what the answer (whole, or streamed) holds.

The clip goes as its file's bytes (`file`, with a filename whose suffix says the format: servers decode
it themselves, resampling to their model's rate: vLLM with librosa, transformers serve with soundfile
and soxr). The other fields differ per server, and each accepts only its own:

- vLLM: `model`, `language` (en, the reference's prompt), `temperature` 0, `max_completion_tokens` (the
  reference's 200), `response_format` json; streamed with `stream` and `stream_include_usage`, its
  events are `transcription.chunk` objects (`choices[0].delta.content`) and a last one with
  `usage.completion_tokens`, the token ids it generated (what the reference returns as n_tokens).
- transformers serve: `file`, `model` (the path it was launched with: it loads the model the form
  names) and `stream`; it refuses any field outside OpenAI's parameters (422), ignores language and
  temperature, takes no output bound (its generation config's max_length applies) and never sends
  usage. Streamed, each event's data is raw text, not JSON; an error is `{"error": ...}`.

Where no usage came, the count is the text re-tokenized with the model's tokenizer plus the end token
the model generated (vLLM's token_ids hold it; `counted_as` says which way a run counted).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
#: Suffix -> the upload's content type.
CONTENT_TYPES = {".wav": "audio/wav", ".flac": "audio/flac"}


def form_fields(kind: str, model: str, max_tokens: int, stream: bool) -> list[tuple[str, str]]:
    """The form's text fields for a server `kind` (the file goes last)."""
    if kind == "transformers":
        return [("model", model), ("stream", "true" if stream else "false")]
    fields = [("model", model), ("language", "en"), ("temperature", "0"), ("response_format", "json"),
              ("max_completion_tokens", str(int(max_tokens)))]
    if stream:
        fields += [("stream", "true"), ("stream_include_usage", "true")]
    return [(k, v) for k, v in fields if v != "" or k != "model"]


def boundary(tag: str) -> str:
    """A multipart boundary: a fixed ASCII tag that no audio file's bytes are checked against here, long
    and odd enough that a clip holding it (as CRLF, two dashes and all) is not a concern in practice."""
    return f"----perfdag-transcription-{tag}-7c1f9a2e4b"


def multipart(fields: list[tuple[str, str]], filename: str, audio: bytes, bound: str) -> bytes:
    """A multipart/form-data body: the text fields, then the clip as `file`."""
    suffix = filename[filename.rfind("."):].lower()
    parts = [f'--{bound}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields]
    parts.append((f'--{bound}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                  f"Content-Type: {CONTENT_TYPES.get(suffix, 'application/octet-stream')}\r\n\r\n").encode())
    return b"".join(parts) + audio + f"\r\n--{bound}--\r\n".encode()


def content_type(bound: str) -> str:
    return f"multipart/form-data; boundary={bound}"


@dataclass
class Transcript:
    text: str
    usage: int | None  # completion tokens where the server said


def whole_answer(body: bytes) -> Transcript:
    """A non-streamed answer: `{"text": ..., "usage": ...}` (usage in tokens only where the server gives them)."""
    doc = json.loads(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
        raise RuntimeError(f"not a transcription: {body[:200]!r}")
    usage = doc.get("usage") or {}
    tokens = usage.get("output_tokens", usage.get("completion_tokens")) if isinstance(usage, dict) else None
    return Transcript(doc["text"], int(tokens) if isinstance(tokens, int) else None)


def stream_piece(data: str) -> tuple[str, int | None]:
    """One streamed event's (text, completion tokens): a vLLM chunk object, or transformers serve's raw
    text. An error event raises with the server's words."""
    if data.startswith("{"):
        try:
            doc = json.loads(data)
        except ValueError:
            return data, None  # text that happens to start with a brace
        if isinstance(doc, dict):
            if "error" in doc and not doc.get("choices"):
                raise RuntimeError(f"server error: {doc['error']}")
            text = "".join(((c.get("delta") or {}).get("content") or "") for c in doc.get("choices") or ()
                           if isinstance(c, dict))
            usage = doc.get("usage") or {}
            n = usage.get("completion_tokens") if isinstance(usage, dict) else None
            return text, int(n) if isinstance(n, int) else None
    return data, None
