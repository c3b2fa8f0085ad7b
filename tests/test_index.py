"""The store's per-stage index (harness/cache/index.py): kept at publish, archive, move-aside and gc, rebuilt from
the manifests when missing, torn or edited, consistent when two processes publish and gc on one root, and
giving status and gc the answers they give without it. Real ArtifactStore publishes, no luigi."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

import harness.serving.launcher
from harness.cache import closest, index, runindex
from harness.cache import runs as runs_mod
from harness.cache.store import ArtifactStore
from harness.gc import collect as gc
from pipeline.status import _diff

REPO = Path(__file__).resolve().parent.parent


def key(i: int | str) -> str:
    import hashlib
    return hashlib.sha256(str(i).encode()).hexdigest()


def publish(store: ArtifactStore, stage: str, name, params: dict, *, archive: bool = False, run_id: str = "r1",
            upstream: dict | None = None) -> dict:
    k = key(name)

    def make(d: Path) -> dict:
        (d / "out.txt").write_text(f"{name}\n" * 10)
        return {}
    with store.lock(stage, k):
        return store.build(stage, k, make, {"params": params, "upstream": upstream or {}, "code": {"a.py": "x"},
                                            "run_id": run_id, "observation": run_id}, archive=archive)


@pytest.fixture
def root(tmp_path):
    store = ArtifactStore(tmp_path / "artifacts")
    for i in range(6):
        publish(store, "Quantize", i, {"quant": {"format": ["fp8", "int4"][i % 2], "calib": i}})
    publish(store, "FullRun", "f", {"a": 1}, archive=True, run_id="run-1")
    publish(store, "FullRun", "f", {"a": 1}, archive=True, run_id="run-2")  # run-1 is now an observation
    return store


def test_publish_keeps_the_index_that_a_rebuild_gives(root):
    for stage in ("Quantize", "FullRun"):
        got = index.read(root.root, stage)
        assert got is not None and index.consistent(root.root, stage, got)
        assert got == index.rebuild(root.root, stage)
    assert sorted(index.read(root.root, "FullRun")) == [key("f")[:16], f"obs/{key('f')[:16]}/run-1"]


@pytest.mark.parametrize("harm", ["deleted", "truncated", "torn", "other key", "manifest replaced", "gone dir",
                                  "extra line", "not json", "deep"])
def test_a_harmed_index_is_rebuilt_from_the_manifests_never_trusted(root, harm):
    r, stage = root.root, "Quantize"
    path = r / stage / index.INDEX
    truth = index.rebuild(r, stage)
    lines = path.read_text().splitlines(keepends=True)
    k0 = key(0)[:16]
    if harm == "deleted":
        path.unlink()
    elif harm == "truncated":
        path.write_text("".join(lines[:3]))
    elif harm == "torn":
        path.write_text("".join(lines)[:-40])
    elif harm == "other key":  # a line naming a key whose manifest says otherwise
        path.write_text("".join(l.replace(key(0), key(1)) for l in lines))
    elif harm == "manifest replaced":  # republished behind the index's back: another manifest there
        m = r / stage / k0 / "manifest.json"
        doc = json.loads(m.read_text())
        doc["params"]["quant"]["calib"] = 99
        m.unlink()
        m.write_text(json.dumps(doc))
    elif harm == "gone dir":
        os.rename(r / stage / k0, r / stage / ".aside")
    elif harm == "extra line":  # an entry for a key that has no artifact
        path.write_text("".join(lines) + json.dumps({**json.loads(lines[1]), "d": "0123456789abcdef"}) + "\n")
    elif harm == "deep":  # nested past the interpreter's recursion limit
        path.write_text("".join(lines) + "[" * 100_000 + "]" * 100_000 + "\n")
    elif harm == "not json":
        path.write_text("".join(lines[:2]) + "{nope\n" + "".join(lines[2:]))
    now = index.rebuild(r, stage) if harm in ("manifest replaced", "gone dir") else truth
    assert index.entries(r, stage) == now
    assert index.read(r, stage) != now  # a reader that may not write leaves it as it found it
    assert index.entries(r, stage, write=True) == now
    assert index.read(r, stage) == now  # written back whole


def test_verify_catches_an_edited_line_whose_stat_still_matches(root):
    r, stage = root.root, "Quantize"
    path = r / stage / index.INDEX
    path.write_text(path.read_text().replace(key(2), key(2)[:16] + "0" * 48))  # only the key's tail edited
    assert index.entries(r, stage) != index.rebuild(r, stage)  # the cheap check cannot see it...
    assert index.entries(r, stage, verify=True) == index.rebuild(r, stage)  # ...gc --delete's does


def test_move_aside_and_gc_delete_update_the_index(root, monkeypatch):
    monkeypatch.setattr(harness.serving.launcher, "servers_live", lambda records, timeout_s=2.0: False)
    r = root.root
    m = root.manifest("Quantize", key(3))
    with root.lock("Quantize", key(3)):
        assert root.move_aside("Quantize", key(3), r / "runs" / "x" / "corrupt" / "q", m["finished_at"])
    assert key(3)[:16] not in index.read(r, "Quantize")
    before = (r / "Quantize" / index.INDEX).stat().st_size
    p = gc.gc(r, keep_days=0, delete=True)
    assert {e.id.split("/")[0] for e in p.goes if e.status == "deleted"} >= {"Quantize", "FullRun"}
    for stage in ("Quantize", "FullRun"):
        got = index.read(r, stage)
        assert got == {} and index.consistent(r, stage, got)
    assert (r / "Quantize" / index.INDEX).stat().st_size > before  # appended, not rebuilt


def test_gc_and_status_answer_the_same_with_and_without_the_index(root, monkeypatch):
    monkeypatch.setattr(harness.serving.launcher, "servers_live", lambda records, timeout_s=2.0: False)
    r = root.root
    now = datetime.now(timezone.utc)
    with_index = gc.to_json(gc.plan(r, keep_days=0, now=now), False)
    monkeypatch.setattr(index, "entries", lambda *a, **k: {})  # every manifest read, every tree walked
    without = gc.to_json(gc.plan(r, keep_days=0, now=now), False)
    assert with_index == without and with_index["total"]["bytes"] > 0
    monkeypatch.undo()
    # status's closest cached artifact: fewest differing key inputs, the newest among equals
    for want in ({"quant": {"format": "fp8", "calib": 4}}, {"quant": {"format": "int4", "calib": 0}},
                 {"quant": {"format": "fp16"}}, {"other": 1}):
        doc = {"params": want, "upstream": {}, "code": {"a.py": "x"}}
        cached = root.manifests("Quantize")
        scanned = min(cached, key=lambda m: len(_diff(doc, m)))
        got = closest.closest(r, "Quantize", doc)
        assert got["key"] == scanned["key"] and _diff(doc, got) == _diff(doc, scanned)


_WORKER = """
import sys, time
import harness.serving.launcher
from harness.cache.store import ArtifactStore
from harness.gc import collect as gc
from pathlib import Path
KEY
PUBLISH
store, who = ArtifactStore(sys.argv[1]), sys.argv[2]
done = [store.root.parent / f"{p}.done" for p in ("a", "b")]
if who == "gc":  # collects over and over until both publishers are done
    harness.serving.launcher.servers_live = lambda records, timeout_s=2.0: False
    deleted, end = 0, time.monotonic() + 60
    while not all(d.exists() for d in done) and time.monotonic() < end:
        deleted += sum(e.status == "deleted" for e in gc.gc(store.root, keep_days=0, delete=True).goes)
    print(deleted)
