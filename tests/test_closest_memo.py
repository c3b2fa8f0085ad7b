"""status's closest cached artifact, memoised (harness/cache/closest.py): taken only while the index and the root's
artifacts are what they were, never trusted over them, and a memo of any content never makes status call a stage
cached. Real ArtifactStore publishes and real status runs, no mocks of what is checked."""
from __future__ import annotations

import json
import os

import pytest
from test_index import key, publish

from harness.cache import closest, index
from harness.cache.store import ArtifactStore
from pipeline.status import _diff

DOC = {"params": {"quant": {"format": "int4", "calib": 99}}, "upstream": {}, "code": {"a.py": "x"}}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(closest, "_MEMO", None)
    monkeypatch.setattr(closest, "_FRESH", [])
    s = ArtifactStore(tmp_path / "artifacts")
    for i in range(6):
        publish(s, "Quantize", i, {"quant": {"format": ["fp8", "int4"][i % 2], "calib": i}})
    return s


def scanned(store: ArtifactStore, doc: dict) -> str:
    """The answer without any index or memo: every manifest read."""
    return min(store.manifests("Quantize"), key=lambda m: len(_diff(doc, m)))["key"]


def unread(monkeypatch):
    """From here, parsing the index fails the test: the answer must come from the memo."""
    monkeypatch.setattr(index, "read", lambda *a, **k: pytest.fail("the index was parsed"))


def test_the_second_answer_comes_from_the_memo_and_is_the_first(store, monkeypatch):
    r = store.root
    first = closest.closest(r, "Quantize", DOC)
    assert first["key"] == scanned(store, DOC)
    with monkeypatch.context() as m:
        unread(m)
        assert closest.closest(r, "Quantize", DOC) == first
        other = {**DOC, "params": {"quant": {"format": "fp8", "calib": 4}}}  # not asked before: the index is read
        with pytest.raises(pytest.fail.Exception, match="the index was parsed"):
            closest.closest(r, "Quantize", other)
    closest._save()  # as at exit: a later process takes it from the file
    monkeypatch.setattr(closest, "_MEMO", None)
    unread(monkeypatch)
    assert closest.closest(r, "Quantize", DOC) == first


@pytest.mark.parametrize("change", ["published since", "manifest replaced", "artifact gone", "index appended",
                                    "line edited"])
def test_a_root_or_index_that_moved_is_answered_afresh(store, change):
    """Whatever changed since the memo was made, the answer is the one the manifests give."""
    r = store.root
    closest.closest(r, "Quantize", DOC)
    near = {"quant": {"format": "int4", "calib": 99}}
    path = r / "Quantize" / index.INDEX
    if change == "published since":
        publish(store, "Quantize", 7, near)  # the new closest
    elif change == "manifest replaced":  # the closest one's manifest now says it is much closer, its stat moved
        d = r / "Quantize" / key(5)[:16]
        m = json.loads((d / "manifest.json").read_text())
        (d / "manifest.json").write_text(json.dumps({**m, "params": near}))
    elif change == "artifact gone":
        os.rename(closest.closest(r, "Quantize", DOC)["_dir"], r / "gone")
    elif change == "index appended":
        with open(path, "a") as f:
            f.write(json.dumps({"op": "del", "d": key(5)[:16]}) + "\n")
    else:  # another artifact's line edited to match exactly, its manifest's stat kept: as without a memo
        other, exact = key(0)[:16], index.field_hashes(DOC)
        path.write_text("".join(json.dumps({**e, "fields": exact}, separators=(",", ":")) + "\n"
                                if (e := json.loads(line)).get("d") == other else line
                                for line in path.read_text().splitlines(keepends=True)))
    got = closest.closest(r, "Quantize", DOC)
    if change == "line edited":
        assert got is False  # its manifest is not what the line says: status scans every manifest
    else:
        assert got["key"] == scanned(store, DOC) and _diff(DOC, got) == _diff(DOC, scanned_manifest(store, DOC))


def scanned_manifest(store: ArtifactStore, doc: dict) -> dict:
    return next(m for m in store.manifests("Quantize") if m["key"] == scanned(store, doc))


@pytest.mark.parametrize("forge", ["another manifest's line", "no such directory", "a path out of the stage",
                                   "garbage", "not a dict"])
def test_a_forged_memo_never_answers_with_what_the_manifests_do_not_say(store, forge):
    """The memo's pick is read and checked against its manifest like the index's: a pick that is not what is
    published makes status scan every manifest (False), and a malformed entry is not taken."""
    r = store.root
    closest.closest(r, "Quantize", DOC)
    closest._save()
    f = closest._memo_file()
    memo = json.loads(f.read_text())
    entry = memo[f"{r}|Quantize"]
    (asked, line), = entry["picks"].items()
    other = index.read(r, "Quantize")[key(0)[:16]]
    entry["picks"][asked] = {"another manifest's line": {**other, "d": line["d"]},
                             "no such directory": {**line, "d": "0123456789abcdef"},
                             "a path out of the stage": {**line, "d": "../../etc"},
                             "garbage": {"d": 7}, "not a dict": [1, 2]}[forge]
    f.write_text(json.dumps(memo))
    closest._MEMO = None
    got = closest.closest(r, "Quantize", DOC)
    if forge in ("another manifest's line", "no such directory"):
        assert got is False  # status then reads every manifest, as without an index
    else:
        assert got["key"] == scanned(store, DOC)


def test_a_memo_pick_forged_to_match_exactly_is_refused(store):
    """A pick forged to hold exactly the key inputs asked for is checked against its manifest and refused; and
    status decides cached from the published manifest alone, which the memo never names."""
    r = store.root
    closest.closest(r, "Quantize", DOC)
    line = next(iter(closest._memo()[f"{r}|Quantize"]["picks"].values()))
    forged = {**line, "key": "f" * 64, "fields": index.field_hashes(DOC)}
    closest._memo()[f"{r}|Quantize"]["picks"] = {closest._digest(index.field_hashes(DOC)): forged}
    assert closest.closest(r, "Quantize", DOC) is False
    assert not store.is_published("Quantize", "f" * 64)


def test_verify_never_reads_the_memo(store, monkeypatch):
    r = store.root
    closest.closest(r, "Quantize", DOC)
    monkeypatch.setenv("PERFDAG_VERIFY", "1")
    calls = []
    real = index.read
    monkeypatch.setattr(index, "read", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert closest.closest(r, "Quantize", DOC)["key"] == scanned(store, DOC) and calls == [1]


def test_the_memo_keeps_the_latest_picks_of_an_index(store, monkeypatch):
    """Each set of key inputs asked adds a pick; an entry keeps the last MEMO_PICKS of them."""
    monkeypatch.setattr(closest, "MEMO_PICKS", 2)
    r = store.root
    docs = [{**DOC, "params": {"quant": {"format": "int4", "calib": c}}} for c in (97, 98, 99)]
    for doc in docs:
        closest.closest(r, "Quantize", doc)
    picks = closest._memo()[f"{r}|Quantize"]["picks"]
    assert list(picks) == [closest._digest(index.field_hashes(d)) for d in docs[1:]]
    unread(monkeypatch)
    assert closest.closest(r, "Quantize", docs[2])["key"] == scanned(store, docs[2])
