"""`status` explains the change the user made: it compares with the closest cached artifact (fewest
differing fields), not the newest, and prints a few short lines per stage."""
from __future__ import annotations

from types import SimpleNamespace

from pipeline.status import _why, print_status, why_lines

PBTXT = "\n".join(f'parameters {{ key: "k{i}" value: {{ string_value: "{i}" }} }}' for i in range(60))


def key_doc(scenario="Offline", decoupled=False, batch=32, engine="e" * 64):
    return {"params": {"loadgen": {"scenario": scenario}, "triton": {"decoupled": decoupled, "max_batch_size": batch}},
            "tools": {"tritonserver": "2.50"}, "upstream": {"engine": engine}, "code": {"harness/a.py": "1"},
            "executed": {"config.pbtxt": PBTXT.replace("k1", "k1" + scenario)}}


def fake_task(manifests, now):
    # closest: False, the index's answer set aside, so every manifest is compared (the index's own answer is
    # checked against this one in tests/test_index.py)
    return SimpleNamespace(stage="FillTritonRepo", key_doc=now, store=SimpleNamespace(
        manifests=lambda stage: manifests, closest=lambda stage, doc: False))


def test_the_one_changed_field_is_the_only_difference_reported():
    closest = {**key_doc(batch=32), "key": "c" * 64}
    newest = {**key_doc(scenario="Interactive", decoupled=True, batch=8), "key": "n" * 64}  # another experiment
    changed = _why(fake_task([newest, closest], key_doc(batch=8)))
    assert [(c["field"], c["cached"], c["now"]) for c in changed] == [("params.triton.max_batch_size", 32, 8)]
    assert changed[0]["compared_with"] == "c" * 16
    assert why_lines(changed) == ["vs closest cached cccccccccccccccc:", "params.triton.max_batch_size: 32 -> 8"]


def test_ties_go_to_the_newest_and_nothing_cached_says_so():
    a, b = {**key_doc(batch=16), "key": "a" * 64}, {**key_doc(batch=64), "key": "b" * 64}
    assert _why(fake_task([a, b], key_doc(batch=8)))[0]["compared_with"] == "a" * 16
    assert _why(fake_task([], key_doc()))[0]["reason"] == "no cached artifact of this stage"


def test_a_few_short_lines_per_stage_and_a_pointer_to_the_rest(capsys):
    far = {**key_doc(scenario="Interactive", decoupled=True, batch=8, engine="x" * 64), "key": "f" * 64}
    changed = _why(fake_task([far], key_doc()))
    assert len(changed) == 5  # scenario, decoupled, batch, upstream engine, the config.pbtxt
    lines = why_lines(changed)
    assert len(lines) == 5 and lines[-1] == "… 2 more (status --full, or --json)"
    assert all(len(line) < 160 for line in lines)
    assert why_lines([{"field": "upstream.engine", "cached": "ab" * 32, "now": "cd" * 32}])[0] == \
        "upstream.engine: abababababababab -> cdcdcdcdcdcdcdcd"
    full = why_lines(changed, full=True)
    assert any(PBTXT.splitlines()[5] in line for line in full)  # --full shows the whole value
    print_status([{"stage": "FillTritonRepo", "key": "k" * 16, "status": "missing", "changed": changed}])
    out = capsys.readouterr().out  # the blob as its changed lines, a few of them, never whole
    assert "status --full" in out and len(out.splitlines()) < 25 and out.count("string_value") <= 6
