"""Measurements are observations: every execution of a measuring stage's key is kept, named by its run,
listed by `history`, compared by `compare`, aged by `gc`, and none can be passed off as another's."""
from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta, timezone

import pytest
from conftest import FAST, SHORT, copied_root, run_luigi, run_records

from harness.cache import observations, signing
from harness.cache.store import ArtifactStore
from harness.gc.collect import plan
from pipeline.cli import main

KEY = "ab" * 32
OTHER = "cd" * 32


def measure(store: ArtifactStore, run_id: str, tokens: float, key: str = KEY, stage: str = "FullRun") -> dict:
    """Publishes one observation of `key` as a measuring stage does: a new id, the last one archived."""
    latest = store.manifest(stage, key)
    taken = set(observations.archived_ids(store.root, stage, key)) | ({observations.id_of(latest)} if latest else set())
    obs = observations.new_id(run_id, taken)

    def make(out):
        report = {"performance": {"scenario": "Offline", "valid": True, "tokens_per_second": tokens,
                                  "samples_per_second": tokens / 10}, "accuracy": {"passed": True}}
        (out / "report.json").write_text(json.dumps(report))
        return {}
    with store.lock(stage, key):
        return store.build(stage, key, make, {"run_id": run_id, observations.FIELD: obs,
                                              "resolved_params": {"build": {"max_batch_size": 8}}}, archive=True)


@pytest.fixture
def store(artifacts, tmp_path, monkeypatch):
    key_file = tmp_path / "key"
    # Text, as the docs make it: raw random bytes may start or end in whitespace, which load_key strips
    # (the CLI's key would then differ from this store's about one run in twenty).
    key_file.write_text(os.urandom(32).hex())
    key_file.chmod(0o600)
    monkeypatch.setenv("PERFDAG_SIGNING_KEY_FILE", str(key_file))
    return ArtifactStore(artifacts, signing_key=signing.load_key(key_file))


def test_each_execution_of_one_key_is_kept_with_its_own_id_and_the_latest_is_what_reuse_takes(store):
    """Re-measuring a key keeps the earlier observation, files and all; the key's path holds the newest."""
    measure(store, "20261101T000000000000Z-1", 100.0)
    measure(store, "20261102T000000000000Z-2", 130.0)
    measure(store, "20261102T000000000000Z-2", 140.0)  # a repeat within one run: <run id>.2
    found = store.observations("FullRun", KEY)
    assert [o["id"] for o in found] == ["20261102T000000000000Z-2.2", "20261102T000000000000Z-2",
                                        "20261101T000000000000Z-1"]
    assert found[0]["latest"] and found[0]["dir"] == store.path("FullRun", KEY)
    assert [json.loads((o["dir"] / "report.json").read_text())["performance"]["tokens_per_second"]
            for o in found] == [140.0, 130.0, 100.0]
    assert all(store.observation_problems("FullRun", KEY, o) == [] for o in found)


def test_observations_finished_in_one_millisecond_still_list_newest_first(store, monkeypatch):
    """`finished_at` has millisecond resolution; quick repeats (and two runs) can share one. The order
    then follows the runs' start times and the repeat numbers, `.10` after `.9`."""
    import harness.cache.store as store_module
    monkeypatch.setattr(store_module, "utc_now", lambda: "2026-11-28T12:00:00.000+00:00")
    measure(store, "20261101T000000000000Z-1", 100.0)
    for n in range(10):
        measure(store, "20261102T000000000000Z-2", 200.0 + n)
    ids = [o["id"] for o in store.observations("FullRun", KEY)]
    run = "20261102T000000000000Z-2"
    assert ids == [f"{run}.{n}" for n in range(10, 1, -1)] + [run, "20261101T000000000000Z-1"]


