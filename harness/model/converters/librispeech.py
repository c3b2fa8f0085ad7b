"""LibriSpeech's layout (`<speaker>/<chapter>/<speaker>-<chapter>.trans.txt` and `<id>.flac` beside it, as
dev-clean and dev-other unpack) to the whisper benchmark's dataset: what MLCommons' convert_librispeech.py
and repackage_librispeech.py (speech2text/utils/ at b66003e1) make of it, one step.

- Each transcript line `<id> <TEXT>` names `<id>.flac`; the transcript is lower-cased and stripped
  (preprocessing_utils.py), so the Manifest's label filter keeps its letters.
- Clips are read as float32 at 16 kHz (resampled with soxr's "hq" where a file is not, as librosa.load
  does), grouped per speaker and chapter (the file name's first two `-` fields), and within a group, in
  order, packed into clips of at most 30 s: 0.5 s of silence between clips, transcripts joined by a
  space; a single clip over 30 s is left out. Each packed clip is written as a 16-bit WAV
  (`audio/<speaker>-<chapter>_<n>.wav`) and gets a manifest row in the reference's format.
- Order: the transcript files sorted by path, their lines in file order. MLCommons' script takes them
  in glob's order (the file system's), so its qsl_idx order may differ: for a submission use MLCommons'
  preprocessed set as it is (dataset.path: its dev-all-repack.json, dataset.audio_dir: its data dir).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from harness.errors import InputError

RATE = 16000
MAX_CLIP_S = 30.0
PAD_S = 0.5


def _transcripts(src: Path) -> list[tuple[Path, str]]:
    out = []
    for txt in sorted(src.rglob("*.trans.txt")):
        for n, line in enumerate(txt.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            fid, _, text = line.partition(" ")
            flac = txt.parent / f"{fid}.flac"
            if not flac.is_file():
                raise InputError(f"{txt} line {n}: names {flac.name}, which is not beside it")
            out.append((flac, text.lower().strip()))
    if not out:
        raise InputError(f"{src}: no LibriSpeech transcripts (*.trans.txt) under it; give the unpacked "
                         "dev-clean / dev-other directory")
    return out


def _load(path: Path):
    import soundfile as sf
    import soxr

    try:
        audio, rate = sf.read(str(path), dtype="float32")
    except (RuntimeError, sf.LibsndfileError) as exc:
        raise InputError(f"{path}: not readable audio ({exc})") from None
    if audio.ndim > 1:
        audio = audio.mean(axis=1)  # librosa.load's mono
    return audio if rate == RATE else soxr.resample(audio, rate, RATE, quality="soxr_hq")


def _row(fname: str, transcript: str, samples: int) -> dict:
    """repackage_librispeech.py's get_sample_json."""
    return {"transcript": transcript,
            "files": [{"channels": 1, "sample_rate": float(RATE), "bitdepth": 16, "bitrate": 256000.0,
                       "duration": float(samples / RATE), "num_samples": int(samples),
                       "encoding": "Signed Integer PCM", "silent": False, "fname": fname, "speed": 1}],
            "original_duration": float(samples / RATE), "original_num_samples": int(samples)}


def convert(src: str | os.PathLike, out: str | os.PathLike, **_) -> dict:
    """Writes `out/manifest.json` and `out/audio/*.wav` (beside OUT first, then renamed into it: a failed
    conversion leaves nothing); returns what was written."""
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise InputError(f"SRC {src}: not a directory; give the unpacked LibriSpeech split")
    if (out / "manifest.json").exists():
        raise InputError(f"OUT {out}: already holds a manifest.json; give a new directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"OUT {out}: exists and is not an empty directory; give a new or empty directory")
    groups: dict[str, list[tuple[object, str]]] = {}
    for flac, text in _transcripts(src):
        groups.setdefault("-".join(flac.stem.split("-")[:2]), []).append((_load(flac), text))
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)  # what a killed conversion left
    (tmp / "audio").mkdir(parents=True)
    try:
        rows, skipped = _pack(groups, tmp)
        (tmp / "manifest.json").write_text(json.dumps(rows, indent=2) + "\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            _merge_into(tmp, out)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"clips": len(rows), "left_out_over_30s": skipped, "manifest": str(out / "manifest.json")}


def _pack(groups: dict, tmp: Path) -> tuple[list[dict], int]:
    """Each group's clips packed into files under `tmp/audio`; (manifest rows, clips left out)."""
    import numpy as np
    import soundfile as sf

    rows, skipped = [], 0
    pad = np.zeros(int(PAD_S * RATE))
    for key, clips in groups.items():
        packed: list[tuple[object, str]] = []
        length = 0.0
        index = 0

        def flush():
            nonlocal index
            audio = np.concatenate([x for k, (a, _) in enumerate(packed) for x in ((pad, a) if k else (a,))])
            name = f"audio/{key}_{index}.wav"
            sf.write(str(tmp / name), audio, RATE)
            rows.append(_row(name, " ".join(t for _, t in packed), len(audio)))
            index += 1

        for audio, text in clips:
            seconds = len(audio) / RATE
            if seconds > MAX_CLIP_S:
                skipped += 1
                continue
            if packed and length + PAD_S + seconds > MAX_CLIP_S:
                flush()
                packed, length = [], 0.0
            packed.append((audio, text))
            length += seconds + (PAD_S if len(packed) > 1 else 0.0)
        if packed:
            flush()
    return rows, skipped


def _merge_into(tmp: Path, out: Path) -> None:
    """An existing empty OUT directory takes the result (one rename per entry)."""
    if any(out.iterdir()):
        raise InputError(f"OUT {out}: not empty; give a new or empty directory")
    for p in tmp.iterdir():
        os.replace(p, out / p.name)
    tmp.rmdir()
