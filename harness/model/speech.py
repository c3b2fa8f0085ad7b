"""Audio datasets in the reference's LibriSpeech manifest format (speech2text/manifest.py, QSL.py of
mlcommons/inference b66003e1), read and checked before anything is sent.

A manifest is a JSON list of rows: `transcript` (or `text_filepath`), `files` (each with `fname` and
`speed`; the speed-1 file is the clip) and `original_duration` in seconds. As the reference's Manifest:
a row longer than `max_duration` (MAX_DURATION, 30 s) is dropped, so sample i is the i-th row kept; a
row whose transcript is not text is dropped; each clip's path is `os.path.join(audio_dir, fname)` (an
absolute fname stands alone). Every clip is then opened with soundfile: it must be mono at 16 kHz
(the rate the reference loads at), hold as many frames as the row says (`num_samples`, else its
duration at 16 kHz, to a frame), and be no longer than `max_duration`. A bad row is one line naming
the manifest, the row and the field.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError

SAMPLE_RATE = 16000
#: The reference's MAX_DURATION default (QSL.py, accuracy_eval.py): longer rows are dropped.
MAX_DURATION_S = 30.0
AUDIO_SUFFIXES = (".wav", ".flac")


class SpeechDatasetError(InputError):
    """A manifest row or its audio file is missing or malformed; the message names both."""


@dataclass(frozen=True)
class Clip:
    """One kept manifest row: the clip's file, its transcript as the manifest has it, its duration."""

    audio: Path
    transcript: str
    duration: float
    num_samples: int | None
    row: int  # the row's position in the manifest (before rows were dropped)


def _clip_file(row: dict, where: str) -> dict:
    files = row.get("files")
    if not isinstance(files, list) or not files:
        raise SpeechDatasetError(f"{where}: field 'files' must be a list of the clip's files")
    same = [f for f in files if isinstance(f, dict) and f.get("speed") == 1]
    if not same:
        raise SpeechDatasetError(f"{where}: field 'files' has no entry with speed 1 (the clip itself)")
    if not isinstance(same[0].get("fname"), str) or not same[0]["fname"]:
        raise SpeechDatasetError(f"{where}: files[].fname must be the clip's path")
    return same[0]


def read_manifest(path: str | os.PathLike, audio_dir: str | os.PathLike | None = None,
                  max_duration: float = MAX_DURATION_S) -> list[Clip]:
    """The rows the reference's Manifest keeps, in order (no audio is opened)."""
    path = Path(path)
    base = Path(audio_dir) if audio_dir is not None else path.parent
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpeechDatasetError(f"manifest {path}: not a readable JSON manifest ({exc})") from None
    if not isinstance(rows, list):
        raise SpeechDatasetError(f"manifest {path}: expected a JSON list of rows, got {type(rows).__name__}")
    out = []
    for n, row in enumerate(rows):
        where = f"manifest {path} row {n}"
        if not isinstance(row, dict):
            raise SpeechDatasetError(f"{where}: expected an object, got {type(row).__name__}")
        duration = row.get("original_duration")
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0:
            raise SpeechDatasetError(f"{where}: field 'original_duration' must be the clip's length in seconds")
        clip = _clip_file(row, where)
        if duration > max_duration:
            continue  # the reference's max_duration filter
        text = row.get("transcript")
        if text is None and isinstance(row.get("text_filepath"), str):
            text = (base / row["text_filepath"]).read_text(encoding="utf-8").replace("\n", "")
        if not isinstance(text, str):
            continue  # the reference drops it ("It is not a string. Dropping data point")
        samples = clip.get("num_samples", row.get("original_num_samples"))
        out.append(Clip(audio=base / clip["fname"], transcript=text, duration=float(duration),
                        num_samples=int(samples) if isinstance(samples, int) and not isinstance(samples, bool) else None,
                        row=n))
    return out


def check_clip(clip: Clip, where: str, max_duration: float = MAX_DURATION_S) -> dict:
    """Opens the clip with soundfile and checks what the reference assumes of it; returns its facts."""
    import soundfile as sf

    if clip.audio.suffix.lower() not in AUDIO_SUFFIXES:
        raise SpeechDatasetError(f"{where}: {clip.audio.name} is not a WAV or FLAC file")
    if not clip.audio.is_file():
        raise SpeechDatasetError(f"{where}: audio file {clip.audio} does not exist")
    try:
        info = sf.info(str(clip.audio))
    except (RuntimeError, sf.LibsndfileError) as exc:
        raise SpeechDatasetError(f"{where}: {clip.audio} is not readable audio ({exc})") from None
    if info.samplerate != SAMPLE_RATE:
        raise SpeechDatasetError(f"{where}: {clip.audio.name} is {info.samplerate} Hz; the benchmark's clips are "
                                 f"{SAMPLE_RATE} Hz (resample them, as MLCommons' conversion does)")
    if info.channels != 1:
        raise SpeechDatasetError(f"{where}: {clip.audio.name} has {info.channels} channels; the clips are mono")
    expected = clip.num_samples if clip.num_samples is not None else round(clip.duration * SAMPLE_RATE)
    if abs(info.frames - expected) > (0 if clip.num_samples is not None else 1):
        raise SpeechDatasetError(f"{where}: {clip.audio.name} holds {info.frames} frames, the manifest says "
                                 f"{expected} ({'num_samples' if clip.num_samples is not None else 'original_duration'});"
                                 " is it the clip the row names?")
    if info.frames / SAMPLE_RATE > max_duration:
        raise SpeechDatasetError(f"{where}: {clip.audio.name} lasts {info.frames / SAMPLE_RATE:.2f} s, over "
                                 f"{max_duration:g} s")
    return {"frames": int(info.frames), "format": info.format, "subtype": info.subtype}


def speech_clips(manifest: str | os.PathLike) -> list[tuple]:
    """(16 kHz float32 samples, transcript) of every kept, checked clip of `manifest` (what the tiny
    Whisper is taught)."""
    import soundfile as sf

    out = []
    for clip in read_manifest(manifest):
        check_clip(clip, f"manifest {manifest} row {clip.row}")
        out.append((sf.read(str(clip.audio), dtype="float32")[0], clip.transcript))
    return out
