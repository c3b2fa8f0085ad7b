"""`search --url`, `frontier --url` and `sessions --url`: the server a user already has, measured by
every flow without a model stage, and what they measure listed by `history` and taken by `compare`
(issue 48, items 1 and 2). The server is perfdag's echo server (a real HTTP server, started here)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_records, statuses

from harness.serving.openai.client import probe
from harness.serving.ports import free_port
from pipeline.cli import main

MODEL_STAGES = {"PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "LaunchServers"}
SMALL = ("dataset.num_samples=16,harness.warmup_queries=2,loadgen.min_query_count=16,loadgen.min_duration_ms=0,"
         "loadgen.offline_expected_qps=16")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A tokenizer trained in seconds: what the echo server's dataset is tokenized with (no model built)."""
    from harness.model.tiny import train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    train_tokenizer(512, d)
    return d


@pytest.fixture()
def echo():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port),
                             "--token-ids", "--token-delay-ms", "2"], cwd=REPO, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(10)


def pipeline(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    run = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, f"{args[0]}: exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    return run


def built_stages(root: Path) -> set[str]:
    return {stage for r in run_records(root) for stage in statuses(r)}


def keys(root: Path, stage: str) -> list[str]:
    return sorted(d.name for d in (root / stage).iterdir() if not d.name.startswith("."))


def test_search_and_frontier_measure_a_running_server_with_no_model_stage(echo, tokenizer_dir, tmp_path,
                                                                           monkeypatch, capsys):
    """`search --url` probes the running server and confirms its found load with a Bench (no accuracy run,
    said so); `frontier --url` measures one Bench per level of that server. No run record names a model
    stage or a launch, and `history` and `compare` take the Benches they made."""
    root = tmp_path / "artifacts"
    server = ("--url", echo, "--model", "echo", "--tokenizer", str(tokenizer_dir), "--server", "vllm")
    search = pipeline(root, "search", *server, "--overrides", SMALL + ",search.highest=4", "--concurrency", "1",
                      "--slo", "e2e_p99_ms<=60000", "--probe-min-duration-ms", "0", "--probe-min-query-count", "16",
                      "--repeat", "1")
    # the plain load flag, mapped as bench maps its own, the mapping printed before anything runs
    assert search.stdout.splitlines()[0] == \
        "search: --concurrency 1 -> loadgen.scenario=Offline, search.axis=max_in_flight, search.start=1"
    assert "  confirmed  4: VALID at full settings, no accuracy run (a running server: no references)" in search.stdout
    assert "  result     4" in search.stdout, search.stdout[-3000:]
    (confirming,) = keys(root, "Bench")
    frontier = pipeline(root, "frontier", *server, "--concurrency", "1,2", "--overrides", SMALL)
    assert "perfdag Frontier" in frontier.stdout and "2 point(s), 1 engine(s)" in frontier.stdout, frontier.stdout
    (fdir,) = [d for d in (root / "Frontier").iterdir() if not d.name.startswith(".")]
    rows = json.loads((fdir / "frontier.json").read_text())["rows"]
    assert [(r["concurrency"], r["valid"], r["accuracy_passed"]) for r in rows] == [(1, True, None), (2, True, None)], rows
    assert built_stages(root) & MODEL_STAGES == set(), built_stages(root)
    assert {"ExternalServers", "RunLoadgen", "Bench", "FindMaxLoad", "Frontier"} <= built_stages(root)

    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    assert main(["history", confirming[:8]]) == 0
    assert capsys.readouterr().out.startswith(f"Bench {confirming}: 1 observation(s)")
    one, two = (r["fullrun_key"] for r in rows)
    assert main(["compare", one, two]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"A: Bench {one}") and out.splitlines()[1].startswith(f"B: Bench {two}")


@pytest.mark.parametrize("args, needle", [
    (("search", "--url", "http://127.0.0.1:9", "--model", "m"), "dataset.tokenizer: name the served model's"),
    (("frontier", "--url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", "{tokenizer}", "--engines",
      "build.max_batch_size=4,8"), "--engines with --url"),
    (("frontier", "--url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", "{tokenizer}", "--overrides",
      "slurm.mem=1G"), "slurm.array with a running server (--url)"),
    # the plain load flags: what a search or a frontier cannot mean is refused, naming the flags
    (("search", "--concurrency", "1,4,16"), "--concurrency 1,4,16: a search chooses the loads it probes"),
    (("search", "--concurrency", "--request-rate", "4"), "--concurrency and --request-rate: a search searches one loop"),
    (("search", "--request-rate", "4", "--axis", "max_in_flight"), "--request-rate searches "
                                                                     "search.axis=server_target_qps; --axis max_in_flight"),
    (("search", "--concurrency", "4", "--start", "2"), "--concurrency 4 and --start 2: both give the first load"),
    (("search", "--concurrency", "2.5"), "--concurrency: '2.5' is not a positive whole number"),
    (("search", "--request-rate", "-1"), "--request-rate: '-1' is not a positive number"),
    (("frontier", "--request-rate", "1,2"), "--request-rate 1,2: a frontier's points are closed-loop concurrency"),
    (("frontier", "--concurrency", "1,2", "--levels", "1,2"), "--concurrency and --levels: the same levels"),
])
def test_a_url_flow_refuses_what_it_cannot_measure_before_anything_runs(args, needle, tokenizer_dir, tmp_path,
                                                                          monkeypatch, capsys):
    root = tmp_path / "artifacts"
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    assert main([a.format(tokenizer=tokenizer_dir) for a in args]) == 2
    assert needle in capsys.readouterr().out
    assert not (root / "runs").exists() or not list((root / "runs").iterdir())
