"""Synthetic workloads (dataset.format: synthetic): seeded prompts of set input/output lengths, built
here with the model's tokenizer, measured as asked."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO

from harness.config import ParamsError
from harness.config.schema import SyntheticSection
from harness.model.datasets import DatasetError, Sample, load_dataset, write_jsonl
from harness.model.synthetic import synthetic_samples
from harness.model.tiny import train_tokenizer
from harness.serving.openai.client import probe
from harness.serving.ports import free_port
from tasks.base import load_params

SHAPE = SyntheticSection(isl_mean=128, isl_sd=32, osl_mean=64, osl_sd=16)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    """The tiny model's tokenizer (trained in a second, no model): what `--tokenizer` names."""
    d = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(512, d)
    return d


@pytest.fixture(scope="module")
def tok(tok_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir))


def test_lengths_follow_the_requested_means_and_spreads(tok):
    """ISL 128 +- 32 and OSL 64 +- 16 over 512 samples: means within 3%, spreads within 15%; prompts
    decode and encode back to themselves, so a server given text sees the same length."""
    got = synthetic_samples(tok, 512, SHAPE, 128)
    isl = np.array([len(ids) for ids, _ in got])
    osl = np.array([n for _, n in got])
    assert isl.mean() == pytest.approx(128, rel=0.03) and isl.std() == pytest.approx(32, rel=0.15)
    assert osl.mean() == pytest.approx(64, rel=0.03) and osl.std() == pytest.approx(16, rel=0.15)
    assert osl.min() >= 2 and osl.max() <= 128 and isl.min() >= 1
    stable = sum(tok.encode(tok.decode(ids), add_special_tokens=False) == ids for ids, _ in got[:64])
    assert stable >= 60  # a seam the tokenizer cannot settle in ROUND_TRIPS passes is rare
    assert len({tuple(ids) for ids, _ in got}) == len(got)


def test_same_seed_same_dataset_another_seed_another(tok):
    """The seed fixes every draw: the dataset is a function of its settings and tokenizer."""
    a = synthetic_samples(tok, 32, SHAPE, 128)
    assert synthetic_samples(tok, 32, SHAPE, 128) == a
    assert synthetic_samples(tok, 32, SHAPE.model_copy(update={"seed": 1}), 128) != a


def test_zero_spread_gives_exact_lengths_and_the_cap_holds(tok):
    """sd 0 is a fixed shape (every prompt 100 tokens, every output 20); no output exceeds the cap."""
    fixed = SyntheticSection(isl_mean=100, osl_mean=20)
    got = synthetic_samples(tok, 16, fixed, 20)
    assert {len(ids) for ids, _ in got} <= {99, 100, 101} and {n for _, n in got} == {20}
    wide = SyntheticSection(isl_mean=16, isl_sd=50, osl_mean=10, osl_sd=50)
    assert max(n for _, n in synthetic_samples(tok, 64, wide, 12)) <= 12


def test_shared_prefixes_start_every_prompt(tok):
    """prefix_tokens 32 in 2 groups: prompts i and i+2 start alike, i and i+1 do not; the prefix counts
    in the input length."""
    shape = SyntheticSection(isl_mean=64, osl_mean=8, prefix_tokens=32, prefix_groups=2)
    got = [ids for ids, _ in synthetic_samples(tok, 8, shape, 8)]
    head = 30  # the seam's last tokens may merge with the body's first
    assert all(got[i][:head] == got[i % 2][:head] for i in range(8))
    assert got[0][:head] != got[1][:head]
    assert sum(len(g) for g in got) / len(got) == pytest.approx(64, abs=2)


