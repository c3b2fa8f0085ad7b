"""The search for the highest load that stays VALID or meets an SLO (harness/search/, pipeline/search.py):
its plan (bracket, bisect, the noise rule), the SLO strings, the judging of a probe, and a search
against a real tritonserver serving the echo model with a known capacity."""
from __future__ import annotations

import heapq
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.config import ParamsError, resolve
from harness.config.slo import Limit, SloError, parse_slo
from harness.reports.nightly import fmt
from harness.search.judge import judge
from harness.search.plan import Outcome, Plan, Probe, drive
from conftest import REPO, copied_root, echo_tritonserver, run_luigi, run_records, statuses, tritonservers_under

# ====================================================================== the plan


def _threshold(limit: float, calls: list, margin_of=None):
    """A system whose loads pass up to `limit`; records every probe asked."""
    def probe(p: Probe) -> Outcome:
        calls.append(p)
        return Outcome(p.value <= limit, "" if p.value <= limit else "over", margin_of(p) if margin_of else 0.5)
    return probe


def test_bracket_then_bisect_finds_the_threshold_within_the_tolerance():
    """The found load passed, the next one up failed, and the two are within the tolerance."""
    for limit, start in ((37.3, 10.0), (37.3, 500.0), (0.75, 20.0), (999.0, 1.0)):
        calls: list = []
        r = drive(Plan(start=start, lowest=0.1, highest=10_000, tolerance=0.02), _threshold(limit, calls))
        assert r.found is not None and r.found <= limit < r.high, (limit, start, r)
        assert (r.high - r.found) <= 0.02 * r.found + 1e-9 * limit or "cannot be split" in r.stopped
        assert len({p.value for p in calls}) == len(calls)  # no load measured twice


def test_every_load_is_rounded_so_a_tighter_tolerance_reuses_the_probes_of_a_looser_one():
    """Widening or tightening asks for the same loads again (their probes are cached), then more."""
    loose, tight = [], []
    drive(Plan(start=20, lowest=0.1, highest=1e5, tolerance=0.1), _threshold(53.21, loose))
    drive(Plan(start=20, lowest=0.1, highest=1e5, tolerance=0.01), _threshold(53.21, tight))
    assert tight[:len(loose)] == loose and len(tight) > len(loose)
    assert all(p.value == float(f"{p.value:.4g}") for p in tight)


def test_nothing_passes_and_everything_passes_end_with_a_reason():
    """A search that cannot bracket says which end it hit and how to widen it."""
    r = drive(Plan(start=8, lowest=1, highest=100), _threshold(0.5, []))
    assert r.found is None and "lower search.lowest" in r.stopped
    r = drive(Plan(start=8, lowest=1, highest=100), _threshold(1e9, []))
    assert r.found == 100 and r.high is None and "raise search.highest" in r.stopped


def test_a_load_near_the_knee_is_tried_and_one_that_flips_is_retried_within_the_budget():
    """The noise rule: a load whose first run lies within `noise` of its limit, pass or fail, runs `repeats`
    times (other seeds); one failing run fails the load (the search errs low); a load far from every
    limit runs once. A load whose runs disagree flips, and is retried while the search's `retries` last:
    each load's evidence is its runs that passed over its runs (perfdag once failed 16 req/s in one run
    and found 15, where aiperf's three trials showed the failure was one in three)."""
    calls: list = []
    flaky = {40.0: [True, False, True, True, False, True]}  # passes 4 times in 6: noise at the knee

    def probe(p: Probe) -> Outcome:
        calls.append(p)
        passed = flaky[p.value][p.repeat] if p.value in flaky else p.value <= 45
        return Outcome(passed, "" if passed else "over", 0.95 if 35 <= p.value <= 50 else 0.3)

    r = drive(Plan(start=20, lowest=1, highest=1000, tolerance=0.02, noise=0.1, repeats=3, retries=2), probe)
    assert [p.repeat for p in calls if p.value == 40.0] == [0, 1, 2, 3, 4]  # 3 trials, then 2 retries: the budget
    assert r.tried[40.0] == (3, 5)
    assert [p.repeat for p in calls if p.value == 20.0] == [0]  # far from the limit: once
    assert r.found is not None and r.found < 40  # 40 failed twice in 5: the search errs low
    near = {c.value for c in calls if 35 <= c.value <= 50 and c.value != 40.0}
    assert near and all(r.tried[v][1] == 3 for v in near)  # passes and fails near the knee: 3 trials each
    assert all(r.tried[v] == (1, 1) or r.tried[v] == (0, 1) for v in r.tried if not 35 <= v <= 50)


