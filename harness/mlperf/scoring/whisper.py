"""whisper (LibriSpeech): `speech2text/accuracy_eval.py` of mlcommons/inference at b66003e1, reproduced.

- Every log entry is scored, in log order, repeats included (no de-duplication). Its `data` is read as
  the SUT's int64 label indices ('q'; the script's `--output_dtype int32` is array type 'l', 8 bytes
  on Linux too) and spelled with the 42 LABELS. An index outside them ends the script with a KeyError:
  here it is refused, naming the entry.
- The reference is the manifest transcript of the entry's qsl_idx with every character outside LABELS
  dropped (the Manifest's parse_transcript): upper case included, so transcripts are lower-cased when
  converted (harness/model/converters/librispeech.py), as MLCommons' preprocessing does.
- Both sides go through whisper's EnglishTextNormalizer (the script imports it from openai-whisper;
  here transformers' port of the same class, with the same British-to-American spelling table:
  whisper_normalizer's english.json, byte-identical to openai-whisper 20250625's), then are split on
  whitespace.
- helpers.py's alignment: walking both word lists, where words differ, a reference word equal to up
  to 3 hypothesis words run together (or the reverse) counts as one aligned word; the aligned lists'
  Levenshtein distance is the entry's errors, its reference word count its words.
- WER = total errors / total words over all entries; accuracy = (1 - WER) x 100, the checker's
  ACCURACY (gate (100 - 2.0671) x 0.99). No reference words at all is a ZeroDivisionError in the
  script: refused here in one line.
"""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np

from harness.mlperf.benchmarks.whisper import LABELS, manifest_transcript
from harness.mlperf.scoring.common import LogEntryError, first_entries, text_values

REQUIRED_COLUMNS = ("output",)
METRICS = ("accuracy", "wer")
#: The log holds characters as label indices; every entry is scored.
LOG = "labels"
EVERY_ENTRY = True
#: How the reference SUT packs the indices ('q').
LABEL_DTYPE = np.dtype("<i8")
#: The most words run together that the alignment takes as one (helpers.py: range(1, 4)).
MAX_JOINED = 3


@lru_cache(maxsize=1)
def normalizer():
    """whisper's EnglishTextNormalizer (transformers' port) with whisper's spelling table."""
    from importlib.resources import files

    try:
        from transformers.models.whisper.english_normalizer import EnglishTextNormalizer
        table = files("whisper_normalizer").joinpath("normalizers/english.json")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise LogEntryError(f"scoring whisper needs {exc.name}: pip install -e '.[speech]'") from None
    return EnglishTextNormalizer(json.loads(table.read_text(encoding="utf-8")))


def levenshtein(a: list[str], b: list[str]) -> int:
    """Word-level edit distance (insertions, deletions, substitutions, each 1)."""
    from rapidfuzz.distance import Levenshtein

    return int(Levenshtein.distance(a, b))


def aligned_errors(hypothesis: list[str], reference: list[str]) -> tuple[int, int]:
    """(errors, reference words) of one entry, with helpers.py's concatenation rule."""
    ref_out: list[str] = []
    hyp_out: list[str] = []
    i = j = 0
    while i < len(reference) and j < len(hypothesis):
        take = (1, 1)
        if reference[i] != hypothesis[j]:
            for k in range(1, MAX_JOINED + 1):  # reference words joined first, then hypothesis words, per k
                if i + k <= len(reference) and "".join(reference[i:i + k]) == hypothesis[j]:
                    take = (k, 1)
                    break
                if j + k <= len(hypothesis) and "".join(hypothesis[j:j + k]) == reference[i]:
                    take = (1, k)
                    break
        ref_out.append("".join(reference[i:i + take[0]]))
        hyp_out.append("".join(hypothesis[j:j + take[1]]))
        i, j = i + take[0], j + take[1]
    ref_out += reference[i:]
    hyp_out += hypothesis[j:]
    return levenshtein(ref_out, hyp_out), len(reference)


def labels_text(labels: np.ndarray, where: str) -> str:
    bad = labels[(labels < 0) | (labels >= len(LABELS))]
    if bad.size:
        raise LogEntryError(f"{where}: label index {int(bad[0])} is not one of the {len(LABELS)} characters "
                            "(is this a whisper log? it holds int64 label indices)")
    return "".join(LABELS[int(c)] for c in labels)


def entries_text(log_entries, num_rows: int, log_name: str) -> tuple[list[int], list[str]]:
    """(qsl_idx, transcription) of every entry in log order."""
    first_entries(log_entries, num_rows, LABEL_DTYPE, log_name)  # checks every entry's shape and size
    idxs, texts = [], []
    for n, e in enumerate(log_entries):
        q = int(e["qsl_idx"])
        labels = np.frombuffer(bytes.fromhex(e["data"]), dtype=LABEL_DTYPE)
        idxs.append(q)
        texts.append(labels_text(labels, f"{log_name} entry {n} (qsl_idx {q})"))
    return idxs, texts


def word_errors(hypotheses: list[str], references: list[str]) -> tuple[list[int], list[int]]:
    norm = normalizer()
    errors, words = [], []
    for h, r in zip(hypotheses, references):
        e, w = aligned_errors(norm(h).split(), norm(r).split())
        errors.append(e)
        words.append(w)
    return errors, words


def score(samples, dataset, tokenizer=None, *, dataset_name: str = "dataset", **_) -> dict:
    """`samples`: (qsl_idxs, transcriptions) of every log entry (entries_text)."""
    idxs, hyps = samples
    refs = [manifest_transcript(t) for t in text_values(dataset, "output", idxs, dataset_name)]
    errors, words = word_errors(hyps, refs)
    if not sum(words):
        raise LogEntryError(f"{dataset_name}: the logged samples' references hold no words, so no word error "
                            "rate can be computed (MLCommons' script divides by zero)")
    wer = sum(errors) / sum(words)
    return {"accuracy": (1 - wer) * 100, "wer": wer * 100,
            "_detail": {"errors": sum(errors), "words": sum(words), "entries": len(idxs),
                        "per_row": [{"qsl_idx": q, "errors": e, "words": w} for q, e, w in zip(idxs, errors, words)]}}


def accuracy_txt(result: dict, log_sha256: str = "") -> str:
    """What accuracy_eval.py prints (the line the checker's ACCURACY pattern reads), then `hash=` of the
    full accuracy log where given (the checker wants one)."""
    line = "Word Error Rate: {:}%, accuracy={:}%".format(result["wer"], result["accuracy"])
    return f"{line}\n" + (f"hash={log_sha256}\n" if log_sha256 else "")
