"""YAML and JSON of absurd shapes (issue 46 item 10): complex keys, and nesting a hundred thousand
levels deep, in a params file, an override, a sweep, a checkpoint's config, a dataset line, and the
manifests and run records read back from the root. Each is one line naming the file (or the
override) and the fix, exit 2 and nothing written where it is input; a record under the root that
nests too deep is not acted on, and never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, luigi_cmd

from harness.cache.hashing import dir_content_hash
from harness.untrusted import jsonio
from pipeline.cli import main

DEEP = 100_000


def cli(root, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)})


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """perfdag's command line in this process (`python -m pipeline`'s main): a traceback fails the test."""
    def run(root, *args) -> subprocess.CompletedProcess:
        monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
        rc = main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, rc, out.out, out.err)
    return run


def refused(proc, root, *needles):
    """Exit 2, every needle said, no traceback, a short answer, nothing written."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    for needle in needles:
        assert needle in out, out[-3000:]
    assert "Traceback" not in out and "RecursionError" not in out and "TypeError" not in out, out[-3000:]
    assert len(out) < 5000, out[:3000]
    assert not root.exists(), sorted(root.rglob("*"))


EXTENDS = f"extends: {REPO / 'params/default.yaml'}\n"


@pytest.mark.parametrize("body, needle", [
    ("? [a, b]\n: 1\n", "a key that is a list"),
    ("build: {max_batch_size: 8, ? [a]: 1}\n", "a key that is a list"),
    ("build:\n  ? {a: 1}\n  : 2\n", "a key that is a mapping"),
    ("x: " + "[" * DEEP + "]" * DEEP + "\n", "nested more than 64 deep"),
    ("x: " + "{a: " * 30_000 + "1" + "}" * 30_000 + "\n", "nested more than 64 deep"),
    ("x:\n" + "- " * 30_000 + "a\n", "nested more than 64 deep"),
    ("x: " + "[" * DEEP + "\n", "nested more than 64 deep"),  # never closed: refused by depth, not parsed to the end
], ids=["complex-key", "flow-complex-key", "mapping-key", "deep-flow-list", "deep-flow-map", "deep-block-list",
        "unclosed"])
def test_a_params_file_of_absurd_shape_is_one_line_naming_the_file(tmp_path, run_cli, body, needle):
    f = tmp_path / "shape.yaml"
    f.write_text(EXTENDS + body)
    root = tmp_path / "artifacts"
    refused(run_cli(root, "status", "--params-file", str(f)), root, "shape.yaml: ", " at line ", needle)


@pytest.mark.parametrize("value, needle", [
    ("{? [a]: 1}", "a key that is a list"),
    ("[" * 30_000, "nested more than 64 deep"),
    ("{a: " * 30_000, "nested more than 64 deep"),
])
def test_an_override_of_absurd_shape_is_one_line_naming_the_override(tmp_path, run_cli, value, needle):
    root = tmp_path / "artifacts"
    refused(run_cli(root, "status", "--overrides", f"build.max_batch_size={value}"), root,
            "--overrides: build.max_batch_size=", needle)