else:
    for i in range(40):
        publish(store, "Quantize", f"{who}-{i % 12}", {"i": i}, archive=True, run_id=f"{who}-{i}")
    (store.root.parent / f"{who}.done").touch()
"""


def test_two_processes_publishing_and_one_collecting_leave_a_consistent_index(tmp_path):
    """Two publishers (as two hosts on one root: separate processes, only the root's flocks between them) and a gc
    --delete running meanwhile: every line the index ends with is a directory there, and every directory has one."""
    r = tmp_path / "artifacts"
    ArtifactStore(r)
    script = _WORKER.replace("KEY", inspect.getsource(key)).replace("PUBLISH", inspect.getsource(publish))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r), who], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for who in ("gc", "a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert int(procs[0].stdout.read()) > 0  # gc deleted while they published
    got = index.read(r, "Quantize")
    assert got is not None and index.consistent(r, "Quantize", got)
    assert got == index.rebuild(r, "Quantize")


@pytest.mark.parametrize("harm", ["deleted", "torn"])
def test_the_next_publish_writes_a_whole_index_where_it_found_none_or_a_torn_one(root, harm):
    path = root.root / "Quantize" / index.INDEX
    if harm == "deleted":
        path.unlink()
    else:
        path.write_text(path.read_text()[:-40])
    publish(root, "Quantize", "new", {"quant": {"format": "fp8"}})
    got = index.read(root.root, "Quantize")
    assert got == index.rebuild(root.root, "Quantize") and len(got) == 7


# --- runs/.index.jsonl: what gc reads of each run record (harness/cache/runindex.py) ---------------------------------
def run_record(r: Path, run_id: str, updated: str, *refs: tuple[str, str, str | None]) -> Path:
    d = r / "runs" / run_id
    d.mkdir(parents=True, exist_ok=True)
    stages = {f"{s}/{k[:16]}": {"stage": s, "key": k, "status": "reused", **({"observation": o} if o else {})}
              for s, k, o in refs}
    (d / "run.json").write_text(json.dumps({"run_id": run_id, "started_at": updated, "updated_at": updated,
                                            "stages": stages}))
    return d


@pytest.fixture
def runs_root(root, monkeypatch):
    """`root` with run records: one recent, two old (one with a failed stage's kept files), one malformed."""
    monkeypatch.setattr(harness.serving.launcher, "servers_live", lambda records, timeout_s=2.0: False)
    r = root.root
    run_record(r, "recent", datetime.now(timezone.utc).isoformat(), ("Quantize", key(1), None),
               ("FullRun", key("f"), "run-1"))
    old = run_record(r, "old", "2020-01-01T00:00:00+00:00", ("Quantize", key(2), None))
    (old / "failed" / "Quantize-x").mkdir(parents=True)
    os.utime(old / "failed" / "Quantize-x", (0, 0))
    run_record(r, "older", "2019-01-01T00:00:00+00:00", ("Quantize", key(3), None))
    (r / "runs" / "bad").mkdir()
    (r / "runs" / "bad" / "run.json").write_text('{"stages": 3}')
    return r


def _plan(r: Path, **kw) -> dict:
    """gc's plan as --json prints it, but its warnings (a malformed record is reported once per process)."""
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    doc = gc.to_json(gc.plan(r, keep_days=3650, now=now, **kw), False)
    doc.pop("warnings")
    return doc


def _without_runs_index(r: Path, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        m.setattr(runindex, "read", lambda runs: {})
        return _plan(r)


def test_gc_delete_writes_the_runs_index_and_a_dry_run_answers_as_from_the_records(runs_root, monkeypatch):
    r = runs_root
    assert not (r / "runs" / runindex.INDEX).exists()
    assert any("runs/bad/run.json: malformed" in w for w in gc.plan(r, verify=False).warnings)
    verified = _plan(r, verify=True)  # a plan that deletes: every record parsed, the index written back
    lines = runindex.read(r / "runs")
    assert sorted(lines) == ["old", "older", "recent"]  # the malformed record has no line: parsed (and reported) each time
    assert lines["old"]["aged"] and not lines["recent"]["aged"]
    calls = []
    monkeypatch.setattr(runs_mod.untrusted, "read", lambda *a, **k: calls.append(a[1]) or _strict_read(*a, **k))
    dry = _plan(r)
    assert [Path(c).parent.name for c in calls] == ["bad"]  # every other record came from its line
    assert dry == verified == _without_runs_index(r, monkeypatch)
    assert any(e["id"].endswith("failed/Quantize-x") for e in dry["delete"]) and dry["runs"]["count"] == 3


_strict_read = runs_mod.untrusted.read


@pytest.mark.parametrize("harm", ["deleted", "torn", "truncated", "not json", "wrong type", "record rewritten",
                                  "record edited in place", "record removed", "record added", "failed added",
                                  "record a link"])
def test_a_harmed_or_behind_runs_index_answers_as_the_records_do(runs_root, harm, monkeypatch):
    r = runs_root
    _plan(r, verify=True)
    path = r / "runs" / runindex.INDEX
    lines = path.read_text().splitlines(keepends=True)
    if harm == "deleted":
        path.unlink()
    elif harm == "torn":
        path.write_text("".join(lines)[:-20])
    elif harm == "truncated":
        path.write_text(lines[0])
    elif harm == "not json":
        path.write_text("".join(lines) + "{nope\n")
    elif harm == "wrong type":
        path.write_text("".join(lines).replace('"aged":false', '"aged":0', 1))
    elif harm == "record rewritten":  # the recent run now references another artifact (a new file, a new inode)
        run_record(r, "recent", datetime.now(timezone.utc).isoformat(), ("Quantize", key(4), None))
    elif harm == "record edited in place":  # same inode, size and mtime: only the ctime moves
        f = r / "runs" / "older" / "run.json"
        st = f.stat()
        data = f.read_bytes().replace(key(3).encode(), key(5).encode())
        with open(f, "r+b") as fh:
            fh.write(data)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif harm == "record removed":
        (r / "runs" / "old" / "run.json").unlink()
    elif harm == "record added":
        run_record(r, "new", datetime.now(timezone.utc).isoformat(), ("Quantize", key(0), None))
    elif harm == "failed added":  # kept files appear in a run whose line says it has none
        (r / "runs" / "older" / "corrupt" / "Quantize-y").mkdir(parents=True)
        os.utime(r / "runs" / "older" / "corrupt" / "Quantize-y", (0, 0))
    elif harm == "record a link":  # a record replaced by a link to one outside the root
        outside = r.parent / "elsewhere.json"
        (r / "runs" / "older" / "run.json").rename(outside)
        (r / "runs" / "older" / "run.json").symlink_to(outside)
    assert _plan(r) == _without_runs_index(r, monkeypatch)
    assert _plan(r, verify=True) == _without_runs_index(r, monkeypatch)  # and gc --delete writes it back whole
    assert sorted(runindex.read(r / "runs")) == sorted(l for l in ("old", "older", "recent", "new")
                                                if runindex.stamps(r / "runs" / l) is not None)


def test_an_edited_runs_index_line_is_never_what_gc_delete_acts_on(runs_root, monkeypatch):
    """A line edited with its stats left as they were: the dry run cannot see it (it is a cache, as the stages'
    indexes are); gc --delete never reads the index."""
    r = runs_root
    honest = _plan(r, verify=True)
    path = r / "runs" / runindex.INDEX
    path.write_text(path.read_text().replace(f"Quantize/{key(2)[:16]}", f"Quantize/{key(5)[:16]}"))
    assert _plan(r, verify=True) == honest == _without_runs_index(r, monkeypatch)
    assert runindex.read(r / "runs")["old"]["ids"] == [f"Quantize/{key(2)[:16]}"]  # written back whole


def test_closest_skips_observation_lines_but_never_trusts_a_forged_artifact_line(root):
    """status's closest reads only the artifacts' lines (a measuring stage's index is mostly observations): a
    harmed observation line changes nothing, and a forged artifact line (a key that is not there, or an edited line
    whose manifest's stat still matches) never becomes the answer."""
    r = root.root
    doc = {"params": {"quant": {"format": "int4", "calib": 99}}, "upstream": {}, "code": {"a.py": "x"}}
    want = min(root.manifests("Quantize"), key=lambda m: len(_diff(doc, m)))["key"]
    assert closest.closest(r, "Quantize", doc)["key"] == want
    fr = r / "FullRun" / index.INDEX  # an observation's line torn in the middle of the index: not read
    lines = fr.read_text().splitlines(keepends=True)
    obs = [i for i, line in enumerate(lines) if line.startswith('{"d":"obs/')]
    assert obs
    lines[obs[0]] = lines[obs[0]][:30] + "\n"
    fr.write_text("".join(lines))
    assert closest.closest(r, "FullRun", {"params": {"a": 1}, "upstream": {}, "code": {"a.py": "x"}})["key"] == key("f")
    assert index.entries(r, "FullRun") == index.rebuild(r, "FullRun")  # every other reader still finds it harmed
    path = r / "Quantize" / index.INDEX
    good = path.read_text()
    exact = index.field_hashes(doc)
    forged = {**json.loads(good.splitlines()[1]), "d": "0123456789abcdef", "key": "0123456789abcdef" + "0" * 48,
              "fields": exact}
    path.write_text(good + json.dumps(forged, separators=(",", ":")) + "\n")  # no such directory
    assert closest.closest(r, "Quantize", doc)["key"] == want
    other = key(0)[:16]  # an existing artifact's line edited to match exactly, its manifest's stat kept
    path.write_text("".join(
        json.dumps({**e, "fields": exact}, separators=(",", ":")) + "\n" if (e := json.loads(line)).get("d") == other
        else line for line in good.splitlines(keepends=True)))
    assert closest.closest(r, "Quantize", doc) is False  # its manifest is not what the line says: status scans


@pytest.mark.parametrize("bad", ['[1,"x"]', "[1.5]", "[true]", "[-0]", '[1],"fields":[2]'])
def test_a_line_read_without_its_fields_is_still_checked_as_whole(root, bad):
    """gc's dry run reads lines without parsing `fields` (a regex checks them): every line perfdag writes reads the
    same but for them, and a line whose fields are anything but plain integers makes the index malformed, as a full
    parse would."""
    r, stage = root.root, "Quantize"
    whole, light = index.read(r, stage), index.read(r, stage, fields=False)
    assert light is not None and {d: {**e, "fields": None} for d, e in light.items()} == \
        {d: {**e, "fields": None} for d, e in whole.items()}
    assert all(e["fields"] == [] for e in light.values()) and all(e["fields"] for e in whole.values())
    path = r / stage / index.INDEX
    lines = path.read_text().splitlines(keepends=True)
    head, _, _ = lines[2].rpartition(',"fields":[')
    lines[2] = head + ',"fields":' + bad + "}\n"
    path.write_text("".join(lines))
    if bad in ("[-0]", '[1],"fields":[2]'):  # ints (-0 is 0; of a duplicate key JSON takes the last): taken whole
        assert index.read(r, stage, fields=False) is not None and index.read(r, stage) is not None
    else:
        assert index.read(r, stage, fields=False) is None and index.read(r, stage) is None
        assert index.entries(r, stage, fields=False) == index.rebuild(r, stage)  # rebuilt: every field real


@pytest.mark.parametrize("forge", ["fields not ints", "finished today, stat kept"])
def test_a_forged_line_never_makes_gc_delete_or_keep_what_the_manifests_do_not_say(root, forge, monkeypatch):
    """gc reads lines without their fields: a line whose fields are not plain integers still makes the whole index
    malformed (the plan is the manifests'), and a line edited to say an old artifact was built today, its
    manifest's stat kept, is what only the check of every line against its manifest sees: the plan that deletes
    (`verify`) is the manifests' either way."""
    monkeypatch.setattr(harness.serving.launcher, "servers_live", lambda records, timeout_s=2.0: False)
    r = root.root
    future = datetime(2100, 1, 1, tzinfo=timezone.utc)  # everything published is older than keep_days here
    path = r / "Quantize" / index.INDEX
    lines = path.read_text().splitlines(keepends=True)
    e = json.loads(lines[3])
    if forge == "fields not ints":
        e["fields"] = [1, "x"]
    else:
        e["finished_at"] = "2099-12-31T00:00:00+00:00"
    lines[3] = json.dumps(e, separators=(",", ":")) + "\n"
    path.write_text("".join(lines))
    got = {v: gc.to_json(gc.plan(r, keep_days=1, now=future, verify=v), False) for v in (False, True)}
    monkeypatch.setattr(index, "entries", lambda *a, **k: {})  # every manifest read
    truth = gc.to_json(gc.plan(r, keep_days=1, now=future), False)
    assert e["d"] in {x["key16"] for x in truth["delete"]}
    assert got[True] == truth  # the plan that deletes: never the forged line's
    if forge == "fields not ints":
        assert got[False] == truth  # the index was refused whole
