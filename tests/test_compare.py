"""`python -m pipeline compare`: two FullRuns side by side, named by report, key or run id, each metric
with its noise, and a change called worse or better only outside it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.cache import integrity, observations
from harness.cache.store import ArtifactStore
from harness.errors import InputError
from pipeline.cli import main


def fullrun(root, key16, tokens, tpot99, batch, run_id=None):
    d = root / "FullRun" / key16
    d.mkdir(parents=True)
    report = {"model": "tiny-llama", "stages": {"FullRun": key16 * 4},
              "performance": {"scenario": "Server", "valid": True, "tokens_per_second": tokens,
                              "samples_per_second": tokens / 32, "ttft_ms": {"p50": 9.3, "p90": 20.0, "p99": 51.0},
                              "tpot_ms": {"p50": 1.1, "p90": 3.3, "p99": tpot99}, "latency_ms": {"p99": 90.0}},
              "accuracy": {"passed": True, "rouge1": 100.0, "tokens_per_sample": 32.0}}
    (d / "report.json").write_text(json.dumps(report))
    params = {"build": {"max_batch_size": batch, "dtype": "float32"}, "loadgen": {"scenario": "Server"}}
    files, links = integrity.describe(d)  # published as the store publishes: compare checks it
    (d / "manifest.json").write_text(json.dumps({"key": key16 * 4, "resolved_params": params, "files": files,
                                                 "links": links, "observation": run_id or "20261124T000000000000Z-9"}))
    if run_id:
        r = root / "runs" / run_id
        r.mkdir(parents=True)
        (r / "run.json").write_text(json.dumps({"stages": {f"FullRun/{key16}": {"stage": "FullRun", "key": key16 * 4,
                                                                                   "status": "built", "observation": run_id}}}))
    return d


def test_compare_prints_metrics_side_by_side_and_only_the_differing_parameters(artifacts, capsys):
    """One observation a side: the change is shown, and not judged (no noise was measured), with why."""
    fullrun(artifacts, "a" * 16, 617.4, 10.05, 32, run_id="20261124T010000000000Z-1")
    b = fullrun(artifacts, "b" * 16, 617.0, 2.7, 8)
    assert main(["compare", "20261124T010000000000Z-1", str(b / "report.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    tpot = next(x for x in out if x.startswith("TPOT p99 ms"))
    assert tpot.split() == ["TPOT", "p99", "ms", "(LoadGen)", "10.1", "2.70", "-73.1%", "not", "judged", "[1]"]
    assert "[1] 1 against 1 repeats cannot show a change at p <= 0.1; measure 3 each (--repeat 3)" in out
    assert next(x for x in out if x.startswith("tokens/s")).split()[1:] == [  # Server: follows the target
        "617.4", "617", "-0.1%", "not", "judged", "(follows", "the", "target", "QPS)"]
    params = out[out.index(next(x for x in out if x.startswith("parameter"))) + 1:]
    assert [p.split() for p in params] == [["build.max_batch_size", "32", "8"]]  # dtype, scenario: the same


def test_compare_by_key_prefix_json_and_a_clear_error(artifacts, capsys):
    fullrun(artifacts, "a" * 16, 600.0, 10.0, 32)
    fullrun(artifacts, "b" * 16, 660.0, 10.0, 32)
    assert main(["compare", "aaaa", "bbbb", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["params"] == [] and next(m for m in doc["metrics"] if m["metric"] == "tokens/s")["delta"] == pytest.approx(0.1)
    assert main(["compare", "aaaa", "nothing-like-it"]) == 2
    err = capsys.readouterr().err
    assert "'nothing-like-it': no FullRun, PerformanceRun, Bench or RunSessions key under" in err and "nor is it a report.json, its directory" in err
    assert main(["compare", "aaaa", "no/such/report.json"]) == 2
    err = capsys.readouterr().err
    assert "'no/such/report.json': not a report.json or its directory, a FullRun, PerformanceRun, Bench or RunSessions key" in err
    with pytest.raises(InputError):
        from pipeline.cli.compare import resolve
        resolve("", ArtifactStore(artifacts))


def test_compare_across_scenarios_warns_and_judges_nothing(artifacts, capsys):
    """Server against Offline: a latency that is 27x is two definitions, not a regression; and Offline's
    throughput does not follow any target."""
    fullrun(artifacts, "a" * 16, 200.0, 10.0, 32)
    b = fullrun(artifacts, "b" * 16, 626.4, 9.0, 32)
    doc = json.loads((b / "report.json").read_text())
    doc["performance"]["scenario"] = "Offline"
    doc["performance"]["latency_ms"]["p99"] = 2488.0
    (b / "report.json").write_text(json.dumps(doc))
    m = json.loads((b / "manifest.json").read_text())
    m["files"], m["links"] = integrity.describe(b)
    (b / "manifest.json").write_text(json.dumps(m))
    assert main(["compare", "aaaa", "bbbb"]) == 0
    out = capsys.readouterr().out
    assert "warning: A is Server and B is Offline: different scenarios measure different things" in out
    latency = next(x for x in out.splitlines() if x.startswith("latency p99 ms"))
    assert "+2664.4%" in latency and "worse" not in latency and "not judged" in latency
    assert "follows the target" not in out and "worse" not in out and "better" not in out


def observe(store: ArtifactStore, key: str, run_id: str, tokens: float, tpot99: float, scenario: str = "Offline",
            host: dict | None = None, stage: str = "FullRun") -> str:
    """Publishes one `stage` (FullRun, PerformanceRun, Bench or RunSessions) observation of `key` as a run (or a repeat of it) does, and
    its run's record; returns its id."""
    latest = store.manifest(stage, key)
    taken = set(observations.archived_ids(store.root, stage, key))
    taken |= {observations.id_of(latest)} if latest else set()
    obs = observations.new_id(run_id, taken)
    report = {"model": "tiny", "stages": {"FullRun": key},
              "performance": {"scenario": scenario, "valid": True, "tokens_per_second": tokens,
                              "samples_per_second": tokens / 32, "ttft_ms": {"p50": 5.0, "p90": 8.0, "p99": 9.0},
                              "tpot_ms": {"p50": tpot99 / 2, "p90": tpot99 / 1.5, "p99": tpot99},
                              "latency_ms": {"p99": 40.0}},
              "accuracy": None if stage == "Bench" else {"passed": True, "rouge1": 50.0, "tokens_per_sample": 32.0},
              "host": host, "observations": {stage: obs}}

    def make(out):
        (out / "report.json").write_text(json.dumps(report))
        return {}
    with store.lock(stage, key):
        store.build(stage, key, make, {"run_id": run_id, observations.FIELD: obs,
                                       "resolved_params": {"build": {"max_batch_size": int(key[0], 16)}}},
                    archive=True)
    record = store.root / "runs" / run_id / "run.json"
    doc = json.loads(record.read_text()) if record.is_file() else {"stages": {}}
    doc["stages"][f"{stage}/{key[:16]}"] = {"stage": stage, "key": key, "status": "built", "observation": obs}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(doc))
    return obs


