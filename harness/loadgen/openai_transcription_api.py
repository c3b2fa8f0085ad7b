"""What the transcription core is told: the server kind, the tokenizer that counts tokens where the server
sends no count, and each sample's clip (in place of prompt texts). The openai-transcription protocol's
record (serving/protocols.py) names these."""
from __future__ import annotations

from harness.errors import InputError


def transcription_api(params, samples, tokenizer_dir) -> tuple[dict, list[str]]:
    """The core's settings, and each sample's clip path (its `audio` column: PrepareDataset's copy)."""
    clips = []
    for s in samples:
        audio = getattr(s, "meta", {}).get("columns", {}).get("audio")
        if not isinstance(audio, str):
            raise InputError(f"sample {s.index}: no audio clip to transcribe; use an audio dataset "
                             "(dataset.format: librispeech) with openai.api transcriptions")
        clips.append(audio)
    return {"kind": params.openai.server, "tokenizer": str(tokenizer_dir), "log": "labels"}, clips


def transcription_request_settings(params) -> dict:
    """What enters a transcription measurement's key beside the core's code."""
    return {"openai": {"server": params.openai.server, "api": "transcriptions", "log": "labels"}}
