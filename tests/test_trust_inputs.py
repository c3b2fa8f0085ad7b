"""Inputs a user (or an adversary) hands perfdag: refused before any stage runs with one bounded
message naming the file and field, no traceback, nothing written; and artifacts roots whose path
a shell would mangle (space, non-ASCII, `$`) served by a real tritonserver."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import FAST, REPO, luigi_cmd, run_luigi, tritonservers_under

from harness.serving.launcher import servers_live
from harness.serving.records import servers_of

DEFAULT = REPO / "params" / "default.yaml"


def status(root, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "status", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)})


def luigi(root, task, *args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(luigi_cmd(task, *args), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PERFDAG_ARTIFACTS": str(root)})


def refused(proc, root, *needles, max_bytes=20_000):
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    for needle in needles:
        assert needle in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert len(out.encode()) < max_bytes, f"{len(out)} characters of output"
    assert not root.exists() or not any(root.iterdir()), sorted(root.rglob("*"))


# --- YAML and bounded output ------------------------------------------------------------------------

BOMB = "".join([f"l0: &l0 [{','.join(['x'] * 9)}]\n"] +
               [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10)]) + "model: {name: *l9}\n"


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path):
    f = tmp_path / "bomb.yaml"
    f.write_text(BOMB)
    t0 = time.monotonic()
    proc = status(tmp_path / "artifacts", "--params-file", str(f))
    assert time.monotonic() - t0 < 30
    refused(proc, tmp_path / "artifacts", "bomb.yaml", "alias *l0 is not allowed", "line 2")


@pytest.mark.parametrize("body", ["base: &b {max_batch_size: 8}\nbuild: *b\n",
                                  "build: &b {max_batch_size: 8}\nruntime:\n  <<: *b\n"], ids=["alias", "merge-key"])
def test_any_alias_is_refused(tmp_path, body):
    f = tmp_path / "p.yaml"
    f.write_text(body)
    refused(status(tmp_path / "a", "--params-file", str(f)), tmp_path / "a", "p.yaml", "alias *b")


def test_an_alias_in_a_sweep_file_is_refused(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(f"base: {DEFAULT}\ngrid: &g {{build.max_batch_size: [8]}}\npoints:\n  - *g\n")
    refused(luigi(tmp_path / "a", "Sweep", "--sweep", str(f)), tmp_path / "a", "alias *g")


def test_a_10mb_string_is_refused_and_not_printed(tmp_path):
    """A 10 MB params file is refused by its size before it is parsed (yamlio.MAX_YAML_BYTES); a
    100 kB string in a smaller one by the field's length; neither is printed."""
    f = tmp_path / "big.yaml"
    f.write_text(f"extends: {DEFAULT}\nmodel:\n  name: '{'x' * 10_000_000}'\n")
    refused(status(tmp_path / "a", "--params-file", str(f)), tmp_path / "a", "big.yaml", "more than the 1048576")
    f.write_text(f"extends: {DEFAULT}\nmodel:\n  name: '{'x' * 100_000}'\n")
    refused(status(tmp_path / "a", "--params-file", str(f)), tmp_path / "a", "model.name", "100000 characters")


def test_a_10mb_bad_value_of_the_wrong_type_is_not_printed(tmp_path):
    refused(status(tmp_path / "a", "--overrides", "build.max_batch_size=" + "9" * 100_000 + "x"), tmp_path / "a",
            "build.max_batch_size")


def test_thousands_of_problems_print_a_bounded_list(tmp_path):
    f = tmp_path / "many.yaml"
    f.write_text("build:\n" + "".join(f"  k{i}: 1\n" for i in range(5000)))
    proc = status(tmp_path / "a", "--params-file", str(f))
    refused(proc, tmp_path / "a", "build.k0", "more problem(s)")
    assert len(proc.stderr.splitlines()) < 80


# --- params files --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"], ids=["empty", "comment", "blank"])
def test_an_empty_params_file_is_refused(tmp_path, text):
    f = tmp_path / "empty.yaml"
    f.write_text(text)
    refused(status(tmp_path / "a", "--params-file", str(f)), tmp_path / "a", "empty.yaml", "is empty")