def _series(store, key, run_id, tokens, tpot, sd, rng, n=3):
    for _ in range(n):
        observe(store, key, run_id, tokens * rng.lognormal(0, sd), tpot * rng.lognormal(0, sd))


def test_series_that_differ_only_by_noise_are_within_noise_and_a_real_shift_is_called(artifacts, capsys):
    """Two configurations measured 3 times each (--repeat 3) whose numbers differ only by 3% noise:
    every metric is within noise, each side shown as median [interval]. A third whose tokens/s is 20%
    lower and TPOT 30% higher: worse, both, with Mann-Whitney's p."""
    store = ArtifactStore(artifacts)
    rng = np.random.default_rng(47)
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    _series(store, a, "20261101T000000000000Z-1", 600.0, 20.0, 0.03, rng)
    _series(store, b, "20261102T000000000000Z-2", 600.0, 20.0, 0.03, rng)
    _series(store, c, "20261103T000000000000Z-3", 480.0, 26.0, 0.03, rng)
    assert main(["compare", "aaaa", "bbbb", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["repeats"]["a"] == {"n": 3, "from": "its run's 3 repeats", "observations": [
        "20261101T000000000000Z-1.3", "20261101T000000000000Z-1.2", "20261101T000000000000Z-1"]}
    judged = [m for m in doc["metrics"] if m["verdict"] not in ("shown only",)]
    assert judged and all(m["verdict"] == "within noise" for m in judged), judged
    tokens = next(m for m in doc["metrics"] if m["metric"] == "tokens/s")
    assert tokens["a_spread"]["n"] == 3 and tokens["a_spread"]["confidence"] == 0.75
    assert main(["compare", "aaaa", "cccc"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"A: FullRun {a[:16]}@20261101T000000000000Z-1.3 (its run's 3 repeats)"
    tok = next(x for x in out if x.startswith("tokens/s"))
    assert "[" in tok and tok.endswith("worse (p = 0.1)")
    assert next(x for x in out if x.startswith("TPOT p99 ms")).endswith("worse (p = 0.1)")
    assert "values with repeats: median [interval of the median, 75% confidence]" in out


def test_two_repeats_of_one_key_are_never_worse(artifacts, capsys):
    """The same parameters measured twice are one configuration: a 2x difference between its observations
    is noise (a busy host, say), said so, never a regression."""
    store = ArtifactStore(artifacts)
    key = "d" * 64
    first = observe(store, key, "20261101T000000000000Z-1", 600.0, 20.0)
    observe(store, key, "20261102T000000000000Z-2", 300.0, 45.0)
    assert main(["compare", f"dddd@{first}", "dddd"]) == 0
    out = capsys.readouterr().out
    assert "observations of one key, the same parameters measured again" in out
    assert "worse" not in out.replace("never worse", "") and "better" not in out.replace("or better", "")
    assert "within noise" in next(x for x in out.splitlines() if x.startswith("tokens/s"))


def test_compare_warns_when_the_hosts_differed(artifacts, capsys):
    store = ArtifactStore(artifacts)
    quiet = {"hostname": "node1", "usable_cpus": 8, "others_cpus": 0.1, "busy": False, "busy_reasons": []}
    busy = {"hostname": "node1", "usable_cpus": 8, "others_cpus": 3.2, "busy": True,
            "busy_reasons": ["other processes used 3.20 of 8 CPUs on average"]}
    observe(store, "e" * 64, "20261101T000000000000Z-1", 600.0, 20.0, host=quiet)
    observe(store, "f" * 64, "20261102T000000000000Z-2", 400.0, 30.0, host=busy)
    assert main(["compare", "eeee", "ffff"]) == 0
    out = capsys.readouterr().out
    assert "warning: the hosts differed: B's host was busy (other processes used 3.20 of 8 CPUs" in out
    assert "warning: B: 1 of 1 observation(s) measured on a busy host" in out


BENCH = "be" * 32


def test_a_bench_key_is_listed_by_history_and_compared_by_run_id_key_and_observation(artifacts, capsys):
    """`bench`'s reports are observations like FullRun's: history lists a Bench key's, and compare takes
    the run ids that made them, KEY@OBSERVATION and the key (its latest), each named as a Bench."""
    store = ArtifactStore(artifacts)
    first = observe(store, BENCH, "20261101T000000000000Z-1", 600.0, 20.0, stage="Bench")
    second = observe(store, BENCH, "20261102T000000000000Z-2", 500.0, 25.0, stage="Bench")
    assert main(["history", BENCH[:6]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"Bench {BENCH[:16]}: 2 observation(s), newest first")
    assert f"compare names one as {BENCH[:8]}@OBSERVATION" in out[0]
    assert out[2].split()[:2] == [second, "*"] and out[2].split()[4:7] == ["Offline", "VALID", "500"]
    assert out[3].split()[0] == first and out[2].split()[-2] == "-"  # accuracy: a Bench makes no accuracy run
    assert main(["history", BENCH, "--json"]) == 0  # the whole key, longer than a directory's name
    doc = json.loads(capsys.readouterr().out)
    assert doc["stage"] == "Bench" and [o["observation"] for o in doc["observations"]] == [second, first]
    for a, b in ((first, second), (f"{BENCH[:8]}@{first}", BENCH[:8])):
        assert main(["compare", a, b]) == 0
        out = capsys.readouterr().out
        assert f"A: Bench {BENCH[:16]}@{first}" in out and f"B: Bench {BENCH[:16]}@{second}" in out
        assert "observations of one key, the same parameters measured again" in out
        tokens = next(x for x in out.splitlines() if x.startswith("tokens/s"))  # each side: the key's observations
        assert tokens.split()[1:6] == ["550", "[500..600]", "550", "[500..600]", "+0.0%"]
        assert tokens.endswith("within noise")
        assert main(["compare", a, b, "--json"]) == 0
        row = next(m for m in json.loads(capsys.readouterr().out)["metrics"] if m["metric"] == "tokens/s")
        assert (row["a"], row["b"], row["verdict"]) == (600.0, 500.0, "within noise")  # the named observations


def test_a_bench_and_a_fullrun_compare_on_the_metrics_both_hold(artifacts, capsys):
    """A FullRun against a Bench (perfdag's server against one it did not build): judged on the LoadGen and
    client metrics, said so, and the accuracy only the FullRun has shown as such."""
    store = ArtifactStore(artifacts)
    observe(store, "a" * 64, "20261101T000000000000Z-1", 600.0, 20.0)
    observe(store, BENCH, "20261102T000000000000Z-2", 300.0, 45.0, stage="Bench")
    assert main(["compare", "aaaa", "20261102T000000000000Z-2"]) == 0
    out = capsys.readouterr().out
    assert f"A: FullRun {'a' * 16}@20261101T000000000000Z-1" in out and f"B: Bench {BENCH[:16]}@" in out
    assert "warning: A is a FullRun and B a Bench: the same LoadGen and client metrics" in out
    assert "-50.0%" in next(x for x in out.splitlines() if x.startswith("tokens/s"))
    assert next(x for x in out.splitlines() if x.startswith("accuracy")).split()[1:] == ["PASS", "-"]


def test_a_prefix_of_a_fullrun_and_a_bench_key_or_a_run_of_neither_is_refused_naming_them(artifacts, capsys):
    store = ArtifactStore(artifacts)
    fullrun_key, bench_key = "ab" + "1" * 62, "ab" + "2" * 62
    observe(store, fullrun_key, "20261101T000000000000Z-1", 600.0, 20.0)
    observe(store, bench_key, "20261101T000000000000Z-1", 600.0, 20.0, stage="Bench")  # one run: both
    for args in (["history", "ab"], ["compare", "ab", "ab1"], ["compare", "20261101T000000000000Z-1", "ab1"]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert f"FullRun {fullrun_key[:16]}" in err and f"Bench {bench_key[:16]}" in err, (args, err)
        assert ("give more characters" in err or "name one by its key" in err) and "Traceback" not in err
    assert main(["history", "ab2"]) == 0 and "Bench ab22222222222222: 1 observation" in capsys.readouterr().out
    r = artifacts / "runs" / "20261103T000000000000Z-3"
    r.mkdir(parents=True)
    (r / "run.json").write_text(json.dumps({"stages": {"PrepareDataset/x": {"stage": "PrepareDataset", "key": "x" * 64,
                                                                            "status": "built"}}}))
    assert main(["compare", "20261103T000000000000Z-3", "ab1"]) == 2
    err = capsys.readouterr().err
    assert "run 20261103T000000000000Z-3 touched 0 FullRun, PerformanceRun, Bench or RunSessions reports (none; it ran PrepareDataset)" in err
    assert main(["history", "ffff"]) == 2
    err = capsys.readouterr().err
    assert f"'ffff': no FullRun, PerformanceRun, Bench or RunSessions key under {artifacts} starts with it, and it is no params file" in err
    assert f"the keys are the directory names under {artifacts / 'FullRun'}, {artifacts / 'PerformanceRun'}, {artifacts / 'Bench'} and {artifacts / 'RunSessions'}" in err


def test_a_bench_observation_named_by_its_directory_is_checked_as_one(artifacts, capsys):
    """A kept Bench observation's directory, edited since it was published: found as the observation it
    is, so refused, as a FullRun's is."""
    store = ArtifactStore(artifacts)
    first = observe(store, BENCH, "20261101T000000000000Z-1", 600.0, 20.0, stage="Bench")
    observe(store, BENCH, "20261102T000000000000Z-2", 500.0, 25.0, stage="Bench")
    kept = observations.archive_dir(artifacts, "Bench", BENCH) / first
    assert main(["compare", str(kept), str(store.path("Bench", BENCH) / "report.json")]) == 0
    assert f"A: Bench {BENCH[:16]}@{first}" in capsys.readouterr().out
    (kept / "report.json").write_text((kept / "report.json").read_text().replace("600.0", "900.0"))
    assert main(["compare", str(kept), BENCH[:8]]) == 2
    assert f"Bench {BENCH[:16]}" in (err := capsys.readouterr().err) and "not trusted" in err
    assert main(["history", BENCH[:8]]) == 0
    assert "refused: report.json: content differs" in capsys.readouterr().out


def test_history_all_as_csv_gives_one_row_per_observation_of_every_key_with_its_metrics_and_host(artifacts, capsys):
    """`history --all --csv`: every FullRun and Bench observation in the root (a Nightly's nights are FullRun
    observations), one row each, newest first, with every summary metric and the host's state; an
    observation that is not what was published keeps its row, saying why."""
    import csv
    import io

    store = ArtifactStore(artifacts)
    full = "a1" * 32
    host = {"busy": False, "load_before": [0.4, 0.5, 0.6], "others_cpus": 0.02, "client_cpu_s": 1.5}
    o1 = observe(store, full, "20261101T000000000000Z-1", 600.0, 20.0, host=host)
    o2 = observe(store, full, "20261102T000000000000Z-2", 610.0, 21.0, host={**host, "busy": True})
    o3 = observe(store, BENCH, "20261103T000000000000Z-3", 500.0, 25.0, stage="Bench")
    assert main(["history", "--all", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["stage"], r["key"], r["observation"]) for r in rows] == [
        ("Bench", BENCH, o3), ("FullRun", full, o2), ("FullRun", full, o1)]
    by = {r["observation"]: r for r in rows}
    assert by[o1]["tokens_per_second"] == "600.0" and by[o1]["tpot_ms.p99"] == "20.0" and by[o1]["ttft_ms.p50"] == "5.0"
    assert by[o1]["accuracy.rouge1"] == "50.0" and by[o1]["accuracy.passed"] == "True" and by[o3]["accuracy.passed"] == ""
    assert (by[o1]["host.busy"], by[o2]["host.busy"], by[o1]["host.load_before"]) == ("False", "True", "0.4")
    assert by[o2]["run_id"] == "20261102T000000000000Z-2" and by[o2]["latest"] == "True" and by[o1]["latest"] == "False"
    # one key's rows alone; an edited archived report is refused but listed
    (store.root / "observations" / "FullRun" / full[:16] / o1 / "report.json").write_text("{}")
    assert main(["history", full[:6], "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["observation"] for r in rows] == [o2, o1] and rows[1]["refused"] and not rows[0]["refused"]
    assert rows[1]["tokens_per_second"] == ""
    assert main(["history", "--all"]) == 0  # a table per key
    out = capsys.readouterr().out
    assert f"Bench {BENCH[:16]}: 1 observation(s)" in out and f"FullRun {full[:16]}: 2 observation(s)" in out
    with pytest.raises(SystemExit):
        main(["history", "--all", "--csv", "--json"])
    assert main(["history"]) == 2 and "or give --all" in capsys.readouterr().err
