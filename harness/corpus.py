"""The text shipped with perfdag: it trains the tiny model, calibrates quantization and makes the
built-in dataset. Its content hash enters the keys of what it shapes."""
from __future__ import annotations

import hashlib
from pathlib import Path

CORPUS = Path(__file__).with_name("data") / "corpus.txt"


def corpus_lines() -> list[str]:
    return [ln for ln in CORPUS.read_text().splitlines() if ln.strip()]


def corpus_sha256() -> str:
    return hashlib.sha256(CORPUS.read_bytes()).hexdigest()
