"""Seeded synthetic whisper transcripts for the scorer's parity test: a manifest in the reference's
format (speech2text/manifest.py reads it: transcript, files[].fname/speed, original_duration) and the
accuracy log a SUT would have written (each hypothesis lower-cased and stripped, its characters as
int64 indices of the 42 labels, as reference_SUT.py returns them to LoadGen).

The edge cases are what accuracy_eval.py's normalizer and alignment meet: numbers spelled and written
(dollars, percents, ordinals, years, decimals), contractions, British spellings, fillers, bracketed
asides, hyphens, words run together or split apart (helpers.py's concatenation rule), punctuation the
SUT drops, upper case the manifest drops, empty hypotheses, repeated qsl_idx, a clip over 30 s (the
Manifest's max_duration drops it, shifting every later qsl_idx) and an empty reference.

    python tests/whisper_scoring_fixtures.py OUT_DIR   # writes manifest.json and mlperf_log_accuracy.json
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np

from harness.mlperf.benchmarks.whisper import text_to_labels

SEED = 5301
ROWS = 240

WORDS = ("the quick brown fox jumped over a lazy dog while mister smith read his paper and the children "
         "played in the garden near an old stone wall under grey skies before supper").split()
#: (reference, hypotheses the SUT might have logged): each pair exercises one rule.
EDGES = [
    ("he paid twenty five dollars for it", ["he paid $25 for it", "he paid twenty-five dollars for it",
                                            "he paid 25 dollars for it"]),
    ("it is nineteen ninety nine", ["it's 1999", "it is nineteen ninety-nine", "it is 1999"]),
    ("i will not go", ["I won't go", "i'll not go", "i will not go."]),
    ("they are here", ["they're here", "They Are Here!", "there here"]),
    ("the colour of honour", ["the color of honor", "the colour of honour", "the collar of honor"]),
    ("uh we went um home", ["we went home", "uh we went um home", "hmm we went home"]),
    ("every one of them", ["everyone of them", "every one of them", "every-one of them"]),
    ("a sunday afternoon", ["a sun day afternoon", "a sunday after noon", "asunday afternoon"]),
    ("fifty percent of the first three", ["50% of the 1st 3", "fifty per cent of the first three",
                                          "50 percent of the first 3"]),
    ("two point five million", ["2.5 million", "two point five million", "2500000"]),
    ("mister and missus jones", ["mr and mrs jones", "Mr. and Mrs. Jones", "mister and mrs jones"]),
    ("the [noise] cat (softly) sat", ["the cat sat", "the cat softly sat", "the noise cat sat"]),
    ("plus or minus ten", ["+ or - 10", "plus or minus 10", "plus minus ten"]),
    ("it's o'clock", ["it is o'clock", "its oclock", "it's o clock"]),
    ("one hundred and first", ["101st", "one hundred first", "a hundred and first"]),
    ("the sixties and the seventies", ["the 60s and the 70s", "the sixties and seventies", "the 1960s"]),
]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14)))


def _noisy(rng: random.Random, ref: str) -> str:
    """A hypothesis a few edits away from `ref`: words dropped, swapped, inserted, run together or split."""
    words = ref.split()
    out: list[str] = []
    i = 0
    while i < len(words):
        r = rng.random()
        if r < 0.06:
            pass  # dropped
        elif r < 0.12:
            out.append(rng.choice(WORDS))
        elif r < 0.16:
            out += [words[i], rng.choice(WORDS)]
        elif r < 0.22 and i + 1 < len(words):
            out.append(words[i] + words[i + 1])  # run together
            i += 1
        elif r < 0.26 and len(words[i]) > 3:
            cut = len(words[i]) // 2
            out += [words[i][:cut], words[i][cut:]]  # split apart
        else:
            out.append(words[i])
        i += 1
    text = " ".join(out)
    if rng.random() < 0.3:
        text = text.capitalize() + rng.choice([".", "!", "?", ",", ";"])  # what Whisper writes
    if rng.random() < 0.1:
        text = "  " + text + " "
    return text


def rows(seed: int = SEED, n: int = ROWS) -> list[dict]:
    """[{reference, hypotheses, duration}]: the manifest row and what was logged for it (several
    hypotheses log the same qsl_idx more than once)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 6 == 0:
            ref, hyps = EDGES[(i // 6) % len(EDGES)]
            hyp = [hyps[(i // 6 // len(EDGES)) % len(hyps)]]
        else:
            ref = _sentence(rng)
            hyp = [_noisy(rng, ref)]
        if i % 17 == 5:
            hyp = [""]  # nothing transcribed
        if i % 23 == 7:
            hyp.append(_noisy(rng, ref))  # a repeated qsl_idx: every entry is scored
        if i % 29 == 3:
            ref = ref.upper() if i % 2 else ref.title() + "."  # the manifest drops what is not a label
        duration = 31.5 if i == 50 else round(rng.uniform(1.0, 29.9), 3)
        out.append({"reference": ref, "hypotheses": hyp, "duration": duration})
    out[120]["reference"] = ""  # a row with no reference words
    return out


def manifest(rs: list[dict]) -> list[dict]:
    """The rows in the reference's manifest format (repackage_librispeech.py's get_sample_json)."""
    return [{"transcript": r["reference"],
             "files": [{"channels": 1, "sample_rate": 16000.0, "bitdepth": 16, "bitrate": 256000.0,
                        "duration": r["duration"], "num_samples": int(r["duration"] * 16000),
                        "encoding": "Signed Integer PCM", "silent": False, "fname": f"clips/{i}.wav", "speed": 1}],
             "original_duration": r["duration"], "original_num_samples": int(r["duration"] * 16000)}
            for i, r in enumerate(rs)]


def accuracy_log(rs: list[dict], max_duration: float = 30.0) -> list[dict]:
    """LoadGen's entries in a shuffled order, qsl_idx counted over the rows the Manifest keeps."""
    kept = [r for r in rs if r["duration"] <= max_duration]
    entries = [{"seq_id": 0, "qsl_idx": q, "data": np.asarray(text_to_labels(h), dtype="<i8").tobytes().hex().upper()}
               for q, r in enumerate(kept) for h in r["hypotheses"]]
    random.Random(SEED + 1).shuffle(entries)
    for n, e in enumerate(entries):
        e["seq_id"] = n
    return entries


def write(out_dir: Path) -> None:
    rs = rows()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "manifest.json").write_text(json.dumps(manifest(rs), indent=1))
    (out_dir / "mlperf_log_accuracy.json").write_text(json.dumps(accuracy_log(rs)))


if __name__ == "__main__":
    write(Path(sys.argv[1]))
