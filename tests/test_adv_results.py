"""A result never says VALID over something that went wrong (issue 27, items 1 and 12).

- LoadGen's errors make a run INVALID wherever validity is read (result.json, FullRun's report, summary
  and exit code, Sweep rows, Nightly, compare, submission), with the count and the first error lines.
- A model that stops at once is counted as NVIDIA's harness and MLCommons' reference count it (padded
  with the end token to the 2 tokens LoadGen needs), so LoadGen logs no error; scores do not move.
- A server relaunched after a crash mid-measurement shows in result.json, the summary, report.md,
  the sweep table and Nightly.

Real LoadGen runs through perfdag's SUT against the echo servers (Triton gRPC and OpenAI HTTP); the
relaunch is a real FullRun whose server gets SIGSEGV (test_faults.py's crash machinery).
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import mlperf_scoring_fixtures as MF
import numpy as np
import pytest
import reasoning_scoring_fixtures as RF
from conftest import run_records, statuses, tritonservers_under
from echo_servers import OPENAI, echo_server
from test_faults import FAULT, VERDICT, Run, assert_no_orphans, root  # noqa: F401 (root: a fixture)
from test_loadgen_sut import _start_server

from harness.loadgen import run_loadgen
from harness.loadgen.verdict import invalid_reason, is_valid, record_relaunches, relaunch_entry
from harness.mlperf import benchmarks, scoring
from harness.mlperf.accuracy import parse_accuracy_log
from harness.mlperf.compliance import verify
from harness.reports import compare, nightly, sweep
from harness.reports.report import build_report, render_markdown, summary_text
from harness.serving.testing.echo_model import echo_tokens
from harness.serving.triton import cpu_server as CS
from harness.serving.triton import server as TS

pytestmark = pytest.mark.timeout(900)

END = 71          # the echo model stops before it (TRT-LLM semantics: the end token is not returned)
MAX_NEW = 8
ACCURACY = {"scores": {"rouge1": 44.0, "rouge2": 22.0, "rougeL": 28.0, "tokens_per_sample": 8.0}, "target": 0.99,
            "reference_scores": {"rouge1": 44.0, "rouge2": 22.0, "rougeL": 28.0, "tokens_per_sample": 8.0},
            "passed": True, "required": ["rouge1", "rouge2", "rougeL", "tokens_per_sample"], "benchmark": "llama2-70b"}


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    backends = TS.prepare_backend_dir(tmp_path_factory.mktemp("backends"))
    h = _start_server(tmp_path_factory.mktemp("echo"), {"echo": {}, "echo_plain": {}}, backends,
                      not_decoupled=("echo_plain",))
    try:
        yield h
    finally:
        CS.stop_server(h, timeout=20)


def _samples(n: int) -> list[list[int]]:
    """Sample i's output stops at once (i % 3 == 0: its first token is END), after one token (1), or
    never within MAX_NEW tokens (2)."""
    return [[[70, 40 + i, 30], [12 + i, 70, 30], [13 + i, 40, 30]][i % 3] for i in range(n)]


def _error_lines(out: Path) -> list[str]:
    return [ln for ln in (out / "mlperf_log_detail.txt").read_text().splitlines() if '"is_error": true' in ln]


def _report(result: dict) -> dict:
    return build_report({"RunLoadgen": "a" * 64, "FullRun": "b" * 64}, result, ACCURACY, "tiny")


# --- LoadGen's errors -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_loadgen_errors_make_the_run_invalid_with_the_count_and_first_lines_everywhere(echo, tmp_path, scenario):
    """A real run whose every completion reports 1 token (no end id to pad with) logs a LoadGen error per
    query: result.json, the report, the summary, sweep rows, nightly and compare all say INVALID, with the
    count and LoadGen's first error lines, even where LoadGen's own verdict says VALID."""
    samples = [[10 + i, 40, 30] for i in range(24)]
    settings = {"offline_expected_qps": 500, "server_target_qps": 40, "min_duration_ms": 0, "min_query_count": 24,
                "performance_sample_count": 24}
    r = run_loadgen([echo.grpc_url], "echo", samples, settings, tmp_path, scenario=scenario, frontends=1,
                    clients_per_frontend=2, warmup_queries=2, end_id=None, max_new_tokens=1, request_timeout_s=30,
                    progress=False)
    on_disk = json.loads((tmp_path / "result.json").read_text())
    n = len(_error_lines(tmp_path))
    assert n >= 24 and on_disk["loadgen_errors"]["count"] == n == on_disk["num_errors"]
    assert on_disk["valid"] == "INVALID" and not is_valid(on_disk) and r["valid"] == "INVALID"
    if scenario == "Offline":  # the case: LoadGen itself says VALID over its errors
        assert on_disk["loadgen_valid"] == "VALID"
    first = on_disk["loadgen_errors"]["first"]
    assert 1 <= len(first) <= 5 and all(x == "error_runtime: Number of tokens need to be greater than 1" for x in first)
    assert on_disk["loadgen_errors"]["kinds"] == {first[0]: n}
    assert on_disk["invalid_reason"].startswith(f"LoadGen logged {n} error(s): error_runtime: Number of tokens")
    assert "set its end_id" in on_disk["invalid_reason"]  # the fix, named
    assert f"{n} ERRORS encountered" in (tmp_path / "mlperf_log_summary.txt").read_text()

    report = _report(on_disk)
    p = report["performance"]
    assert p["valid"] is False and p["loadgen_errors"]["count"] == n
    md = render_markdown(report, [])
    assert f"**{scenario}**: INVALID (LoadGen logged {n} error(s)" in md
    assert f"> **LoadGen logged {n} error(s)**" in md and f"> - `{first[0]} (x{n})`" in md
    text = summary_text(report, tmp_path)
    assert "  result     INVALID (LoadGen logged" in text and f"  ERRORS     LoadGen logged {n} error(s)" in text
    assert f"               {first[0]} (x{n})" in text and "\033[" not in text
    assert "\033[31mINVALID\033[0m" in summary_text(report, tmp_path, color=True)  # red on a terminal

    row = sweep.row({"loadgen.scenario": scenario}, {**report, "stages": {"FullRun": "b" * 64}})
    assert row["valid"] is False and row["loadgen_errors"] == n and row["invalid_reason"].startswith("LoadGen logged")
    assert "INVALID [1]" in sweep.text_table(["loadgen.scenario"], [row])
    (point,) = nightly.compare([row], [], ["loadgen.scenario"])
    assert point["valid"] == "0/1" and any("INVALID in 1 of 1" in x and "LoadGen logged" in x for x in point["reasons"])
    rows = {m["metric"]: m for m in compare.compare({"name": "a", "report": report, "params": {}},
                                                    {"name": "b", "report": _report({**on_disk, "valid": "VALID",
                                                                                     "loadgen_errors": {"count": 0},
                                                                                     "num_errors": 0}), "params": {}})["metrics"]}
    assert rows["result"]["a"] is False and rows["result"]["b"] is True and rows["LoadGen errors"]["a"] == n


def test_a_result_from_before_the_rule_valid_with_errors_is_invalid():
    """The issue's record, written before errors counted (valid VALID, num_errors 145, no error detail), is
    INVALID to every reader, with the count in the reason; its neighbours (no errors, errors of an accuracy
    run with no verdict, a report's boolean) are judged the same way."""
    old = {"valid": "VALID", "num_errors": 145, "invalid_reason": None, "scenario": "Offline",
           "samples_per_s": 10.0, "tokens_per_s": 300.0}
    assert not is_valid(old) and invalid_reason(old).startswith("LoadGen logged 145 error(s)")
    assert _report(old)["performance"]["valid"] is False
    assert is_valid({**old, "num_errors": 0}) and invalid_reason({**old, "num_errors": 0}) is None
    assert not is_valid({"valid": None, "loadgen_errors": {"count": 3}})  # an accuracy run with errors
    assert is_valid({"valid": True, "loadgen_errors": {"count": 0}}) and not is_valid({"valid": True, "num_errors": 2})
    assert not is_valid({"valid": "INVALID", "loadgen_errors": {"count": 0}})


def test_every_error_the_checker_counts_is_counted_and_nothing_else(tmp_path):
    """An error is what the checker counts: any MLLOG entry whose metadata says is_error, whatever its key
    or JSON spacing (a config error, an uncommitted-changes error); an error_* key marked not an error,
    a warning, or a broken line is not one. Without a detail log the summary's count stands."""
    def entry(key, value, is_error, compact=False):
        obj = {"key": key, "value": value, "metadata": {"is_error": is_error, "is_warning": not is_error}}
        return ":::MLLOG " + json.dumps(obj, separators=(",", ":") if compact else None)

    (tmp_path / "mlperf_log_detail.txt").write_text("\n".join([
        entry("error_invalid_config", "Multiple conf files are used.", True),
        entry("error_uncommitted_loadgen_changes", "Loadgen built with uncommitted changes!", True, compact=True),
        entry("error_runtime", "not really", False), entry("warning_generic_message", "w", False),
        ':::MLLOG {"key": "error_runtime", "metadata": {"is_error": true',  # cut short: not JSON
        entry("result_validity", "VALID", False), entry("num_errors", 2, False)]) + "\n")
    (tmp_path / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
    from harness.loadgen.results import parse_summary

    r = parse_summary(tmp_path)
    assert r["loadgen_errors"]["count"] == 2 and r["valid"] == "INVALID" and r["loadgen_valid"] == "VALID"
    assert r["loadgen_errors"]["first"] == ["error_invalid_config: Multiple conf files are used.",
                                            "error_uncommitted_loadgen_changes: Loadgen built with uncommitted changes!"]
    (tmp_path / "mlperf_log_detail.txt").unlink()
    (tmp_path / "mlperf_log_summary.txt").write_text("Result is : VALID\n3 ERRORS encountered. See detailed log.\n")
    r = parse_summary(tmp_path)
    assert r["valid"] == "INVALID" and r["loadgen_errors"]["count"] == 3
    assert r["invalid_reason"] == "LoadGen logged 3 error(s): see mlperf_log_detail.txt"


# --- a model that stops at once ----------------------------------------------------------------------------------

def test_a_model_that_stops_at_once_logs_no_loadgen_error_over_grpc(echo, tmp_path):
    """Triton gRPC, streamed: a response whose first token is the end token (the echo model, as TRT-LLM,
    returns none) reaches LoadGen as [end] first and [end, end] with n_tokens 2; one token then the end is
    [x, end]; longer outputs are unchanged. LoadGen logs no error, and TEST06's checks pass on the log."""
    samples = _samples(24)
    made = {i: echo_tokens(s, MAX_NEW, end_id=END) for i, s in enumerate(samples)}
    assert [len(made[i]) for i in range(3)] == [0, 1, MAX_NEW]
    r = run_loadgen([echo.grpc_url], "echo", samples, {"server_target_qps": 40, "min_duration_ms": 0,
                                                        "min_query_count": 24, "performance_sample_count": 24},
                    tmp_path / "acc", scenario="Server", mode="AccuracyOnly", frontends=1, clients_per_frontend=2,
                    warmup_queries=2, end_id=END, max_new_tokens=MAX_NEW, request_timeout_s=30, progress=False)
    assert r["loadgen_errors"]["count"] == 0 and not _error_lines(tmp_path / "acc")
    want = {i: t + [END] * (2 - len(t)) for i, t in made.items()}
    assert parse_accuracy_log(tmp_path / "acc" / "mlperf_log_accuracy.json") == want
    entries = {e["qsl_idx"]: e for e in json.loads((tmp_path / "acc" / "mlperf_log_accuracy.json").read_text())}
    assert all(int(e["token_count"]) == len(want[i]) for i, e in entries.items())
    if "token_data" in entries[0]:  # what FirstTokenComplete carried
        assert bytes.fromhex(entries[0]["token_data"]) == np.int32(END).tobytes()
    t06 = verify(tmp_path / "acc" / "mlperf_log_accuracy.json", "Server", END)
    assert t06["eos"] is True and t06["length"] is True and t06["passed"] is (t06["first_token"] in (True, "Skipped"))
    # a performance run counts the same: 2 tokens for a stop at once, no error, the counts match LoadGen's
    for scenario, model in (("Server", "echo"), ("Offline", "echo_plain")):
        out = tmp_path / scenario
        p = run_loadgen([echo.grpc_url], model, samples, {"server_target_qps": 40, "offline_expected_qps": 500,
                                                          "min_duration_ms": 300, "min_query_count": 24,
                                                          "performance_sample_count": 24},
                        out, scenario=scenario, frontends=1, clients_per_frontend=2, warmup_queries=2, end_id=END,
                        max_new_tokens=MAX_NEW, request_timeout_s=30, progress=False)
        assert p["num_errors"] == 0 and p["loadgen_errors"]["count"] == 0, (scenario, p["invalid_reason"])
        assert {q["sample_index"] % 3: q["n_tokens"] for q in p["requests"]} == {0: 2, 1: 2, 2: MAX_NEW}


@pytest.fixture(scope="module")
def openai_echo():
    with echo_server(OPENAI, "--eos-id", str(END)) as url:
        yield url


@pytest.mark.parametrize("scenario", ["Server", "Offline"])
def test_a_model_that_stops_at_once_logs_no_loadgen_error_over_http(openai_echo, tmp_path, scenario):
    """OpenAI HTTP (a vLLM-like server returns the end token in token_ids and stops): a stop at once is
    [end] from the server, logged [end, end] with n_tokens 2; x then the end is [x, end] as returned.
    No LoadGen error; the first token LoadGen got is the end token."""
    from harness.serving.testing.echo_openai import echo_tokens as http_tokens

    api = {"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"}
    samples = [[END - 1, 40, 30], [12, END - 1, 30], [13, 40, 30]] * 8
    r = run_loadgen([openai_echo], "", samples, {"server_target_qps": 40, "offline_expected_qps": 500,
                                                 "min_duration_ms": 0, "min_query_count": 24,
                                                 "performance_sample_count": 24},
                    tmp_path, scenario=scenario, mode="AccuracyOnly", frontends=1, clients_per_frontend=2,
                    warmup_queries=2, end_id=END, max_new_tokens=MAX_NEW, progress=False, protocol="openai-http",
                    api=api)
    assert r["loadgen_errors"]["count"] == 0 and not _error_lines(tmp_path)
    returned = {i: http_tokens(s, MAX_NEW, END) for i, s in enumerate(samples)}
    assert [returned[i] for i in range(2)] == [[END], [13, END]]
    got = parse_accuracy_log(tmp_path / "mlperf_log_accuracy.json")
    assert got == {i: t + [END] * (2 - len(t)) for i, t in returned.items()}
    entries = {e["qsl_idx"]: e for e in json.loads((tmp_path / "mlperf_log_accuracy.json").read_text())}
    if scenario == "Server" and "token_data" in entries[0]:
        assert bytes.fromhex(entries[0]["token_data"]) == np.int32(END).tobytes()


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return MF.load_tokenizer(MF.save_tokenizer(tmp_path_factory.mktemp("tok")))


def _padded(log: list[dict], eos: int) -> tuple[list[dict], int]:
    out, added = [], 0
    for e in log:
        ids = np.frombuffer(bytes.fromhex(e["data"]), dtype=np.int32)
        if ids.size < 2:
            added += 2 - ids.size
            ids = np.concatenate([ids, np.full(2 - ids.size, eos, dtype=np.int32)])
        out.append({**e, "data": ids.astype(np.int32).tobytes().hex()})
    return out, added


@pytest.mark.parametrize("benchmark", [*MF.ROWS, *RF.ROWS])
def test_padding_a_stop_at_once_with_end_tokens_leaves_every_score_but_the_token_count(tok, benchmark):
    """Every scorer (MLCommons' scripts reproduced), on logs with empty and one-token outputs, scores the
    padded log exactly as the unpadded one (the end token decodes to nothing, or to text no answer parser
    reads); only the token counts grow, by the end tokens added, as MLCommons' scripts count them."""
    fx = MF if benchmark in MF.ROWS else RF
    df, log = fx.build(benchmark, tok)
    padded, added = _padded(log, tok.eos_token_id)
    assert added > 0  # the fixtures hold empty and one-token outputs
    runner = RF.fake_code_runner if fx is RF else None
    before = scoring.score_log(benchmarks.get(benchmark), log, df, tok, code_runner=runner)
    after = scoring.score_log(benchmarks.get(benchmark), padded, df, tok, code_runner=runner)
    counts = ("gen_tok_len", "tokens_per_sample")
    for k, v in before.items():
        if not k.startswith("_") and k not in counts:
            assert after[k] == v, (k, v, after[k])
    if "gen_tok_len" in before:  # first entry per qsl_idx
        firsts = {e["qsl_idx"]: e for e in reversed(log)}
        assert after["gen_tok_len"] - before["gen_tok_len"] == _padded(list(firsts.values()), tok.eos_token_id)[1]
    elif "tokens_per_sample" in before:  # the mean over the scored entries
        assert after["tokens_per_sample"] > before["tokens_per_sample"]


@pytest.mark.parametrize("data,passes", [([2, 2], True), ([5, 2], True), ([5, 6, 2], True), ([5, 2, 2], False),
                                         ([2, 2, 2], False), ([2], True)])
def test_test06_accepts_a_padded_stop_at_once_and_no_other_repeated_end(tmp_path, data, passes):
    """perfdag's TEST06 EOS check reads as MLCommons' run_verification.py does (index 0 is never read):
    [end, end], a stop at once padded, passes; any other output ending in two end tokens fails."""
    log = tmp_path / "mlperf_log_accuracy.json"
    entry = {"seq_id": 0, "qsl_idx": 0, "data": np.asarray(data, np.int32).tobytes().hex(), "token_count": len(data)}
    log.write_text(json.dumps([entry]))
    assert verify(log, "Offline", 2)["eos"] is passes


# --- a server relaunched mid-measurement -------------------------------------------------------------------------

def test_relaunches_are_written_into_result_json_and_the_stage_output(tmp_path):
    """The measured attempt and each relaunch (when, why, the crashed attempt, its error, where its files
    are) land in result.json and in the stage's output, its `result` where it has one (RunLoadgen) or at
    its top (RunAccuracy); a run without a crash says so (no relaunches, attempt 1)."""
    (tmp_path / "result.json").write_text(json.dumps({"valid": "VALID"}))
    entry = relaunch_entry("2026-11-02T01:02:03+00:00", 1, ["server 0 (pid 42) crashed (SIGSEGV)"], "gone", "/r/f")
    doc = {"result": {"valid": "VALID"}}
    record_relaunches(tmp_path, doc, [entry], 2)
    on_disk = json.loads((tmp_path / "result.json").read_text())
    for got in (on_disk, doc["result"]):
        assert got["measured_attempt"] == 2 and got["relaunches"] == [entry] and got["valid"] == "VALID"
    assert entry["why"] == "server 0 (pid 42) crashed (SIGSEGV)" and entry["kept"] == "/r/f"
    flat = {"samples": 3}
    record_relaunches(tmp_path / "none", flat, [], 1)  # no result.json there: the output only
    assert flat == {"samples": 3, "relaunches": [], "measured_attempt": 1}


def _relaunched_row(report: dict, repeat: int = 1) -> dict:
    return {**sweep.row({"build.max_batch_size": 8}, report), "repeat": repeat}


def test_a_relaunch_shows_in_the_summary_report_sweep_and_nightly_with_the_flags_rules():
    """A VALID run measured on a relaunched server stays VALID, and says so: a RELAUNCH line in the
    summary, a note in report.md and the sweep table, and in Nightly a reason (as an INVALID repeat is
    one) and a 'runs without a server relaunch' row, judged over the repeats; a previous night recorded
    before relaunches were counted reads as relaunch-free."""
    entry = relaunch_entry("2026-11-02T01:02:03+00:00", 1, ["server 0 (pid 42) crashed (SIGSEGV)"], "gone", "/r/f")
    perf = {"valid": "VALID", "loadgen_errors": {"count": 0}, "scenario": "Offline", "samples_per_s": 10.0,
            "tokens_per_s": 300.0, "relaunches": [entry], "measured_attempt": 2}
    report = {**_report(perf), "stages": {"FullRun": "b" * 64}}
    assert report["performance"]["valid"] is True and report["performance"]["measured_attempt"] == 2
    text = summary_text(report, Path("/r"))
    assert "  result     VALID" in text
    assert ("  RELAUNCH   server 0 (pid 42) crashed (SIGSEGV) at 2026-11-02T01:02:03+00:00 during attempt 1; "
            "relaunched and measured again from the start (measured: attempt 2; the crashed attempt's files: /r/f)") in text
    assert "> **Server relaunched mid-measurement**: server 0 (pid 42) crashed" in render_markdown(report, [])
    row = _relaunched_row(report)
    assert row["relaunches"] == 1 and "VALID [1]" in sweep.text_table(["build.max_batch_size"], [row])
    clean = _relaunched_row({**_report({**perf, "relaunches": [], "measured_attempt": 1}), "stages": {"FullRun": "c"}})
    old_night = {k: v for k, v in clean.items() if k not in ("relaunches", "relaunch_why")}
    (p,) = nightly.compare([row, {**clean, "repeat": 2}], [old_night], ["build.max_batch_size"])
    assert p["relaunch_free"] == "1/2" and p["relaunches"] == 1 and p["previous"]["relaunch_free"] == "1/1"
    assert any(r.startswith("a server crashed mid-measurement and was relaunched in 1 of 2 repeat(s), 1 relaunch(es): "
                            "server 0 (pid 42)") for r in p["reasons"])
    md = nightly.render_markdown({"date": "2026-11-02", "compared_with": "2026-11-01", "points": [p]})
    assert "| runs without a server relaunch | 1/1 | 1/2 | - | - | **regression** |" in md
    (ok,) = nightly.compare([clean], [old_night], ["build.max_batch_size"])
    assert ok["reasons"] == [] and ok["relaunch_free"] == "1/1"


def test_a_server_crashing_mid_measurement_is_relaunched_measured_again_and_recorded(root):
    """A FullRun whose server segfaults mid-measurement relaunches it and measures again from nothing; the
    run is whole and VALID, and the relaunch (when, why, attempt, the crashed attempt's files) is in
    result.json, the printed summary, report.md, and, through the sweep row, Nightly's reasons."""
    # Relaunches to spare: tritonserver 2.51 on CPU may also crash for real on a loaded machine.
    run = Run(root, "FullRun", "--overrides", FAULT + ",loadgen.min_duration_ms=6000,harness.server_relaunches=4")
    run.wait_building("RunLoadgen")
    (victim,) = tritonservers_under(root)
    time.sleep(2)
    os.kill(victim, signal.SIGSEGV)  # tritonserver's handler logs "Signal (11) received." as in a real crash
    rc = run.finish()
    assert rc in VERDICT, run.text[-3000:]
    assert f"server 0 (pid {victim}) crashed (SIGSEGV" in run.text and "measuring again from the start" in run.text
    record = run_records(root)[-1]
    relaunch = record["server_relaunches"][0]  # the one we caused (any later one: a real crash)
    assert relaunch["stage"] == "RunLoadgen" and str(victim) in relaunch["servers"][0] and "failed" not in record
    kept = Path(relaunch["kept"])  # the crashed attempt's files, beside the run's record
    assert (kept / "harness.log").is_file() and list(kept.glob("server0-*.tail"))
    assert not tritonservers_under(root)  # FullRun stopped the relaunched server too
    (perf_dir,) = [f.parent for f in root.glob("RunLoadgen/*/manifest.json")]
    measured = json.loads((perf_dir / "manifest.json").read_text())
    assert measured["result"]["valid"] == "VALID"  # a whole run on the relaunched server
    assert statuses(record)["LaunchServers"] == "built" and statuses(record)["RunAccuracy"] == "built"
    # the record: result.json and the stage's output
    result = json.loads((perf_dir / "result.json").read_text())
    mine = result["relaunches"][0]
    assert mine["attempt"] == 1 and str(victim) in mine["why"] and mine["kept"] == str(kept) and mine["at"]
    assert result["measured_attempt"] == len(result["relaunches"]) + 1 == measured["result"]["measured_attempt"]
    # the printed summary and report.md
    assert f"  RELAUNCH   server 0 (pid {victim}) crashed (SIGSEGV" in run.text
    (report_dir,) = [f.parent for f in root.glob("FullRun/*/report.json")]
    assert f"> **Server relaunched mid-measurement**: server 0 (pid {victim}) crashed" in (report_dir / "report.md").read_text()
    # Nightly: the night's row of this run carries the relaunch, and it is a reason
    report = json.loads((report_dir / "report.json").read_text())
    (p,) = nightly.compare([sweep.row({}, report)], [], [])
    assert p["relaunch_free"] == "0/1" and any(f"pid {victim}" in r for r in p["reasons"])
    assert_no_orphans(root)