def test_whole_number_axis_and_max_probes():
    """Concurrency is probed in whole numbers down to a bracket 1 wide; max_probes stops a search."""
    calls: list = []
    r = drive(Plan(start=1, lowest=1, highest=4096, whole=True), _threshold(13, calls))
    assert r.found == 13 and r.high == 14 and all(p.value == int(p.value) for p in calls)
    r = drive(Plan(start=1, lowest=1, highest=4096, max_probes=3), _threshold(13, []))
    assert len(r.runs) == 3 and "max_probes=3" in r.stopped and r.found == 4.0


# ====================================================================== SLOs and judging


def test_slo_strings():
    """An SLO parses into limits; a bad term is one line naming it and the form."""
    assert parse_slo("ttft_p99_ms<=500, tpot_p99_ms<=40") == (Limit("ttft", "p99", 500.0), Limit("tpot", "p99", 40.0))
    assert parse_slo("") == ()
    for bad in ("ttft_p99<=500", "ttft_p98_ms<=5", "itl_p99_ms<=5", "ttft_p99_ms>=5", "ttft_p99_ms<=0",
                "ttft_p99_ms<=5,ttft_p99_ms<=6"):
        with pytest.raises(SloError) as e:
            parse_slo(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ParamsError, match="search.slo"):
        resolve(None, "search.slo=ttft_p99_ms<=abc")
    p = resolve(None, "search.slo=ttft_p99_ms<=500,tpot_p99_ms<=40,loadgen.scenario=Server")
    assert p.search.slo == "ttft_p99_ms<=500,tpot_p99_ms<=40" and p.loadgen.scenario == "Server"


def test_judging_by_loadgen_or_by_an_slo():
    """Without an SLO LoadGen's verdict decides (errors included); with one, every bounded statistic
    must be measured and at or under its bound, and errors fail the run."""
    valid = {"valid": "VALID", "ttft_constraint_ms": 2000.0, "tpot_constraint_ms": 200.0,
             "ttft_ms": {"p50": 100.0, "p99": 1900.0}, "tpot_ms": {"p50": 20.0, "p99": 50.0},
             "latency_ms": {"p50": 300.0, "p99": 900.0}}
    o = judge(valid)
    assert o.passed and o.margin == pytest.approx(0.95) and o.near(0.1)
    o = judge({**valid, "loadgen_errors": {"count": 2, "kinds": {"x: y": 2}}})
    assert not o.passed and "LoadGen logged 2 error" in o.reason
    o = judge({**valid, "valid": "INVALID", "invalid_reason": "early stopping not met"})
    assert not o.passed and o.reason == "early stopping not met"
    o = judge({**valid, "valid": "INVALID"}, parse_slo("ttft_p50_ms<=150,tpot_p99_ms<=60"))
    assert o.passed and o.stats["ttft_p50_ms"] == {"value": 100.0, "limit": 150.0}  # LoadGen not asked
    o = judge(valid, parse_slo("ttft_p99_ms<=1000"))
    assert not o.passed and o.reason == "TTFT p99 1900.0 ms > 1000 ms"
    o = judge({**valid, "ttft_ms": None}, parse_slo("ttft_p99_ms<=1000"))
    assert not o.passed and "not measured" in o.reason and "Offline" in o.reason
    o = judge({**valid, "harness": {"request_errors": 3}}, parse_slo("e2e_p99_ms<=1000"))
    assert not o.passed and o.reason.startswith("3 error(s)")


# ====================================================================== a server of known capacity

