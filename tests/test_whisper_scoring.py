"""The whisper scorer against what MLCommons' speech2text/accuracy_eval.py printed (run offline on the
same seeded fixture: tests/golden/mlperf_scoring/README.md, "whisper.json"), entry by entry: the
normalized hypothesis and reference, the entry's errors and words; then the printed line itself."""
from __future__ import annotations

import hashlib
import json
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.mlperf import benchmarks
from harness.mlperf.benchmarks.whisper import LABELS, manifest_transcript, text_to_labels
from harness.mlperf.scoring import LogEntryError, score_log
from harness.mlperf.scoring import whisper as scorer
import whisper_scoring_fixtures as fx

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mlperf_scoring" / "whisper.json").read_text())


@pytest.fixture(scope="module")
def fixture():
    rows = fx.rows()
    kept = [r for r in fx.manifest(rows) if r["original_duration"] <= 30.0]
    return fx.accuracy_log(rows), pd.DataFrame({"output": [r["transcript"] for r in kept]})


def test_the_fixture_is_the_one_the_script_scored(fixture):
    log, frame = fixture
    assert len(frame) == GOLDEN["kept_rows"] == fx.ROWS - 1  # the 31.5 s clip is dropped, as the Manifest does
    assert [[e["seq_id"], e["qsl_idx"]] for e in log] == [g[:2] for g in GOLDEN["entries"]]
    assert len(log) >= 200


def test_every_entry_equals_the_scripts(fixture):
    log, frame = fixture
    idxs, hyps = scorer.entries_text(log, len(frame), "log")
    norm = scorer.normalizer()
    for q, h, g in zip(idxs, hyps, GOLDEN["entries"]):
        hn, rn = norm(h), norm(manifest_transcript(frame["output"][q]))
        assert [hn, rn, *scorer.aligned_errors(hn.split(), rn.split())] == g[2:], (h, g)


def test_the_printed_line_is_the_scripts(fixture):
    log, frame = fixture
    result = score_log(benchmarks.get("whisper"), log, frame, None)
    assert result["_detail"]["entries"] == len(log)  # repeats scored, not de-duplicated
    assert scorer.accuracy_txt(result).splitlines()[0] == GOLDEN["printed"]
    assert scorer.accuracy_txt(result, "ab12").splitlines()[1] == "hash=ab12"


def test_the_spelling_table_is_openai_whispers():
    table = files("whisper_normalizer").joinpath("normalizers/english.json").read_bytes()
    assert hashlib.sha256(table).hexdigest() == GOLDEN["english_json_sha256"]


def test_the_rules_on_small_cases():
    assert scorer.aligned_errors("every one of them".split(), "everyone of them".split()) == (0, 3)
    assert scorer.aligned_errors("a sunday".split(), "a sun day".split()) == (0, 3)
    assert scorer.aligned_errors([], "one two".split()) == (2, 2)
    assert scorer.aligned_errors("extra".split(), []) == (1, 0)
    norm = scorer.normalizer()
    assert norm("He paid twenty-five dollars, didn't he?") == norm("he paid $25 did not he")
    assert text_to_labels("  It's 50%, OK?  ") == [LABELS.index(c) for c in "it's 50% ok"]


def _entry(q: int, labels) -> dict:
    return {"qsl_idx": q, "seq_id": q, "data": np.asarray(labels, dtype="<i8").tobytes().hex()}


def test_bad_logs_are_refused_by_name():
    frame = pd.DataFrame({"output": ["one two", ""]})
    with pytest.raises(LogEntryError, match="entry 0 .*label index 42"):
        score_log(benchmarks.get("whisper"), [_entry(0, [42])], frame, None)
    with pytest.raises(LogEntryError, match="not a whole number"):  # int32 ids are not what the SUT logs
        score_log(benchmarks.get("whisper"), [{"qsl_idx": 0, "data": "01000000"}], frame, None)
    with pytest.raises(LogEntryError, match="hold no words"):
        score_log(benchmarks.get("whisper"), [_entry(1, [1, 2])], frame, None)


def test_the_gate_is_the_checkers():
    g = benchmarks.get("whisper").gates("99")["accuracy"]
    assert g["min"] == (100.0 - 2.0671) * 0.99 and g["max"] is None