def test_a_deep_sweep_file_and_grid_are_one_line(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text(f"base: {REPO / 'params/default.yaml'}\ngrid: {'[' * DEEP}\n")
    root = tmp_path / "artifacts"
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    for args, needle in ((("--sweep", str(f)), "sweep.yaml"), (("--grid", "build.max_batch_size=" + "[" * 30_000), "--grid")):
        proc = subprocess.run(luigi_cmd("Sweep", *args), cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        out = proc.stdout + proc.stderr
        assert needle in out and "nested more than 64 deep" in out and "Traceback" not in out, out[-3000:]
        assert not root.exists()


def test_a_shallow_nesting_still_reads(tmp_path, run_cli):
    """The bound is far above any real file: flags nested 60 deep parse (and are refused by the schema)."""
    f = tmp_path / "ok.yaml"
    f.write_text(EXTENDS + "build:\n  flags: " + "{a: " * 60 + "1" + "}" * 60 + "\n")
    out = run_cli(tmp_path / "artifacts", "status", "--params-file", str(f))
    assert "nested more than" not in out.stdout + out.stderr and "build.flags" in out.stdout + out.stderr


# --- JSON ------------------------------------------------------------------------------------------

def test_jsonio_bounds_depth_whatever_the_stack():
    assert jsonio.loads("[" * 100 + "]" * 100) is not None
    for text in ("[" * 101 + "]" * 101, "[" * DEEP + "]" * DEEP, '{"a":' * DEEP + "1" + "}" * DEEP):
        with pytest.raises(jsonio.NotJson, match=r"nested too deeply \(more than 100 levels\)"):
            jsonio.loads(text)
    with pytest.raises(jsonio.NotJson, match="invalid JSON at line 2, column 1"):
        jsonio.loads("[1,\n")
    with pytest.raises(jsonio.NotJson, match="not UTF-8"):
        jsonio.loads(b'["\xff"]')
    assert isinstance(jsonio.NotJson("x"), ValueError)  # `except ValueError` keeps catching it
    wide = [{"a": [1, {"b": 2}]} for _ in range(50_000)]
    assert jsonio.loads(json.dumps(wide)) == wide


def test_jsonio_counts_openings_before_walking_and_never_misses_a_deep_document():
    """A document holding no more `[`/`{` than the limit skips the walk (it cannot nest deeper); one holding more is
    walked, whatever encoding its bytes are in and however many brackets hide in its strings."""
    assert jsonio.loads(b"[" * 100 + b"]" * 100) is not None and jsonio.loads("[[[]]]", max_depth=3) == [[[]]]
    deep = "[" * 101 + "]" * 101
    for data in (deep, deep.encode(), bytearray(deep.encode()), deep.encode("utf-16"), deep.encode("utf-32-le")):
        with pytest.raises(jsonio.NotJson, match="nested too deeply"):
            jsonio.loads(data)
    with pytest.raises(jsonio.NotJson, match=r"more than 60 levels"):  # 61 deep, 50 more openings in a string
        jsonio.loads('{"a":' * 60 + '{"b":"' + "{" * 50 + '"}' + "}" * 60, max_depth=60)
    assert jsonio.loads('{"b": "' + "[" * 500 + '"}') == {"b": "[" * 500}  # many openings, all in a string: shallow


def _deep_json(prefix: str = '{"key": ') -> str:
    return prefix + "[" * DEEP + "]" * DEEP + "}"


def test_deep_manifests_and_run_records_in_the_root_are_not_acted_on(tmp_path):
    """A manifest, an archived observation's manifest and a run record nested 100,000 deep: `status`,
    `gc`, `history` and `compare` go on, each such file left alone and said so, no traceback."""
    root = tmp_path / "artifacts"
    rows = json.loads(cli(root, "status", "--json").stdout)
    full = next(r["full_key"] for r in rows if r["stage"] == "FullRun")
    for d in (root / "PrepareModel" / rows[0]["key"], root / "FullRun" / full[:16],
              root / ".observations" / "FullRun" / full[:16] / "run-1"):
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(_deep_json())
    (root / "runs" / "run-1").mkdir(parents=True)
    (root / "runs" / "run-1" / "run.json").write_text(_deep_json('{"stages": '))
    outs = {}
    for args in (("status",), ("gc",), ("history", full[:16]), ("compare", "run-1", full[:16])):
        proc = cli(root, *args)
        outs[args[0]] = out = proc.stdout + proc.stderr
        assert "Traceback" not in out and "RecursionError" not in out, (args, out[-3000:])
        assert proc.returncode in (0, 2), (args, out[-3000:])
    assert (root / "FullRun" / full[:16] / "manifest.json").is_file()  # left as it was
    assert "no readable manifest.json" in outs["gc"] and "nested too deeply (more than 100 levels)" in outs["gc"]
    assert "run-1" in outs["compare"] and "nested too deeply (more than 100 levels)" in outs["compare"]


@pytest.mark.parametrize("backend", ["torch", "trtllm"])
def test_a_deep_checkpoint_config_is_refused_before_any_stage(tmp_path, run_cli, backend):
    """Read by the input checks and by each backend's own (its architecture, a vision tower)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"architectures": ["X"], "hidden_size": 64, "x": ' + "[" * DEEP + "]" * DEEP + "}")
    root = tmp_path / "artifacts"
    refused(run_cli(root, "status", "--overrides", f"model.checkpoint={ckpt},build.backend={backend}"), root,
            "model.checkpoint", "config.json: JSON nested too deeply (more than 100 levels)")


def test_a_deep_dataset_line_is_refused_before_any_stage(tmp_path, run_cli):
    root = tmp_path / "artifacts"
    data = tmp_path / "d.jsonl"
    nested = {"role": "user", "content": "x"}
    for _ in range(150):  # under the interpreter's limit, over perfdag's
        nested = {"role": "user", "content": [nested]}
    data.write_text(json.dumps({"messages": [nested], "output": "a"}) + "\n")
    refused(run_cli(root, "status", "--overrides", f"dataset.format=jsonl,dataset.path={data},dataset.num_samples=1"), root,
            "dataset.path", "line 1: JSON nested too deeply (more than 100 levels)")


def test_a_deep_content_hash_memo_in_the_root_is_ignored(tmp_path):
    """The root's content-hash memo (.hashcache) is a shortcut: nested past reading, it is rebuilt."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "f").write_text("x")
    memo = tmp_path / "memo.json"
    memo.write_text("[" * DEEP + "]" * DEEP)
    first = dir_content_hash(tmp_path / "data", memo)
    assert first == dir_content_hash(tmp_path / "data", tmp_path / "fresh.json")
    assert isinstance(json.loads(memo.read_text()), dict)
