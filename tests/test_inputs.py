"""Every malformed input is refused before any stage runs: non-zero exit, the field named, no
traceback, nothing written under the artifacts root."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from conftest import REPO, luigi_cmd

DEFAULT = REPO / "params" / "default.yaml"

# (id, params file bytes appended after `extends: default`, overrides, what stderr must name)
CASES = [
    ("undecodable", b"build:\n  max_batch_size: 8\n# caf\xe9\n", "", "not UTF-8"),
    ("nul-bytes", b"build:\n  max_batch_size: 8\x00\n", "", "NUL"),
    ("duplicate-key", b"build:\n  max_batch_size: 8\n  max_batch_size: 16\n", "", "duplicate key 'max_batch_size'"),
    ("duplicate-section", b"build:\n  max_batch_size: 8\nbuild:\n  dtype: float32\n", "", "duplicate key 'build'"),
    ("bool-for-int", b"build:\n  max_batch_size: true\n", "", "build.max_batch_size"),
    ("bool-for-float", b"accuracy:\n  target: yes\n", "", "accuracy.target"),
    ("string-for-int", b"build:\n  max_batch_size: '8'\n", "", "build.max_batch_size"),
    ("list-for-int", b"build:\n  max_batch_size: [8]\n", "", "build.max_batch_size"),
    ("nan", b"accuracy:\n  target: .nan\n", "", "accuracy.target"),
    ("inf", b"loadgen:\n  offline_expected_qps: .inf\n", "", "loadgen.offline_expected_qps"),
    ("override-bool", b"", "build.max_batch_size=true", "build.max_batch_size"),
    ("override-nan", b"", "loadgen.server_target_qps=.nan", "loadgen.server_target_qps"),
    ("bind-not-an-address", b"triton:\n  bind: my laptop\n", "", "triton.bind"),
    ("bind-out-of-range", b"triton:\n  bind: 256.1.1.1\n", "", "triton.bind"),
    ("bind-hostname", b"triton:\n  bind: example.com\n", "", "triton.bind"),
    ("control-char-escape", b'model:\n  name: "tiny\\e[31m"\n', "", "model.name"),
    ("control-char-newline", b'dataset:\n  name: "a\\nb"\n', "", "dataset.name"),
    ("control-char-in-flag", b'build:\n  flags:\n    x: "a\\tb"\n', "", "build.flags.x"),
    ("ignored-by-torch", b"runtime:\n  num_gpus: 8\n", "", "runtime.num_gpus"),
    ("ignored-by-torch-2", b"runtime:\n  kv_cache_free_gpu_mem_fraction: 0.5\n", "", "runtime.kv_cache_free_gpu_mem_fraction"),
    ("flag-torch-ignores", b"build:\n  flags:\n    use_fp8_context_fmha: enable\n", "", "build.flags.use_fp8_context_fmha"),
    ("unknown-key", b"build:\n  max_batch_sise: 8\n", "", "build.max_batch_sise"),
    ("unknown-section", b"bulid:\n  max_batch_size: 8\n", "", "bulid"),
    ("not-a-mapping", b"- just\n- a list\n", "", "mapping"),
    ("extends-not-a-name", b"", "", "extends"),
    ("negative", b"build:\n  max_batch_size: -1\n", "", "build.max_batch_size"),
]


def _params(tmp_path, body: bytes, case: str) -> str:
    f = tmp_path / "bad.yaml"
    head = b"extends: [1, 2]\n" if case == "extends-not-a-name" else f"extends: {DEFAULT}\n".encode()
    f.write_bytes(body if case in ("not-a-mapping",) else head + body)
    return str(f)


def _check(proc, root, needle):
    assert proc.returncode != 0, proc.stdout[-2000:]
    err = proc.stderr
    assert needle in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert not root.exists() or not any(root.iterdir()), sorted(root.rglob("*"))


@pytest.mark.parametrize("case,body,overrides,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_params_are_refused_before_any_stage(case, body, overrides, needle, tmp_path):
    root = tmp_path / "artifacts"
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "status", "--params-file", _params(tmp_path, body, case),
                           "--overrides", overrides], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    _check(proc, root, needle)


@pytest.mark.parametrize("case", ["undecodable", "bool-for-int", "control-char-escape"])
def test_luigi_refuses_them_too(case, tmp_path):
    body, overrides, needle = next((b, o, n) for c, b, o, n in CASES if c == case)
    root = tmp_path / "artifacts"
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    proc = subprocess.run(luigi_cmd("FullRun", "--params-file", _params(tmp_path, body, case), "--overrides", overrides),
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    _check(proc, root, needle)


def _pickle(tmp_path):
    import pandas as pd

    f = tmp_path / "data.pkl"
    pd.DataFrame({"tok_input": [[1, 2, 3]], "output": ["x"]}).to_pickle(f)
    return f


@pytest.mark.parametrize("extra,needle", [
    ("", "dataset.allow_pickle"),  # nothing said: refused, and the message names the fix
    ("dataset.sha256=" + "0" * 64, "dataset.sha256"),  # the wrong hash
])
def test_a_pickle_dataset_is_an_explicit_choice(extra, needle, tmp_path):
    data = _pickle(tmp_path)
    root = tmp_path / "artifacts"
    overrides = f"dataset.format=mlperf_pickle,dataset.path={data},accuracy.reference_scores=mlperf,accuracy.target=0.999" + (
        f",{extra}" if extra else "")
    proc = subprocess.run([sys.executable, "-m", "pipeline", "status", "--overrides", overrides], cwd=REPO,
                          env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True, text=True)
    _check(proc, root, needle)
    good = hashlib.sha256(data.read_bytes()).hexdigest()
    for ok in (f"dataset.sha256={good}", "dataset.allow_pickle=true"):
        proc = subprocess.run([sys.executable, "-m", "pipeline", "status", "--json", "--overrides",
                               f"dataset.format=mlperf_pickle,dataset.path={data},"
                               f"accuracy.reference_scores=mlperf,accuracy.target=0.999,{ok}"], cwd=REPO,
                              env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "a/b", ".hidden", "x\ty"])
def test_a_sweep_name_never_leaves_the_artifacts_root(name, tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f'name: "{name}"\nbase: {DEFAULT}\npoints:\n  - {{loadgen.min_query_count: 8}}\n')
    root = tmp_path / "artifacts"
    proc = subprocess.run(luigi_cmd("Nightly", "--date", "2026-11-01", "--sweep", str(sweep)), cwd=REPO,
                          env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True, text=True,
                          timeout=120)
    _check(proc, root, "name")
    assert not (tmp_path / "escape").exists() and not list(tmp_path.glob("**/nightly.json"))


def test_undecodable_sweep_file(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_bytes(b"name: x\xff\n")
    root = tmp_path / "artifacts"
    proc = subprocess.run(luigi_cmd("Sweep", "--sweep", str(sweep)), cwd=REPO,
                          env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True, text=True,
                          timeout=120)
    _check(proc, root, "not UTF-8")