def test_a_forged_finished_at_of_any_json_type_is_listed_and_refused(store, capsys):
    """Manifests are sorted before they are verified: a kept observation whose manifest's finished_at
    was rewritten as a number or a list does not crash history; it is listed last and refused."""
    for n in (1, 2, 3):
        measure(store, f"2026110{n}T000000000000Z-{n}", 100.0 + n)
    base = observations.archive_dir(store.root, "FullRun", KEY)
    for obs_id, forged in (("20261101T000000000000Z-1", 5), ("20261102T000000000000Z-2", ["x"])):
        m = json.loads((base / obs_id / "manifest.json").read_text())
        m["finished_at"] = forged
        (base / obs_id / "manifest.json").write_text(json.dumps(m))
    found = store.observations("FullRun", KEY)
    assert [o["id"] for o in found] == ["20261103T000000000000Z-3", "20261102T000000000000Z-2",
                                        "20261101T000000000000Z-1"]
    assert all(store.observation_problems("FullRun", KEY, o) for o in found[1:])
    assert main(["history", KEY[:8]]) == 0
    out = capsys.readouterr().out
    assert out.count("refused: ") == 2 and "20261103T000000000000Z-3 *" in out


def test_a_build_that_is_no_observation_still_replaces_its_artifact(store):
    """Only observing stages archive: a rebuilt engine replaces the old one, nothing kept beside it."""
    for n in (1, 2):
        with store.lock("BuildEngine", KEY):
            store.build("BuildEngine", KEY, lambda out, n=n: (out / "w").write_text(str(n)) and {}, {"run_id": f"r-{n}"})
    assert [o["id"] for o in store.observations("BuildEngine", KEY)] == ["r-2"]
    assert not (store.root / observations.OBSERVATIONS).exists()