BATCH, FIRST_MS, TOKEN_MS, TOKENS = 8, 20.0, 10.0, 8
SERVICE_S = (FIRST_MS + TOKEN_MS * (TOKENS - 1)) / 1000  # 90 ms a request
CAPACITY = BATCH / SERVICE_S  # 88.9 requests/s
QUERIES = 400
SLO = "ttft_p50_ms<=110"  # the first token within one request's service time of its own delay


def _ttft_p50_ms(qps: float, seed: int) -> float:
    """The queue the echo model is: Poisson arrivals (LoadGen Server), BATCH slots, a fixed service time."""
    rng = np.random.default_rng(seed)
    free, out = [0.0] * BATCH, []
    for a in np.cumsum(rng.exponential(1 / qps, QUERIES)):
        start = max(a, heapq.heappop(free))
        heapq.heappush(free, start + SERVICE_S)
        out.append(start - a + FIRST_MS / 1000)
    return float(np.percentile(out, 50) * 1000)


def predicted_max_qps(limit_ms: float) -> float:
    """The load at which the median TTFT over QUERIES queries reaches the limit, averaged over seeds."""
    lo, hi = 0.5 * CAPACITY, 1.5 * CAPACITY
    while hi - lo > 0.005 * CAPACITY:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.mean([_ttft_p50_ms(mid, s) for s in range(60)]) <= limit_ms else (lo, mid)
    return lo


@pytest.fixture
def capacity_server(tmp_path):
    with echo_tritonserver(tmp_path, first_token_delay_ms=str(FIRST_MS), token_delay_ms=str(TOKEN_MS),
                           max_batch=str(BATCH)) as endpoint:
        yield endpoint


def test_search_finds_the_predicted_capacity_of_a_server(capacity_server, tmp_path):
    """Against the echo model with a fixed per-token delay and at most 8 requests generating at once
    (capacity 88.9 requests/s), the search under `ttft_p50_ms<=110` finds the load the queue predicts
    for that limit, within 10%, through real LoadGen Server runs."""
    from harness.loadgen import run_loadgen

    prompts = [[10 + i % 50, 40 + i % 7, 30, 31 + i % 3] for i in range(64)]  # echo + 1 never hits end_id 2
    slo = parse_slo(SLO)
    seen: list[tuple[float, dict]] = []

    def probe(p: Probe) -> Outcome:
        settings = {"server_target_qps": p.value, "min_duration_ms": 0, "min_query_count": QUERIES,
                    "seed": 1 + 1000 * p.repeat}
        r = run_loadgen([capacity_server], "echo", prompts, settings, tmp_path / f"q{p.value:g}-{p.repeat}",
                        scenario="Server", frontends=1, clients_per_frontend=2, warmup_queries=0, end_id=2,
                        max_new_tokens=TOKENS, max_in_flight=256)
        seen.append((p.value, r))
        return judge(r, slo)

    result = drive(Plan(start=40, lowest=20, highest=400, tolerance=0.04), probe)
    predicted = predicted_max_qps(110.0)
    assert 0.9 * CAPACITY < predicted < 1.1 * CAPACITY  # the limit sits at the knee: this is the capacity
    assert result.found is not None and abs(result.found - predicted) <= 0.1 * predicted, (result, predicted)
    assert result.high is not None and result.high > result.found
    # what the found load's run measured is what the server can do: its throughput, the tokens
    best = max((r for v, r in seen if v == result.found), key=lambda r: r["samples_per_s"] or 0)
    assert best["samples_per_s"] == pytest.approx(result.found, rel=0.15)
    assert best["tpot_ms"]["p50"] == pytest.approx(TOKEN_MS, rel=0.3)
    # goodput under MLPerf's llama2-70b Server limits (TTFT 2 s, TPOT 200 ms): every request of a run
    # that met them; a run far past capacity keeps fewer (its queue pushes TTFTs past 2 s)
    assert best["goodput"]["share"] == 1.0 and best["goodput"]["samples_per_s"] <= best["samples_per_s"] * 1.05


