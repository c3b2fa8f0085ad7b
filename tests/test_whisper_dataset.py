"""whisper's audio dataset: the reference's LibriSpeech manifest read as its Manifest reads it, every clip
checked with soundfile, and `python -m pipeline dataset convert --format librispeech` from LibriSpeech's
own layout (a tree made here from the stand-in's clips)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from harness.mlperf.benchmarks.whisper import PROMPT
from harness.model.converters.librispeech import MAX_CLIP_S, PAD_S, RATE
from harness.model.corpus import SPEECH_STANDIN
from harness.model.datasets import load_dataset
from harness.model.speech import SpeechDatasetError, check_clip, read_manifest
from harness.model.tiny_whisper import train_tokenizer
from pipeline.cli import main

STANDIN = json.loads(SPEECH_STANDIN.read_text())


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer([r["transcript"] for r in STANDIN], out, 300).save_pretrained(out)
    return out


@pytest.fixture()
def librispeech(tmp_path) -> Path:
    """Two chapters of LibriSpeech's layout: 14 and 10 of the stand-in's clips, transcripts in upper case."""
    src = tmp_path / "dev-clean"
    for n, row in enumerate(STANDIN):
        speaker, chapter = ("84", "121123") if n < 14 else ("174", "50561")
        d = src / speaker / chapter
        d.mkdir(parents=True, exist_ok=True)
        fid = f"{speaker}-{chapter}-{n:04d}"
        shutil.copy(SPEECH_STANDIN.parent / row["files"][0]["fname"], d / f"{fid}.flac")
        with open(d / f"{speaker}-{chapter}.trans.txt", "a") as f:
            f.write(f"{fid} {row['transcript'].upper()}\n")
    return src


def test_the_stand_in_reads_and_every_clip_passes(tokenizer):
    samples = load_dataset("librispeech", SPEECH_STANDIN, tokenizer, 24, prompt=PROMPT)
    assert [s.reference_text for s in samples] == [r["transcript"] for r in STANDIN]
    assert all(Path(s.meta["columns"]["audio"]).is_file() and s.input_text == PROMPT for s in samples)
    assert len(samples[0].input_ids) == 4  # the reference's four prompt tokens


def test_convert_packs_chapters_as_mlcommons_does(librispeech, tmp_path, tokenizer, capsys):
    out = tmp_path / "whisper"
    assert main(["dataset", "convert", "--format", "librispeech", str(librispeech), str(out)]) == 0
    rows = json.loads((out / "manifest.json").read_text())
    joined = " ".join(r["transcript"] for r in rows)
    # transcript files in path order (174/... before 84/...), their lines in order
    assert joined.split() == " ".join(r["transcript"] for r in STANDIN[14:] + STANDIN[:14]).split()
    assert joined == joined.lower()
    for r in rows:
        assert r["original_duration"] <= MAX_CLIP_S and r["files"][0]["speed"] == 1
        audio, rate = sf.read(out / r["files"][0]["fname"])
        assert rate == RATE and len(audio) == r["original_num_samples"]
    assert len(rows) >= 3  # a chapter's 14 clips of ~2.4 s with 0.5 s pads do not fit in 30 s
    first = sf.read(out / rows[0]["files"][0]["fname"])[0]
    clip0 = sf.read(SPEECH_STANDIN.parent / STANDIN[14]["files"][0]["fname"])[0]
    gap = first[len(clip0):len(clip0) + int(PAD_S * RATE)]
    assert len(gap) == PAD_S * RATE and not np.any(gap)  # 0.5 s of silence between clips
    samples = load_dataset("librispeech", out / "manifest.json", tokenizer, len(rows), prompt=PROMPT)
    assert [s.reference_text for s in samples] == [r["transcript"] for r in rows]
    assert main(["dataset", "convert", "--format", "librispeech", str(librispeech), str(out)]) == 2
    assert "already holds a manifest.json" in capsys.readouterr().err


def test_convert_refuses_what_it_cannot_read(tmp_path, capsys):
    assert main(["dataset", "convert", "--format", "librispeech", str(tmp_path), str(tmp_path / "o")]) == 2
    assert "no LibriSpeech transcripts" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _manifest(tmp_path: Path, rows: list[dict]) -> Path:
    p = tmp_path / "m.json"
    p.write_text(json.dumps(rows))
    return p


def _row(fname: str, duration: float, samples: int | None = None, transcript="a b") -> dict:
    f = {"fname": fname, "speed": 1, **({"num_samples": samples} if samples is not None else {})}
    return {"transcript": transcript, "files": [f], "original_duration": duration}


def test_the_manifest_is_read_as_the_reference_reads_it(tmp_path):
    sf.write(tmp_path / "a.wav", np.zeros(16000), 16000)
    rows = [_row("a.wav", 1.0), _row("long.wav", 31.0), _row("a.wav", 1.0, transcript=7), _row("a.wav", 1.0)]
    clips = read_manifest(_manifest(tmp_path, rows))
    assert [c.row for c in clips] == [0, 3]  # over 30 s and a non-text transcript dropped
    assert clips[0].audio == tmp_path / "a.wav"
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert read_manifest(_manifest(tmp_path, rows), other)[0].audio == other / "a.wav"


@pytest.mark.parametrize("write, row, message", [
    (lambda p: sf.write(p, np.zeros(8000), 8000), _row("c.wav", 1.0), "8000 Hz"),
    (lambda p: sf.write(p, np.zeros((16000, 2)), 16000), _row("c.wav", 1.0), "2 channels"),
    (lambda p: sf.write(p, np.zeros(16000), 16000), _row("c.wav", 1.0, samples=15000), "holds 16000 frames"),
    (lambda p: None, _row("c.wav", 1.0), "does not exist"),
    (lambda p: p.write_bytes(b"not audio"), _row("c.wav", 1.0), "not readable audio"),
    (lambda p: None, _row("c.mp3", 1.0), "not a WAV or FLAC"),
])
def test_bad_clips_are_named(tmp_path, write, row, message):
    write(tmp_path / "c.wav")
    clip = read_manifest(_manifest(tmp_path, [row]))[0]
    with pytest.raises(SpeechDatasetError, match=message):
        check_clip(clip, "row 0")


@pytest.mark.parametrize("doc, message", [({"a": 1}, "JSON list"), ([{"files": []}], "original_duration"),
                                          ([{"original_duration": 1, "files": [{"fname": "x", "speed": 2}]}], "speed 1")])
def test_bad_manifests_are_named(tmp_path, doc, message):
    with pytest.raises(SpeechDatasetError, match=message):
        read_manifest(_manifest(tmp_path, doc))
