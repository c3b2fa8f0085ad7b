"""Settings that MLPerf's submission checker would refuse are named (a shortened run is VALID to LoadGen)."""
from __future__ import annotations

from pathlib import Path

from harness.backends import resolve
from harness.mlperf.readiness import submission_warnings

DEFAULT = Path(__file__).resolve().parent.parent / "params" / "default.yaml"


def test_a_shortened_run_is_flagged_and_a_full_length_one_is_not():
    short = submission_warnings(resolve(DEFAULT, "loadgen.min_duration_ms=20000,accuracy.num_samples=64"))
    assert len(short) == 2
    assert "min_duration_ms=20,000" in short[0] and "600 s" in short[0]
    assert "64 of the dataset's 256 samples" in short[1]
    assert submission_warnings(resolve(DEFAULT, "loadgen.min_duration_ms=600000")) == []