def test_no_accuracy_confirms_with_a_performance_run_under_its_own_key():
    """`search --no-accuracy` (issue 48): the found load's confirmation runs no accuracy run, and the
    search's key says so (its upstream, the servers and dataset, is the same either way)."""
    from pipeline import FindMaxLoad

    overrides = SEARCH + ",search.slo=ttft_p99_ms<=300"
    plain, perf = (FindMaxLoad(overrides=overrides, no_accuracy=flag) for flag in (False, True))
    assert type(plain.confirmation(20)).__name__ == "FullRun" and "CheckAccuracy" in plain.confirmation(20).stage_keys()
    confirm = perf.confirmation(20)
    assert type(confirm).__name__ == "PerformanceRun" and "CheckAccuracy" not in confirm.stage_keys()
    assert confirm.clone(type(plain.confirmation(20))).key == plain.confirmation(20).key  # the same run otherwise
    assert perf.key != plain.key


# ====================================================================== the stage on the CPU default

# The full settings are the probes' own, so the confirmation's timed run is the found probe (cached) and
# only its accuracy run is new: short probes pass loads a longer run cannot sustain (docs/operations.md).
SEARCH = ("model.tiny.train_steps=20,quantize.calib_size=4,loadgen.scenario=Server,dataset.num_samples=64,"
          "accuracy.num_samples=16,loadgen.min_duration_ms=1000,loadgen.min_query_count=64")
SEARCH_FLAGS = ("--slo", "ttft_p99_ms<=300", "--probe-min-duration-ms", "1000", "--probe-min-query-count", "64",
                "--start", "20")


def _search(root: Path, *extra: str, overrides: str = SEARCH) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeline", "search", "--overrides", overrides, *SEARCH_FLAGS,
                             "--keep-servers", *extra], cwd=REPO, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _built(run: dict, stage: str) -> set[str]:
    return {k for k, v in run["stages"].items() if v["stage"] == stage and v["status"] == "built"}


def test_search_resumes_after_a_kill_reruns_for_free_and_reuses_probes_when_tightened(built_fast, tmp_path):
    """A search killed mid-probe resumes without measuring a finished probe again; a rerun builds
    nothing; a tighter tolerance measures only the loads it adds. Its search.md, plot, params file
    and user.conf line are written, the params file resolves, and the found load was confirmed.
    (Servers are kept between the runs, which saves a launch each; copied_root stops them.)"""
    with copied_root(built_fast, tmp_path / "root") as root:
        proc = _search(root, "--tolerance", "0.4")
        lines = []
        for line in proc.stdout:  # one progress line per probe
            lines.append(line)
            if "search probe 2:" in line:
                os.killpg(proc.pid, signal.SIGKILL)  # while probe 3 is being measured
                break
        proc.wait(30)
        assert any("search probe 1: server_target_qps=20 (measured): PASS" in x for x in lines), "".join(lines)
        first = run_records(root)[-1]
        assert len(_built(first, "RunLoadgen")) == 2

        out, _ = _search(root, "--tolerance", "0.4").communicate(timeout=400)
        second = run_records(root)[-1]
        assert "search probe 1: server_target_qps=20 (cached)" in out and "probe 3" in out, out
        measured = _built(second, "RunLoadgen")
        assert measured and not measured & _built(first, "RunLoadgen")  # nothing measured twice
        assert not _built(second, "BuildEngine") and "FindMaxLoad" in out
        doc = json.loads(next((root / "FindMaxLoad").glob("*/search.json")).read_text())
        assert doc["found"] is not None and doc["high"] > doc["found"] and (doc["high"] - doc["found"]) <= 0.4 * doc["found"]
        tried = doc["confirmation"]["tried"]  # the found load at full settings, then the next that passed
        assert tried == [doc["confirmation"]["tried"][0]] and tried[0]["value"] == doc["found"] == doc["result"]
        assert tried[0]["valid"] and tried[0]["accuracy_passed"]
        assert {k.split("/")[1] for k in measured} <= {p["key"][:16] for p in doc["probes"]}  # its run: the probe
        art = next((root / "FindMaxLoad").glob("*/search.json")).parent
        assert {"search.md", "search.png", "found.yaml", "user.conf"} <= {p.name for p in art.iterdir()}
        assert (art / "user.conf").read_text() == f"llama2-70b.Server.target_qps = {doc['result']:g}\n"
        assert resolve(art / "found.yaml").loadgen.server_target_qps == doc["result"]
        assert all(f"| {p['value']:g} |" in (art / "search.md").read_text() for p in doc["probes"])

        out, _ = _search(root, "--tolerance", "0.4").communicate(timeout=120)
        assert not any(v["status"] == "built" for v in run_records(root)[-1]["stages"].values()), out
        assert f"found      {doc['found']:g}" in out

        out, _ = _search(root, "--tolerance", "0.2", overrides=SEARCH + ",search.confirm=false").communicate(timeout=400)
        tight = json.loads(sorted((root / "FindMaxLoad").glob("*/search.json"), key=os.path.getmtime)[-1].read_text())
        again = {p["key"] for p in tight["probes"]} & {p["key"] for p in doc["probes"]}
        assert again == {p["key"] for p in doc["probes"]}  # every earlier probe reused
        assert _built(run_records(root)[-1], "RunLoadgen") == {f"RunLoadgen/{p['key'][:16]}" for p in tight["probes"]
                                                              if p["key"] not in again}