def test_a_directory_as_params_file_is_called_a_directory(tmp_path):
    proc = status(tmp_path / "a", "--params-file", str(tmp_path))
    refused(proc, tmp_path / "a", "is a directory")
    assert "not found" not in proc.stderr


# --- Nightly --date ------------------------------------------------------------------------------------

@pytest.mark.parametrize("date", ["2026-13-45", "yesterday", "2026-02-30", "2026-11-22; rm -rf ~"])
def test_a_bad_nightly_date_is_one_line(tmp_path, date):
    proc = luigi(tmp_path / "a", "Nightly", "--date", date, "--sweep", str(REPO / "params/sweeps/batch_and_qps.yaml"))
    refused(proc, tmp_path / "a", "--date", "YYYY-MM-DD")
    assert len([ln for ln in proc.stderr.splitlines() if "--date" in ln]) == 1


# --- checkpoints and datasets, before any stage ----------------------------------------------------------

GOOD_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}


@pytest.mark.parametrize("files,needle", [
    ({"config.json": '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64'}, "config.json: invalid JSON"),
    ({"config.json": b'{"architectures": ["Llama\xff"]}'}, "config.json: not UTF-8"),
    ({"config.json": '["LlamaForCausalLM"]'}, "must hold a JSON object"),
    ({"config.json": '{"hidden_size": 64}'}, "needs 'architectures'"),
    ({"config.json": '{"architectures": ["X"], "hidden_size": -4}'}, "hidden_size must be a positive integer"),
    ({"config.json": '{"architectures": ["X"], "vocab_size": "32000"}'}, "vocab_size must be a positive integer"),
    ({"tokenizer_config.json": '{"model_max_length": '}, "tokenizer_config.json: invalid JSON"),
    ({"special_tokens_map.json": b"\xff\xfe{}"}, "special_tokens_map.json: not UTF-8"),
    ({"tokenizer.json": "version: 1\n"}, "tokenizer.json: not a JSON tokenizer"),
], ids=["truncated", "not-utf8", "a-list", "no-architectures", "negative-size", "string-size", "tokenizer-config",
        "special-tokens", "tokenizer-json"])
