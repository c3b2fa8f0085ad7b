"""loadgen.offline_expected_qps: auto: an Offline run sized to the machine by a short sizing run, so it
lasts its minimum duration wherever it runs (harness/loadgen/measure.py)."""
from __future__ import annotations

import pytest
from conftest import echo_tritonserver

from harness.config import ParamsError, resolve
from harness.loadgen.measure import AUTO_MARGIN, RETRY_MARGIN, run_performance
from harness.loadgen.settings import from_params


def test_auto_is_a_value_of_its_own_and_anything_else_still_a_positive_number():
    """'auto' validates and reaches LoadGen as nothing (the timed run's rate is measured first); another
    word or a non-positive rate is refused naming the field."""
    p = resolve(None, "loadgen.offline_expected_qps=auto")
    assert p.loadgen.offline_expected_qps == "auto" and from_params(p.loadgen, 8)["offline_expected_qps"] is None
    assert from_params(resolve(None, "loadgen.offline_expected_qps=42").loadgen, 8)["offline_expected_qps"] == 42
    for bad in ("fast", "0", "-3"):
        with pytest.raises(ParamsError, match="offline_expected_qps"):
            resolve(None, f"loadgen.offline_expected_qps={bad}")


def test_auto_sizes_an_offline_run_that_a_fixed_rate_leaves_too_short(tmp_path):
    """Against a server of a given speed, a fixed rate far below it ends the run before min_duration
    (INVALID); auto measures the speed, sets the rate at AUTO_MARGIN times it, and the run is VALID,
    with the sizing run's numbers in result.json."""
    prompts = [[10 + i % 50, 40 + i % 7, 30] for i in range(64)]
    with echo_tritonserver(tmp_path / "server", token_delay_ms="1") as endpoint:
        servers = [{"host": endpoint.split(":")[0], "port": int(endpoint.split(":")[1]), "models": ["echo"]}]
        base = "loadgen.min_duration_ms=1500,loadgen.min_query_count=32,harness.warmup_queries=0,dataset.max_new_tokens=8"
        fixed = run_performance(servers, prompts, resolve(None, base + ",loadgen.offline_expected_qps=5"),
                                tmp_path / "fixed", end_id=2, pad_id=None)
        assert fixed["valid"] == "INVALID" and "min duration not met" in fixed["invalid_reason"]
        auto = run_performance(servers, prompts, resolve(None, base + ",loadgen.offline_expected_qps=auto"),
                               tmp_path / "auto", end_id=2, pad_id=None)
    sized = auto["offline_expected_qps_auto"]
    assert auto["valid"] == "VALID", auto["invalid_reason"]
    last = sized["sizing_runs"][-1]  # the timed run that ended short, where a loaded host sped up
    margin = RETRY_MARGIN if last.get("timed_run_short") else AUTO_MARGIN
    assert sized["offline_expected_qps"] == pytest.approx(last["samples_per_s"] * margin, rel=1e-3)
    sizing = [r for r in sized["sizing_runs"] if not r.get("timed_run_short")][-1]
    assert sizing["samples_per_s"] < sizing["asked_qps"]  # the last sizing run was slower than asked: sustained
    assert all((tmp_path / "auto" / r["dir"] / "mlperf_log_summary.txt").is_file() for r in sized["sizing_runs"])
    assert "offline_expected_qps_auto" in (tmp_path / "auto" / "result.json").read_text()
    conf = dict(line.split(" = ") for line in (tmp_path / "auto" / "user.conf").read_text().splitlines() if " = " in line)
    assert float(conf["llama2-70b.Offline.target_qps"]) == pytest.approx(sized["offline_expected_qps"])


def test_a_timed_run_that_ends_short_is_run_once_more_and_kept_as_a_sizing_run(tmp_path, monkeypatch):
    """A host that speeds up past AUTO_MARGIN after the sizing runs (here: a margin below 1) ends the timed
    run before min_duration; it is kept under sizing/short/ with the sizing runs, and the timed run is
    measured once more at RETRY_MARGIN x its rate: VALID, only the second run's files at the top."""
    from harness.loadgen import measure

    monkeypatch.setattr(measure, "AUTO_MARGIN", 0.3)
    prompts = [[10 + i % 50, 40 + i % 7, 30] for i in range(64)]
    with echo_tritonserver(tmp_path / "server", token_delay_ms="1") as endpoint:
        servers = [{"host": endpoint.split(":")[0], "port": int(endpoint.split(":")[1]), "models": ["echo"]}]
        base = ("loadgen.min_duration_ms=1500,loadgen.min_query_count=32,harness.warmup_queries=0,"
                "dataset.max_new_tokens=8,loadgen.offline_expected_qps=auto")
        auto = run_performance(servers, prompts, resolve(None, base), tmp_path / "auto", end_id=2, pad_id=None)
    assert auto["valid"] == "VALID", auto["invalid_reason"]
    sized = auto["offline_expected_qps_auto"]
    short = sized["sizing_runs"][-1]
    assert short["dir"] == "sizing/short" and short["timed_run_short"] is True
    assert sized["offline_expected_qps"] == pytest.approx(short["samples_per_s"] * measure.RETRY_MARGIN, rel=1e-3)
    assert "min duration not met" in (tmp_path / "auto" / "sizing" / "short" / "result.json").read_text()
    assert "Min duration satisfied : Yes" in (tmp_path / "auto" / "mlperf_log_summary.txt").read_text()