def test_an_observation_cannot_be_passed_off_as_another(store, capsys):
    """A kept observation whose file was edited, which was renamed to another id, copied under another
    key, or whose manifest was rewritten without the key, is refused by history and compare."""
    measure(store, "20261101T000000000000Z-1", 100.0)
    measure(store, "20261102T000000000000Z-2", 130.0)
    measure(store, "20261103T000000000000Z-3", 160.0)
    measure(store, "20261103T000000000000Z-3", 170.0, key=OTHER)
    measure(store, "20261104T000000000000Z-4", 180.0, key=OTHER)
    base = observations.archive_dir(store.root, "FullRun", KEY)
    first, second = base / "20261101T000000000000Z-1", base / "20261102T000000000000Z-2"

    def refused(obs_id, key=KEY):
        o = next(o for o in store.observations("FullRun", key) if o["id"] == obs_id)
        return store.observation_problems("FullRun", key, o)

    # an edit that keeps the size (and the mtime): the content is re-hashed
    report = first / "report.json"
    st = report.stat()
    report.write_text(report.read_text().replace("100.0", "999.0"))
    os.utime(report, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "content differs" in refused("20261101T000000000000Z-1")[0]
    # another observation moved into this one's place (the ids swapped)
    second.rename(base / "20261102T000000000000Z-9")
    assert "another observation put in its place" in refused("20261102T000000000000Z-9")[0]
    # another key's observation copied in
    shutil.copytree(observations.archive_dir(store.root, "FullRun", OTHER) / "20261103T000000000000Z-3",
                    base / "20261103T000000000000Z-3x")
    assert "another key's observation" in refused("20261103T000000000000Z-3x")[0]
    # a manifest rewritten to name a better number's files: its signature no longer holds
    m = json.loads((observations.archive_dir(store.root, "FullRun", OTHER) / "20261103T000000000000Z-3"
                    / "manifest.json").read_text())
    m["resolved_params"]["build"]["max_batch_size"] = 64
    (observations.archive_dir(store.root, "FullRun", OTHER) / "20261103T000000000000Z-3" / "manifest.json") \
        .write_text(json.dumps(m))
    assert "signature is wrong" in refused("20261103T000000000000Z-3", OTHER)[0]

    assert main(["compare", f"{KEY[:8]}@20261101T000000000000Z-1", KEY[:8]]) == 2
    err = capsys.readouterr().err
    assert "not trusted" in err and "content differs" in err
    assert main(["history", KEY[:8]]) == 0
    out = capsys.readouterr().out
    assert "refused: report.json: content differs" in out and "20261103T000000000000Z-3 *" in out
    # the untouched latest observation still compares
    assert main(["compare", f"{OTHER[:8]}@20261104T000000000000Z-4", KEY[:8]]) == 0


LOADGEN = "ef" * 32


def measure_with_evidence(store: ArtifactStore, run_id: str, tokens: float) -> dict:
    """A RunLoadgen observation and the FullRun observation made from it, as a run publishes them: the
    FullRun's manifest names the measurement (`observed_from`) and its content digest (`made_from`)."""
    taken = set(observations.archived_ids(store.root, "RunLoadgen", LOADGEN))
    if (latest := store.manifest("RunLoadgen", LOADGEN)) is not None:
        taken.add(observations.id_of(latest))
    obs = observations.new_id(run_id, taken)

    def make(out):
        (out / "requests.csv").write_text("sample_index,server,issue_ms,ttft_ms,latency_ms,n_tokens\n"
                                          + "".join(f"{i},0,{i}.0,,{10 + i}.5,32\n" for i in range(40)))
        (out / "result.json").write_text(json.dumps({"tokens_per_s": tokens}))
        return {}
    with store.lock("RunLoadgen", LOADGEN):
        lg = store.build("RunLoadgen", LOADGEN, make, {"run_id": run_id, observations.FIELD: obs}, archive=True)
    m = measure(store, run_id, tokens)
    ident = f"RunLoadgen/{LOADGEN[:16]}"
    doc = {k: v for k, v in m.items() if k not in (signing.FIELD,)}
    doc.update(observed_from={ident: obs}, made_from={ident: {"content_digest": lg["content_digest"],
                                                             "finished_at": lg["finished_at"]}})
    if store.signing_key is not None:
        doc[signing.FIELD] = signing.signature(doc, store.signing_key)
    (store.path("FullRun", KEY) / "manifest.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
    return doc


def test_history_and_compare_verify_what_an_observation_was_made_from(store, capsys):
    """A FullRun observation reports a RunLoadgen observation's files: one of those truncated to 100 bytes
    (status calls it corrupt), removed, or replaced by another measurement makes history list the
    FullRun observation as refused, naming the measurement, and compare refuse it; the other
    observations, whose measurements are intact, stay as they were."""
    measure_with_evidence(store, "20261101T000000000000Z-1", 100.0)
    measure_with_evidence(store, "20261102T000000000000Z-2", 130.0)
    measure_with_evidence(store, "20261103T000000000000Z-3", 160.0)
    assert main(["history", KEY[:8]]) == 0 and "refused" not in capsys.readouterr().out
    lg_latest = store.path("RunLoadgen", LOADGEN) / "requests.csv"
    with open(lg_latest, "r+b") as f:  # the latest measurement, truncated as a full disk or an editor leaves it
        f.truncate(100)
    assert main(["history", KEY[:8]]) == 0
    out = capsys.readouterr().out
    latest = next(x for x in out.splitlines() if x.startswith("20261103T000000000000Z-3 *"))
    assert f"refused: RunLoadgen {LOADGEN[:16]}@20261103T000000000000Z-3 (what it was made from): requests.csv" \
        in latest and "VALID" not in latest
    assert out.count("refused") == 1
    assert main(["compare", f"{KEY[:8]}@20261102T000000000000Z-2", KEY[:8]]) == 2
    err = capsys.readouterr().err
    assert "not trusted" in err and "RunLoadgen" in err and "requests.csv" in err
    # an earlier measurement removed, and another put in the place of a third
    kept = observations.archive_dir(store.root, "RunLoadgen", LOADGEN)
    shutil.rmtree(kept / "20261101T000000000000Z-1")
    assert main(["history", KEY[:8]]) == 0
    out = capsys.readouterr().out
    assert f"RunLoadgen {LOADGEN[:16]}@20261101T000000000000Z-1 (what it was made from): gone" in out
    shutil.rmtree(kept / "20261102T000000000000Z-2")
    shutil.copytree(store.path("RunLoadgen", LOADGEN), kept / "20261102T000000000000Z-2")
    found = next(o for o in store.observations("FullRun", KEY) if o["id"] == "20261102T000000000000Z-2")
    assert "another observation put in its place" in store.observation_problems("FullRun", KEY, found)[0]


def test_gc_ages_observations_like_artifacts(store):
    """An earlier observation stays while recent and goes once older than --keep-days; the latest is an
    artifact and follows the artifact rules."""
    measure(store, "20261101T000000000000Z-1", 100.0)
    measure(store, "20261102T000000000000Z-2", 130.0)
    kept = [e for e in plan(store.root, keep_days=14).entries if e.kind == "observation"]
    assert [(e.id, e.action) for e in kept] == [(f"FullRun/{KEY[:16]}/20261101T000000000000Z-1", "keep")]
    later = datetime.now(timezone.utc) + timedelta(days=30)
    gone = [e for e in plan(store.root, keep_days=14, now=later).entries if e.kind == "observation"]
    assert [e.action for e in gone] == ["delete"]


def test_two_measurements_of_identical_parameters_are_both_kept_and_compared(built_fast, tmp_path, capsys,
                                                                             monkeypatch):
    """Measuring the same FullRun again (--repeat 2: two more observations in one run) keeps every one:
    each report names its own measurement, history lists all three, and compare of two of them shows
    their real difference, not +0.0% of one report against itself."""
    with copied_root(built_fast, tmp_path / "a") as root:
        monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
        for extra in ((), ("--repeat", "2")):  # the FAST model fails accuracy: exit 11
            proc = run_luigi("FullRun", "--overrides", FAST + "," + SHORT, *extra, artifacts=root, check=False)
            assert proc.returncode in (0, 10, 11, 12), proc.stderr[-3000:]
        assert "2 observations in this run" in proc.stdout
        first, second = (r["run_id"] for r in run_records(root)[-2:])
        ids = [f"{second}.2", second, first]  # newest first; the latest is what reuse takes
        for stage in ("RunLoadgen", "FullRun"):
            (key16,) = [d.name for d in (root / stage).iterdir() if not d.name.startswith(".")]
            assert sorted(d.name for d in (root / "observations" / stage / key16).iterdir()) == sorted(ids[1:])
        assert not (root / "observations" / "CheckAccuracy").exists()  # scored once, reused by the repeats
        (fullrun,) = [d for d in (root / "FullRun").iterdir() if not d.name.startswith(".")]
        dirs = [fullrun] + [root / "observations" / "FullRun" / fullrun.name / i for i in ids[1:]]
        reports = [json.loads((d / "report.json").read_text()) for d in dirs]
        assert [r["observations"]["FullRun"] for r in reports] == ids
        assert [r["observations"]["RunLoadgen"] for r in reports] == ids
        tokens = [r["performance"]["tokens_per_second"] for r in reports]

        assert main(["history", fullrun.name]) == 0
        out = capsys.readouterr().out
        assert "3 observation(s)" in out and f"{ids[0]} *" in out and all(i in out for i in ids)
        assert main(["compare", first, f"{fullrun.name[:8]}@{second}", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["a"].endswith(f"@{first}") and doc["b"].endswith(f"@{second}")
        assert any("observations of one key" in w for w in doc["warnings"])  # one configuration: never worse
        row = next(m for m in doc["metrics"] if m["metric"] == "tokens/s")
        assert (row["a"], row["b"]) == (tokens[2], tokens[1]) and tokens[1] != tokens[2]
        assert row["verdict"] == "within noise" and doc["repeats"]["b"]["from"] == "its run's 2 repeats"
        assert main(["compare", f"{fullrun.name}@{ids[0]}", fullrun.name[:6]]) == 0  # the latest, twice: said so
        assert "the same observation" in capsys.readouterr().out
        # the latest measurement's requests.csv truncated to 100 bytes: the report made from it is refused
        (loadgen,) = [d for d in (root / "RunLoadgen").iterdir() if not d.name.startswith(".")]
        with open(loadgen / "requests.csv", "r+b") as f:
            f.truncate(100)
        assert main(["history", fullrun.name]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(f"{ids[0]} *"))
        assert f"refused: RunLoadgen {loadgen.name}@{ids[0]} (what it was made from): requests.csv" in line
        assert main(["compare", first, fullrun.name[:8]]) == 2
        assert "requests.csv" in capsys.readouterr().err
