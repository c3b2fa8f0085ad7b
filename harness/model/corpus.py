"""The text shipped with perfdag: it trains the tiny model, calibrates quantization and makes the
built-in dataset. Its content hash enters the keys of what it shapes."""
from __future__ import annotations

import hashlib
from pathlib import Path

from harness import DATA

CORPUS = DATA / "corpus.txt"


def corpus_lines() -> list[str]:
    return [ln for ln in CORPUS.read_text().splitlines() if ln.strip()]


def corpus_sha256() -> str:
    return hashlib.sha256(CORPUS.read_bytes()).hexdigest()


STANDINS = DATA / "standins"


def standin_path(benchmark: str) -> Path:
    """The shipped stand-in dataset of an MLPerf benchmark (harness/data/make_standins.py)."""
    return STANDINS / f"{benchmark}.jsonl"


def standin_rows(benchmark: str) -> list[dict]:
    import json

    return [json.loads(ln) for ln in standin_path(benchmark).read_text(encoding="utf-8").splitlines() if ln.strip()]


def standins_sha256(benchmarks) -> dict[str, str]:
    return {b: hashlib.sha256(standin_path(b).read_bytes()).hexdigest() for b in benchmarks}


#: The whisper stand-in: the reference's manifest format, clips under audio/ (harness/data/make_whisper_standin.py).
SPEECH_STANDIN = STANDINS / "whisper" / "manifest.json"


def speech_standin_sha256() -> str:
    """The whisper stand-in's manifest and every clip, by content."""
    root = SPEECH_STANDIN.parent
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()