def test_the_stage_format_writes_and_reads_back_each_samples_output_length(tok_dir, tmp_path):
    """load_dataset('synthetic') gives samples that carry their output length; samples.jsonl keeps it
    as max_tokens, and a jsonl with a bad max_tokens is refused naming the line and the field."""
    samples = load_dataset("synthetic", None, tok_dir, 16, 512, synthetic=SHAPE, max_new_tokens=128)
    assert all(s.max_new_tokens is not None and s.reference_text == "" for s in samples)
    back = load_dataset("jsonl", write_jsonl(samples, tmp_path / "s.jsonl"), None, 16)
    assert [s.max_new_tokens for s in back] == [s.max_new_tokens for s in samples]
    assert [s.input_ids for s in back] == [s.input_ids for s in samples]
    for bad in ("0", "true", "\"64\"", "2.5"):
        (tmp_path / "bad.jsonl").write_text(f'{{"input_ids": [1, 2], "output": "x", "max_tokens": {bad}}}\n')
        with pytest.raises(DatasetError, match=r"line 1: field 'max_tokens'"):
            load_dataset("jsonl", tmp_path / "bad.jsonl", None, 1)
    with pytest.raises(DatasetError, match="needs its settings"):
        load_dataset("synthetic", None, tok_dir, 4)
    assert Sample(0, [1]).max_new_tokens is None


@pytest.mark.parametrize("overrides, needle", [
    ("dataset.synthetic.osl_mean=64,dataset.synthetic.osl_sd=16", "set dataset.max_new_tokens=112"),
    ("dataset.synthetic.isl_mean=16,dataset.synthetic.prefix_tokens=16", "prefix_tokens 16 leaves no room"),
    ("dataset.synthetic.isl_mean=128,dataset.synthetic.isl_sd=32", "raise build.max_input_len"),
    ("dataset.synthetic.isl_sd=-1", "dataset.synthetic.isl_sd"),
    ("dataset.synthetic.islmean=10", "islmean"),
])
def test_bad_synthetic_settings_are_refused_naming_the_field_and_fix(overrides, needle):
    """Outputs the cap would cut, a prefix as long as the prompt, a negative spread, a misspelt key:
    refused before anything runs, the message naming the field."""
    with pytest.raises(ParamsError, match=needle):
        load_params("params/default.yaml", "dataset.format=synthetic," + overrides)


def test_a_synthetic_dataset_takes_no_path(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text("{}\n")
    with pytest.raises(ParamsError, match="path is only used with format mlperf_pickle, jsonl or librispeech"):
        load_params("params/default.yaml", f"dataset.format=synthetic,dataset.path={f}")


@pytest.fixture
def echo_ids():
    """An OpenAI echo server that returns token ids and generates exactly max_tokens."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port),
                             "--token-ids"], cwd=REPO)
    deadline = time.monotonic() + 30
    while not probe(f"127.0.0.1:{port}"):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def test_bench_runs_isl_128_osl_64_and_the_report_measures_those_lengths(echo_ids, tok_dir, tmp_path):
    """`pipeline bench --isl 128:32 --osl 64:16` against a server that generates what it is asked: the
    report's measured input and output lengths are the requested means and spreads."""
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(tmp_path / "artifacts")}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "bench", "--url", echo_ids, "--model", "echo", "--server", "vllm",
         "--tokenizer", str(tok_dir), "--isl", "128:32", "--osl", "64:16", "--scenario", "Server",
         "--overrides", "dataset.num_samples=256,loadgen.server_target_qps=100,loadgen.min_query_count=256,"
                        "loadgen.min_duration_ms=0,harness.warmup_queries=0"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 10), proc.stdout[-2000:] + proc.stderr[-4000:]
    report = json.loads(next((tmp_path / "artifacts" / "Bench").glob("*/report.json")).read_text())
    stats = report["client_stats"]
    assert stats["input_tokens"]["mean"] == pytest.approx(128, rel=0.05)
    assert stats["input_tokens"]["std"] == pytest.approx(32, rel=0.2)
    assert stats["output_tokens"]["mean"] == pytest.approx(64, rel=0.05)
    assert stats["output_tokens"]["std"] == pytest.approx(16, rel=0.2)
    assert report["performance"]["itl_ms"]["n"] > 0  # streamed: ITL beside the lengths
    assert not (tmp_path / "artifacts" / "PrepareModel").exists()