def test_a_broken_checkpoint_is_refused_naming_the_file(tmp_path, files, needle):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(GOOD_CONFIG))
    for name, data in files.items():
        (ckpt / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    root = tmp_path / "a"
    refused(status(root, "--overrides", f"model.checkpoint={ckpt}"), root, "model.checkpoint", needle)
    # luigi too: PrepareModel never publishes it
    refused(luigi(root, "PrepareModel", "--overrides", f"model.checkpoint={ckpt}"), root, needle)


def test_a_good_checkpoint_directory_passes(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(GOOD_CONFIG))
    (ckpt / "tokenizer.json").write_text('{"version": "1.0"}')
    proc = status(tmp_path / "a", "--json", "--overrides", f"model.checkpoint={ckpt}")
    assert proc.returncode == 0, proc.stderr[-2000:]


JSONL_CASES = [
    (b'{"input_ids": [1, 2], "output": "a"}\n{"input": "caf\xe9", "output": "b"}\n', "line 2: not UTF-8"),
    (b'{"input_ids": [1, 2], "output": "a"}\n{"input_ids": [1, 2], "output": \n', "line 2: invalid JSON"),
    (b'[1, 2]\n', "line 1: expected a JSON object"),
    (b'{"output": "a"}\n', "line 1: missing field 'input'"),
    (b'{"input_ids": [1, 2]}\n', "line 1: missing reference"),
    (b'{"input_ids": [1, "x"], "output": "a"}\n', "line 1"),
]


@pytest.mark.parametrize("data,needle", JSONL_CASES, ids=["utf8", "json", "not-object", "no-input", "no-reference",
                                                           "bad-ids"])
def test_a_broken_jsonl_dataset_is_refused_before_any_stage(tmp_path, data, needle):
    f = tmp_path / "d.jsonl"
    f.write_bytes(data)
    root = tmp_path / "a"
    over = f"dataset.format=jsonl,dataset.path={f},dataset.num_samples=1"
    refused(status(root, "--overrides", over), root, "dataset.path", needle)


def test_a_bad_byte_deep_in_a_jsonl_dataset_fails_preparedataset_with_one_message(built_fast, tmp_path):
    """The head check reads the first lines only; the stage reads everything and names the line."""
    f = tmp_path / "d.jsonl"
    good = b'{"input_ids": [5, 6, 7], "output": "abc"}\n'
    f.write_bytes(good * 99 + b'{"input": "caf\xe9", "output": "b"}\n' + good * 10)
    root = tmp_path / "a"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs"))
    before = set(root.glob("PrepareDataset/*/manifest.json"))  # the session's prepared datasets
    proc = run_luigi("PrepareDataset", "--overrides", f"{FAST},dataset.format=jsonl,dataset.path={f},"
                     "dataset.num_samples=105,accuracy.reference_scores=self", artifacts=root, check=False)
    assert proc.returncode != 0
    assert "line 100: not UTF-8" in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "UnicodeDecodeError" not in proc.stderr, proc.stderr[-3000:]
    assert set(root.glob("PrepareDataset/*/manifest.json")) == before  # nothing published


# --- sweep files -----------------------------------------------------------------------------------------

def _sweep(tmp_path, body: str):
    f = tmp_path / "s.yaml"
    f.write_text(f"name: s\nbase: {DEFAULT}\n" + body)
    return str(f)


def test_duplicate_sweep_points_are_refused_naming_both(tmp_path):
    f = _sweep(tmp_path, "grid:\n  build.max_batch_size: [8, 16]\npoints:\n  - {build.max_batch_size: 16}\n"
                         "  - {loadgen.scenario: Server, loadgen.server_target_qps: 5}\n"
                         "  - {loadgen.server_target_qps: 5, loadgen.scenario: Server}\n")
    proc = luigi(tmp_path / "a", "Sweep", "--sweep", f)
    refused(proc, tmp_path / "a", "points[0] is the same point as grid point 2",
            "points[2] is the same point as points[1]")


def test_every_problem_of_a_sweep_is_listed_at_once(tmp_path):
    f = _sweep(tmp_path, "points:\n  - {build.max_batch_sise: 8}\n  - {loadgen.scenaro: Server}\n"
                         "  - {build.max_batch_size: 8}\n  - {build.max_batch_size: 8}\n")
    proc = luigi(tmp_path / "a", "Sweep", "--sweep", f)
    refused(proc, tmp_path / "a", "build.max_batch_sise", "loadgen.scenaro", "points[3] is the same point as points[2]")
    g = tmp_path / "t.yaml"
    g.write_text(f"base: {DEFAULT}\nfoo: 1\nbar: 2\ngrid: {{build.max_batch_size: []}}\n")
    refused(luigi(tmp_path / "a", "Sweep", "--sweep", str(g)), tmp_path / "a", "foo", "bar", "grid")


# --- any root path ------------------------------------------------------------------------------------------

def test_a_root_whose_path_a_shell_would_mangle_is_served(built_fast, tmp_path):
    """A space, non-ASCII and `$` in the root's path: Triton's Python backend starts its stub through
    `bash -c`, so before the fix the server never became ready (and non-ASCII failed at once). Servers
    run from their private directory, whose path is plain whatever the root's is."""
    root = tmp_path / "my runs" / "wé $HOME ïrd"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs"))
    try:
        proc = run_luigi("LaunchServers", "--overrides", FAST + ",triton.ready_timeout_s=60", artifacts=root,
                         check=False, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (srv,) = json.loads(next(root.glob("LaunchServers/*/servers.json")).read_text())["servers"]
        assert all(str(root) not in str(v) for v in srv.values())  # records name no machine path of it
        assert srv["repo"].startswith("<private>/")

        assert servers_live(servers_of([srv], "servers.json", root))  # read back from this root: ours
        assert len(tritonservers_under(root)) == 1
    finally:
        subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO, capture_output=True,
                       env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, timeout=120)
    assert not tritonservers_under(root)
