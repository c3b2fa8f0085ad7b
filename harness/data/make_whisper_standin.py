"""Writes the whisper stand-in (harness/data/standins/whisper/): 24 English sentences spoken by Debian's
espeak-ng, resampled to 16 kHz mono and stored as 16-bit FLAC under audio/, and manifest.json in the
reference's format (speech2text/utils/repackage_librispeech.py's rows: transcript, files[] with fname,
sample_rate, duration, num_samples, speed; original_duration, original_num_samples), transcripts in
lower case as MLCommons' conversion writes them.

Run once, on a host with espeak-ng (the audio is committed; nothing at test or CI time needs espeak-ng):

    python -m harness.data.make_whisper_standin

The sentences carry what the scorer's normalizer meets (numbers spelled out, contractions, a British
spelling); each is spoken as its transcript reads.
"""
from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parent / "standins" / "whisper"
RATE = 16000
VOICE = "en-us"

SENTENCES = [
    "the old clock in the hall struck seven",
    "she opened the window and the rain came in",
    "we walked along the river until it was dark",
    "his brother bought twenty five apples at the market",
    "it's a long way to the next village",
    "the children don't like cold porridge",
    "a small boat drifted slowly towards the shore",
    "the colour of the sky changed before the storm",
    "he read the letter twice and put it away",
    "there were nineteen ninety nine steps to the top",
    "the baker sells fresh bread every morning",
    "my grandmother kept bees behind the house",
    "they couldn't find the key to the garden gate",
    "the train left the station at half past three",
    "an owl called from the dark wood",
    "the doctor said the fever would pass",
    "four horses pulled the heavy cart up the hill",
    "the lamp on the desk burned all night",
    "you'll hear the bells on sunday",
    "the captain looked at the map once more",
    "snow covered the roofs of the quiet town",
    "the teacher wrote a hundred words on the board",
    "a cat slept in the warm kitchen",
    "the wind blew the leaves across the yard",
]


def speak(text: str) -> tuple["object", int]:
    """espeak-ng's WAV of `text` as float32 samples and its rate."""
    import soundfile as sf

    wav = subprocess.run(["espeak-ng", "-v", VOICE, "--stdout", text], check=True, capture_output=True).stdout
    data, rate = sf.read(io.BytesIO(wav), dtype="float32")
    return data, rate


def to_16k(data, rate: int):
    import soxr

    return data if rate == RATE else soxr.resample(data, rate, RATE, quality="soxr_hq")


def row(fname: str, transcript: str, samples: int) -> dict:
    duration = samples / RATE
    return {"transcript": transcript,
            "files": [{"channels": 1, "sample_rate": float(RATE), "bitdepth": 16, "bitrate": 256000.0,
                       "duration": duration, "num_samples": samples, "encoding": "FLAC", "silent": False,
                       "fname": fname, "speed": 1}],
            "original_duration": duration, "original_num_samples": samples}


def main() -> None:
    import numpy as np
    import soundfile as sf

    (OUT / "audio").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, text in enumerate(SENTENCES):
        data, rate = speak(text)
        audio = np.clip(to_16k(data, rate), -1.0, 1.0)
        fname = f"audio/{i:03d}.flac"
        sf.write(OUT / fname, audio, RATE, format="FLAC", subtype="PCM_16")
        rows.append(row(fname, text, len(audio)))
    (OUT / "manifest.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(OUT, sum(r["original_duration"] for r in rows), "s")


if __name__ == "__main__":
    main()