# ====================================================================== searches in a sweep, under Nightly

NIGHT_SEARCH = (SEARCH + ",search.slo=ttft_p99_ms<=300,search.probe_min_duration_ms=1000,search.probe_min_query_count=64,"
                "search.start=20,search.tolerance=0.5,search.max_probes=4,search.repeats=1,search.confirm=false")


def test_a_search_on_the_cpu_default_runs_loads_at_the_knee_three_times_and_says_how_sure(built_fast, tmp_path):
    """`search --repeat 3` on the CPU default: every load near the knee (search.noise 0.99: its first run
    within 99% of the limit) is run 3 times and any other once, a load whose runs disagree is retried within
    --retries, and search.md, search.json, the summary and the plot give each load's runs that passed / runs, with the statistic's interval.
    Its probes are judged by the SLO: LoadGen's own verdict on a 16-query probe (INVALID: early stopping)
    is shown as not asked, and the goodput column is under the SLO, not MLPerf's limits."""
    overrides = SEARCH + ",search.noise=0.99,search.highest=40,search.confirm=false"
    with copied_root(built_fast, tmp_path / "root") as root:
        proc = subprocess.run([sys.executable, "-m", "pipeline", "search", "--overrides", overrides, "--slo",
                               "ttft_p99_ms<=300", "--start", "20", "--tolerance", "0.9", "--repeat", "3",
                               "--retries", "2", "--probe-min-duration-ms", "300", "--probe-min-query-count", "16"],
                              cwd=REPO, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode in (0, 10), proc.stdout[-3000:] + proc.stderr[-3000:]
        (out,) = [d for d in (root / "FindMaxLoad").iterdir() if not d.name.startswith(".")]
        doc = json.loads((out / "search.json").read_text())
        tried = {v: (n, k) for v, n, k in doc["tried"]}
        first = {}
        for p in doc["probes"]:
            first.setdefault(p["value"], p)
        for v, (n, k) in tried.items():  # near the knee (its first run within 99% of the limit): 3 runs; else 1
            m = first[v]["margin"]
            assert k >= 3 if m is not None and abs(m - 1) <= 0.99 else k == 1, (v, m, n, k)
        assert any(k >= 3 for _, k in tried.values()), tried
        assert all(k <= 3 or 0 < n < k for n, k in tried.values())  # only a load that flips is retried
        assert sum(k - 3 for _, k in tried.values()) <= 2  # within --retries
        md = (out / "search.md").read_text()
        assert "| load | runs that passed / runs | verdict |" in md
        assert all(f"| {v:g} | {n}/{k} |" in md for v, (n, k) in tried.items())
        assert "goodput (ttft_p99_ms<=300)" in md and "LoadGen's own verdict" in md
        assert (out / "search.png").stat().st_size > 0
        assert "  evidence   " in proc.stdout and "runs passed" in proc.stdout
        log = proc.stdout + proc.stderr
        assert "by the SLO" in log and "RunLoadgen Server: LoadGen's verdict" in log
        if "INVALID" in log:  # a short probe's early-stopping estimate, named as what it is
            assert "LoadGen's own verdict, not asked: INVALID" in log
        assert all((p["goodput"] or {}).get("slo") == "ttft_p99_ms<=300" for p in doc["probes"])


def test_nightly_searches_each_point_names_the_best_and_flags_a_slower_server(built_fast, tmp_path):
    """A sweep whose points are searches (`search: true`) runs one FindMaxLoad per point, and its table
    names the point with the highest load. Under Nightly every night searches afresh, and a server
    made slower (Triton holds each request up to 100 ms in its queue: runtime.max_queue_delay_microseconds)
    is flagged by its probes, exit 13, with its other numbers shown only: a load at or under the previous
    night's found load failed every try, whether tonight's search found a lower load or, on a loaded host,
    none (its bracket [None, ...] after search.max_probes)."""
    sweep = tmp_path / "searches.yaml"
    sweep.write_text(f"name: searches\nbase: {REPO / 'params' / 'default.yaml'}\noverrides: \"{NIGHT_SEARCH}\"\n"
                     "search: true\ngrid:\n  harness.max_in_flight: [2, 16]\n")
    with copied_root(built_fast, tmp_path / "root") as root:
        first = run_luigi("Nightly", "--date", "2026-11-01", "--sweep", str(sweep), artifacts=root)
        assert "search [1/2 harness.max_in_flight=2 (night 2026-11-01, repeat 1)] probe 1:" in first.stderr
        night1 = json.loads((root / "Nightly" / "searches" / "2026-11-01" / "nightly.json").read_text())
        assert night1["regressions"] == [] and all(r["max_load"] for r in night1["rows"])
        best = max(night1["rows"], key=lambda r: r["max_load"])
        sweep_md = next((root / "Sweep").glob("*/sweep.md")).read_text()
        assert f"Best: harness.max_in_flight={best['harness.max_in_flight']}, server_target_qps=" in sweep_md
        assert "| harness.max_in_flight | max server_target_qps |" in sweep_md
        assert tritonservers_under(root) == []  # the sweep stopped its points' servers

        second = run_luigi("Nightly", "--date", "2026-11-02", "--sweep", str(sweep), "--overrides",
                           "runtime.max_queue_delay_microseconds=100000", artifacts=root, check=False)
        assert second.returncode == 13, second.stderr[-3000:]
        night2 = json.loads((root / "Nightly" / "searches" / "2026-11-02" / "nightly.json").read_text())
        reasons = [r for reg in night2["regressions"] for r in reg["reasons"]]
        assert any(r.startswith("max VALID load ") for r in reasons), reasons
        found1 = {r["harness.max_in_flight"]: r["max_load"] for r in night1["rows"]}
        tried2 = {r["harness.max_in_flight"]: {v: (n, k) for v, n, k in r["tried"]} for r in night2["rows"]}
        for reg in night2["regressions"]:  # each such reason cites a load that failed every try tonight ...
            point = reg["point"]["harness.max_in_flight"]
            for r in reg["reasons"]:
                if not r.startswith("max VALID load "):
                    continue
                m = re.fullmatch(r"max VALID load ([\d,.]+) -> (?:[\d,.]+ \([-+][\d.]+%\): tonight|none: nothing "
                                 r"found tonight;) ([\d,.]+) failed all (\d+) tries, at or under the previous "
                                 r"night's ([\d,.]+)", r)
                assert m and m[1] == m[4] == fmt(found1[point]), (r, found1)
                cited = [v for v, (n, k) in tried2[point].items() if fmt(v) == m[2] and n == 0 and k == int(m[3])]
                assert cited and min(cited) <= found1[point], (r, tried2)  # ... at or under last night's
        assert not {s for s, v in statuses(run_records(root)[-1]).items() if v == "built"} & {"PrepareModel", "Quantize"}
        md = (root / "Nightly" / "searches" / "2026-11-02" / "nightly.md").read_text()
        assert "| max VALID load |" in md and "**regression**" in md
        assert tritonservers_under(root) == []
