"""`python -m pipeline bench --url`: a server that runs already (a real `transformers serve`) measured
without PrepareModel, Quantize, BuildEngine or a launch, through the same cores, report and cache."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_records, statuses

from harness.backends.openai.servers import server_argv
from harness.reports.sweep import fmt
from harness.serving.openai.client import probe
from harness.serving.ports import free_port
from pipeline.cli import main
from tasks.base import load_params

OPENAI = "params/examples/openai-cpu.yaml"
SHORT = ("dataset.num_samples=32,loadgen.server_target_qps=8,loadgen.min_query_count=48,"
         "loadgen.min_duration_ms=2000,harness.warmup_queries=2")


@pytest.fixture(scope="module")
def model_dir(built_fast) -> Path:
    """The tiny model's Hugging Face checkpoint (the session's PrepareModel): what someone serves."""
    return next(p.parent for p in (built_fast / "PrepareModel").glob("*/**/config.json")
                if (p.parent / "tokenizer.json").is_file())


@pytest.fixture(scope="module")
def served(model_dir, tmp_path_factory):
    """`transformers serve` on the tiny model, started as its user would (the openai backend's own
    command line), in its own process group; killed whatever the tests did. Its log goes outside
    the session's shared root: a file added there makes the checkpoint corrupt for every test."""
    port = free_port()
    argv = server_argv(load_params(OPENAI, ""), str(model_dir), port)
    log_path = tmp_path_factory.mktemp("serve") / f"serve-{port}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while not probe(url):
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, "transformers serve did not answer /health within 180 s"
        time.sleep(0.5)
    yield url, proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    log.close()


def bench(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    return subprocess.run([sys.executable, "-m", "pipeline", "bench", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_bench_measures_a_running_server_without_the_model_stages(served, model_dir, tmp_path):
    """A Server run against the running server gives report.json/report.md (ITL included, no accuracy
    run), in a root where no PrepareModel, Quantize, BuildEngine, FillTritonRepo or LaunchServers ever
    ran; the server is not perfdag's, so it still runs afterwards. The params-file form of the same
    measurement has the same keys: everything is reused."""
    url, proc = served
    root = tmp_path / "artifacts"
    args = ("--url", url, "--model", str(model_dir), "--tokenizer", str(model_dir), "--scenario", "Server",
            "--overrides", SHORT)
    first = bench(root, *args)
    assert first.returncode in (0, 10), first.stdout[-3000:] + first.stderr[-5000:]
    assert "perfdag bench:" in first.stdout and "accuracy   - (performance only)" in first.stdout
    assert sorted(d.name for d in root.iterdir() if d.name[0].isupper()) == [
        "Bench", "ExternalServers", "PrepareDataset", "RunLoadgen"]
    assert statuses(run_records(root)[-1]) == {"ExternalServers": "built", "PrepareDataset": "built",
                                               "RunLoadgen": "built", "Bench": "built"}
    report = json.loads(next((root / "Bench").glob("*/report.json")).read_text())
    p = report["performance"]
    assert report["model"] == str(model_dir) and report["accuracy"] is None
    assert p["scenario"] == "Server" and p["samples_per_second"] > 0
    assert p["ttft_ms"]["p50"] > 0 and p["itl_ms"]["n"] > 0 and p["tokens_per_chunk"]["chunks"] > 0
    md = next((root / "Bench").glob("*/report.md")).read_text()
    assert "ITL ms" in md and "performance only" in md
    result = json.loads(next((root / "RunLoadgen").glob("*/result.json")).read_text())
    assert result["harness"]["endpoints"] == [url.removeprefix("http://")]
    assert result["harness"]["methods"] == {"prompt": "text", "output_tokens": "retokenize"}
    # transformers serve exports no metrics: said, and its CPU-seconds (its pid, found by its port) stand in
    (srv,) = result["server_metrics"]["servers"]
    assert "metrics" not in srv and "HTTP 404" in srv["error"], srv
    server_side = md.split("## Server-side (the servers' own metrics)")[1]
    assert "its CPU-seconds instead: " in server_side and "(pid (found by its port))" in server_side, server_side
    assert proc.poll() is None and probe(url)  # never perfdag's to stop

    # the same measurement as a params file: same keys, nothing measured again
    params = tmp_path / "bench.yaml"
    params.write_text(f"extends: {REPO / 'params/default.yaml'}\nbuild: {{backend: openai}}\n"
                      f"openai: {{endpoints: ['{url}'], model: '{model_dir}'}}\n"
                      f"dataset: {{tokenizer: '{model_dir}'}}\nloadgen: {{scenario: Server}}\n")
    again = bench(root, "--params-file", str(params), "--overrides", SHORT)
    assert again.returncode == first.returncode, again.stdout[-2000:] + again.stderr[-3000:]
    assert set(statuses(run_records(root)[-1]).values()) == {"reused"}


MODEL_STAGES = {"PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "LaunchServers"}


def test_frontier_url_measures_a_running_transformers_serve_with_no_model_stage(served, model_dir, tmp_path,
                                                                                monkeypatch, capsys):
    """`frontier --url --levels 1,2` against a `transformers serve` started outside perfdag (issue 48, must
    show): two Bench points of that server, no run record names a model stage or a launch, `history` lists
    each point's Bench, and each point's requests.jsonl has the real server's HTTP moments in order."""
    url, proc = served
    root = tmp_path / "artifacts"
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    tiny = ("dataset.num_samples=8,dataset.max_new_tokens=8,loadgen.min_query_count=8,loadgen.min_duration_ms=0,"
            "harness.warmup_queries=1,loadgen.offline_expected_qps=8")
    run = subprocess.run([sys.executable, "-m", "pipeline", "frontier", "--url", url, "--model", str(model_dir),
                          "--tokenizer", str(model_dir), "--levels", "1,2", "--overrides", tiny], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "2 point(s), 1 engine(s)" in run.stdout, run.stdout[-3000:]
    built = {stage for r in run_records(root) for stage in statuses(r)}
    assert built & MODEL_STAGES == set() and {"ExternalServers", "RunLoadgen", "Bench", "Frontier"} <= built, built
    (fdir,) = [d for d in (root / "Frontier").iterdir() if not d.name.startswith(".")]
    rows = json.loads((fdir / "frontier.json").read_text())["rows"]
    assert [r["concurrency"] for r in rows] == [1, 2] and all(r["valid"] for r in rows), rows
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    for r in rows:
        assert main(["history", r["fullrun_key"][:8]]) == 0
        assert capsys.readouterr().out.startswith(f"Bench {r['fullrun_key']}: 1 observation(s)")
    for jsonl in root.glob("RunLoadgen/*/requests.jsonl"):
        _, *lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
        assert len(lines) == 8 and all(not x["client_retried"] for x in lines)
        for x in lines:
            moments = [x[k] for k in ("client_sent_at_ms", "client_connected_at_ms", "client_written_at_ms",
                                      "client_headers_at_ms", "client_first_byte_at_ms", "client_first_token_at_ms",
                                      "client_done_at_ms") if x[k] is not None]
            assert moments == sorted(moments) and len(moments) >= 6, x
    assert proc.poll() is None and probe(url)  # never perfdag's to stop


def test_search_url_measures_a_running_transformers_serve_with_no_model_stage(served, model_dir, tmp_path,
                                                                              monkeypatch, capsys):
    """`search --url` against a `transformers serve` started outside perfdag (issue 48): its probes and the
    Bench that confirms the found load are of that server, no run record names a model stage or a launch,
    `history` lists the confirming Bench and `compare` takes it beside a plain `bench` of the same server."""
    url, proc = served
    root = tmp_path / "artifacts"
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    server = ("--url", url, "--model", str(model_dir), "--tokenizer", str(model_dir))
    tiny = ("dataset.num_samples=8,dataset.max_new_tokens=8,loadgen.min_query_count=8,loadgen.min_duration_ms=0,"
            "harness.warmup_queries=1,loadgen.offline_expected_qps=8")
    run = subprocess.run([sys.executable, "-m", "pipeline", "search", *server, "--concurrency", "1",
                          "--overrides", tiny + ",search.highest=2", "--slo", "e2e_p99_ms<=600000",
                          "--probe-min-duration-ms", "0", "--probe-min-query-count", "8", "--repeat", "1"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "  confirmed  2: VALID at full settings, no accuracy run (a running server: no references)" in run.stdout, \
        run.stdout[-3000:]
    assert "  result     2" in run.stdout, run.stdout[-3000:]
    (confirming,) = [d.name for d in (root / "Bench").iterdir() if not d.name.startswith(".")]
    one = bench(root, *server, "--concurrency", "1", "--overrides", tiny)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-5000:]
    built = {stage for r in run_records(root) for stage in statuses(r)}
    assert built & MODEL_STAGES == set() and {"ExternalServers", "RunLoadgen", "Bench", "FindMaxLoad"} <= built, built
    for result in root.glob("RunLoadgen/*/result.json"):  # every probe and measurement: of that server
        assert json.loads(result.read_text())["harness"]["endpoints"] == [url.removeprefix("http://")]
    (plain,) = [d.name for d in (root / "Bench").iterdir() if not d.name.startswith(".") and d.name != confirming]
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    assert main(["history", confirming[:8]]) == 0
    assert capsys.readouterr().out.startswith(f"Bench {confirming}: 1 observation(s)")
    assert main(["compare", confirming[:8], plain[:8]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"A: Bench {confirming}") and out[1].startswith(f"B: Bench {plain}"), out
    assert next(x for x in out if x.startswith("result")).split()[1:3] == ["VALID", "VALID"], out
    assert proc.poll() is None and probe(url)  # never perfdag's to stop


def test_session_replay_url_measures_a_running_transformers_serve_with_no_model_stage(served, model_dir, tmp_path,
                                                                                     monkeypatch, capsys):
    """`sessions --url` against a `transformers serve` started outside perfdag (issue 48, must show): the
    agentic replay's chat turns go to that server, no model stage, dataset or launch ever ran, and its
    two observations (the replay measured again) are listed by `history` and taken by `compare`."""
    url, proc = served
    root = tmp_path / "artifacts"
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    cmd = [sys.executable, "-m", "pipeline", "sessions", "--url", url, "--model", str(model_dir), "--trajectories",
           str(REPO / "harness/data/standins/agentic-trajectories.jsonl"), "--users", "2",
           "--overrides", "sessions.trajectories=2,sessions.max_tokens=4"]
    for extra in ((), ("--rerun-from", "RunSessions")):
        run = subprocess.run(cmd + list(extra), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert sorted(d.name for d in root.iterdir() if d.name[0].isupper()) == ["ExternalServers", "RunSessions"]
    built = {stage for r in run_records(root) for stage in statuses(r)}
    assert built & MODEL_STAGES == set(), built
    (art,) = (d for d in (root / "RunSessions").iterdir() if (d / "manifest.json").is_file())
    result = json.loads((art / "result.json").read_text())
    assert result["metrics"]["turns"] > 0
    first, second = (r["run_id"] for r in run_records(root))
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    assert main(["history", art.name[:8]]) == 0
    assert capsys.readouterr().out.startswith(f"RunSessions {art.name}: 2 observation(s)")
    assert main(["compare", first, second]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"A: RunSessions {art.name}@{first} (the 2 observations of its key)", out
    assert proc.poll() is None and probe(url)  # never perfdag's to stop


@pytest.mark.parametrize("args, needle", [
    (("--url", "http://127.0.0.1:9"), "dataset.tokenizer: name the served model's tokenizer directory"),
    (("--tokenizer", "TOK"), "openai.endpoints: measuring a running server needs build.backend=openai"),
    (("--url", "ftp://x:1", "--tokenizer", "TOK"), "openai.endpoints: 'ftp://x:1' is not a server address"),
    (("--url", "http://127.0.0.1:9", "--tokenizer", "/nonexistent"), "dataset.tokenizer: '/nonexistent' is not a directory"),
    (("--url", "http://127.0.0.1:9", "--tokenizer", str(REPO)), "holds no tokenizer.json"),
    (("--url", "http://127.0.0.1:9", "--isl", "x"), "--isl: 'x' is not MEAN or MEAN:SD"),
    (("--url", "http://127.0.0.1:9", "--osl", "64:16", "--dataset", "builtin"), "--isl/--osl shape the synthetic"),
])
def test_bad_bench_input_is_one_line_naming_the_field_and_nothing_is_written(args, needle, tmp_path, monkeypatch,
                                                                            capsys):
    """Missing or malformed --url/--tokenizer/--isl: exit 2, the field and its fix named, no traceback, no
    artifact written."""
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(tmp_path / "artifacts"))
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")  # enough to pass validation
    assert main(["bench", *(str(tmp_path / "tok") if a == "TOK" else a for a in args)]) == 2
    out = capsys.readouterr()
    assert needle in out.out + out.err and "Traceback" not in out.out + out.err
    assert not (tmp_path / "artifacts").exists() or not any((tmp_path / "artifacts").glob("*/*/manifest.json"))


def test_a_server_that_is_not_there_is_named_and_nothing_is_measured(model_dir, tmp_path):
    """Nothing listens at --url: the run fails naming the address, and no measurement is published."""
    port = free_port()
    proc = bench(tmp_path / "artifacts", "--url", f"http://127.0.0.1:{port}", "--tokenizer", str(model_dir),
                 "--overrides", "openai.ready_timeout_s=2", timeout=300)
    assert proc.returncode != 0
    assert f"127.0.0.1:{port}" in proc.stdout + proc.stderr
    assert not list((tmp_path / "artifacts").glob("RunLoadgen/*/manifest.json"))


def _echo(*flags: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port),
                             "--token-ids", *flags], cwd=REPO, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    return url, proc


TINY = ("dataset.num_samples=16,loadgen.min_query_count=16,loadgen.min_duration_ms=0,harness.warmup_queries=2,"
        "loadgen.offline_expected_qps=16")


def test_bench_repeat_3_gives_intervals_and_the_host_and_says_when_answers_are_empty(model_dir, tmp_path):
    """`bench --repeat 3`: three observations in one run, each kept, each result.json with the host's state
    (load before and after, the client's CPU, the server's found by its port, the busiest others), and
    a summary giving tokens/s as median [interval of the median]. A server that answers 96% of requests
    with no token is VALID to LoadGen: the summary says what its answers were (issue 46, item 13)."""
    root = tmp_path / "artifacts"
    url, proc = _echo()
    try:
        args = ("--url", url, "--model", "echo", "--tokenizer", str(model_dir), "--server", "vllm",
                "--scenario", "Offline", "--overrides", TINY)
        run = bench(root, *args, "--repeat", "3")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
        (key16,) = [d.name for d in (root / "Bench").iterdir() if not d.name.startswith(".")]
        assert f"perfdag Bench {key16}: 3 observations in this run" in run.stdout
        assert "judged by, median [interval of the median, 75% confidence] over 3 repeats:" in run.stdout
        tokens = next(x for x in run.stdout.splitlines() if x.strip().startswith("tokens/s"))
        assert "[" in tokens and ".." in tokens and "(+-" in tokens
        (lg16,) = [d.name for d in (root / "RunLoadgen").iterdir() if not d.name.startswith(".")]
        dirs = [root / "RunLoadgen" / lg16, *(root / "observations" / "RunLoadgen" / lg16).iterdir()]
        assert len(dirs) == 3 and len(list((root / "observations" / "Bench" / key16).iterdir())) == 2
        for d in dirs:
            host = json.loads((d / "result.json").read_text())["host"]
            assert len(host["load_before"]) == len(host["load_after"]) == 3 and host["client_cpu_s"] > 0
            (server,) = host["servers"]
            assert server["pid"] == proc.pid and server["from"] == "pid (found by its port)", server
            # A number, possibly 0.0: the echo server's few answers can take under one clock tick (10 ms).
            assert isinstance(server["cpu_s"], float) and server["cpu_s"] >= 0 and isinstance(host["busy"], bool)
        report = json.loads((root / "Bench" / key16 / "report.json").read_text())
        assert report["host"]["servers"][0]["pid"] == proc.pid and report["performance"]["answer_warnings"] == []
        assert "not submittable" not in run.stdout or "accuracy is scored" not in run.stdout  # no accuracy advice
    finally:
        proc.terminate()
        proc.wait(10)
    url, proc = _echo("--empty-share", "0.96")
    try:
        empty = bench(root, "--url", url, "--model", "echo", "--tokenizer", str(model_dir), "--server", "vllm",
                      "--scenario", "Offline", "--overrides", TINY)
    finally:
        proc.terminate()
        proc.wait(10)
    assert empty.returncode == 0, empty.stdout[-3000:] + empty.stderr[-5000:]
    assert "  result     VALID" in empty.stdout
    said = next((x for x in empty.stdout.splitlines() if x.startswith("  WARNING    answers: ")), "")
    assert re.search(r"answers: 1[5-6] of 16 answers \(\d+%\) were empty \(no token", said), empty.stdout[-2000:]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A tokenizer trained in seconds: what the echo server's dataset is tokenized with (no model built)."""
    from harness.model.tiny import train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    train_tokenizer(512, d)
    return d


def test_two_benches_are_observations_that_history_lists_and_compare_takes(tokenizer_dir, tmp_path, monkeypatch,
                                                                           capsys):
    """`bench` run twice against one server (the second measures again): `history <Bench key>` lists both
    observations, and `compare` takes them by run id, by KEY@OBSERVATION and by key, printing what it
    prints for FullRuns (each side named, the one-key warning, each metric with its change and verdict)."""
    root = tmp_path / "artifacts"
    url, proc = _echo()
    try:
        args = ("--url", url, "--model", "echo", "--tokenizer", str(tokenizer_dir), "--server", "vllm",
                "--scenario", "Offline", "--overrides", TINY)
        for extra in ((), ("--rerun-from", "RunLoadgen")):
            run = bench(root, *args, *extra)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    finally:
        proc.terminate()
        proc.wait(10)
    first, second = (r["run_id"] for r in run_records(root)[-2:])
    (key16,) = [d.name for d in (root / "Bench").iterdir() if not d.name.startswith(".")]
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    assert main(["history", key16[:8]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"Bench {key16}: 2 observation(s), newest first"), out
    assert out[2].split()[:2] == [second, "*"] and out[3].split()[0] == first
    assert [row.replace(" *", "").split()[3:5] for row in out[2:]] == [["Offline", "VALID"]] * 2, out
    # the same measurement as a params file (bench --params-file takes it): its Bench key, found as such
    params = tmp_path / "bench.yaml"
    params.write_text(f"extends: {REPO / 'params/default.yaml'}\nbuild: {{backend: openai}}\n"
                      f"openai: {{endpoints: ['{url}'], model: echo, server: vllm}}\n"
                      f"dataset: {{tokenizer: '{tokenizer_dir}'}}\nloadgen: {{scenario: Offline}}\n")
    assert main(["history", str(params), "--overrides", TINY, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["stage"], doc["key"][:16], len(doc["observations"])) == ("Bench", key16, 2)
    for a, b in ((first, second), (f"{key16[:8]}@{first}", key16[:8]), (f"{key16}@{first}", second)):
        assert main(["compare", a, b]) == 0, (a, b)
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert lines[:2] == [f"A: Bench {key16}@{first} (the 2 observations of its key)",
                             f"B: Bench {key16}@{second} (the 2 observations of its key)"], out
        assert "warning: A and B are observations of one key, the same parameters measured again" in out
        tokens = next(x for x in lines if x.startswith("tokens/s"))  # each side: median [interval] of the key's
        assert "[" in tokens and "%" in tokens and tokens.endswith("within noise"), tokens  # never worse or better
        assert next(x for x in lines if x.startswith("result")).split()[1:3] == ["VALID", "VALID"]
        assert "parameters: the same (or not recorded)" in out
    assert main(["compare", first, f"{key16[:8]}@{second}", "--json"]) == 0
    row = next(m for m in json.loads(capsys.readouterr().out)["metrics"] if m["metric"] == "tokens/s")
    reports = [json.loads((d / "report.json").read_text())["performance"]["tokens_per_second"] for d in
               (root / "observations" / "Bench" / key16 / first, root / "Bench" / key16)]
    assert [row["a"], row["b"]] == reports and row["a_spread"]["n"] == 2  # each named observation's own number
    said = [json.loads((d / "report.json").read_text())["observations"] for d in
            (root / "observations" / "Bench" / key16 / first, root / "Bench" / key16)]
    assert [s.get("Bench") for s in said] == [first, second] and not any("FullRun" in s for s in said)  # its own


def test_plain_load_flags_measure_one_point_each_and_print_one_table(tokenizer_dir, tmp_path):
    """`bench --concurrency 1,4 --request-count 24`: the mapping onto LoadGen is printed, each point is a
    Bench of its own that issued exactly 24 requests and held at most its concurrency in flight, and one
    table ends the run, after each point's summary (issue 48, item 3)."""
    root = tmp_path / "artifacts"
    url, proc = _echo("--token-delay-ms", "5")
    try:
        run = bench(root, "--url", url, "--model", "echo", "--tokenizer", str(tokenizer_dir), "--server", "vllm",
                    "--concurrency", "1,4", "--request-count", "24", "--overrides",
                    "dataset.num_samples=32,harness.warmup_queries=2")
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    for n in (1, 4):
        assert (f"bench: --concurrency {n} -> loadgen.scenario=Offline, harness.max_in_flight={n}, "
                "loadgen.min_query_count=24, loadgen.min_duration_ms=0, loadgen.performance_sample_count=24") in run.stdout
    results = sorted((json.loads(p.read_text()) for p in root.glob("RunLoadgen/*/result.json")),
                     key=lambda r: r["harness"]["max_in_flight"])
    assert [(r["scenario"], r["measured"]["requests"], r["harness"]["max_in_flight"]) for r in results] == [
        ("Offline", 24, 1), ("Offline", 24, 4)]
    assert [r["harness"]["peak_in_flight"] for r in results] == [1, 4]
    table = run.stdout[run.stdout.index("point "):].splitlines()
    assert table[0].split()[:4] == ["point", "scenario", "result", "tokens/s"]
    assert [x.split()[:4] for x in table[1:3]] == [["--concurrency", "1", "Offline", "VALID"],
                                                   ["--concurrency", "4", "Offline", "VALID"]]
    assert run.stdout.index("point ") > run.stdout.rindex("perfdag bench: echo, Offline")  # after both points' summaries


def test_no_report_measures_only_and_a_later_report_reuses_the_measurement(tokenizer_dir, tmp_path):
    """`bench --no-report`: LoadGen's run and its result.json, summarized with whose numbers they are, no
    Bench built; the same command without it builds the report from that measurement, not a new one."""
    root = tmp_path / "artifacts"
    url, proc = _echo("--token-delay-ms", "2")
    args = ("--url", url, "--model", "echo", "--tokenizer", str(tokenizer_dir), "--server", "vllm",
            "--concurrency", "2", "--request-count", "16", "--overrides", "dataset.num_samples=16,harness.warmup_queries=2")
    try:
        only = bench(root, *args, "--no-report")
        assert only.returncode == 0, only.stdout[-3000:] + only.stderr[-5000:]
        assert not (root / "Bench").exists()
        (result,) = root.glob("RunLoadgen/*/result.json")
        r = json.loads(result.read_text())
        summary = only.stdout[only.stdout.index("perfdag bench (--no-report): --concurrency 2, Offline"):]
        assert "result     VALID" in summary and f"file       {result}" in summary
        assert f"{fmt(r['samples_per_s'])} samples/s, {fmt(r['tokens_per_s'])} tokens/s (LoadGen)" in summary
        assert "report     not built (--no-report)" in summary
        full = bench(root, *args)
    finally:
        proc.terminate()
        proc.wait(10)
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-5000:]
    assert statuses(run_records(root)[-1])["RunLoadgen"] == "reused" and statuses(run_records(root)[-1])["Bench"] == "built"
    assert list(root.glob("RunLoadgen/*/result.json")) == [result]


@pytest.mark.parametrize("flags,words", [
    (("--no-report", "--repeat", "2"), "--no-report measures once"),
    (("--concurrency", "2", "--request-rate", "3"), "one loop or the other"),
    (("--concurrency", "0,4"), "--concurrency: '0,4' is not a positive number"),
    (("--request-rate", "fast"), "--request-rate: 'fast'"),
    (("--concurrency", "2", "--scenario", "Server"), "--scenario Server: --concurrency and --request-rate choose"),
    (("--request-count", "-3"), "--request-count and --duration"),
])
def test_bad_load_flags_are_refused_before_anything_runs(flags, words, tmp_path):
    root = tmp_path / "artifacts"
    run = bench(root, "--url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", str(tmp_path), *flags)
    assert run.returncode == 2 and words in run.stdout, run.stdout + run.stderr[-2000:]
    assert not root.exists()


def test_load_flags_map_onto_loadgen_settings():
    from argparse import Namespace

    from pipeline.cli.bench import load_points

    def args(**kw):
        return Namespace(**{"concurrency": "", "request_rate": "", "request_count": 0, "duration": 0.0,
                            "scenario": "", **kw})
    assert load_points(args()) == [("", [])]
    assert load_points(args(request_rate="2.5,10", duration=30)) == [
        ("--request-rate 2.5", ["loadgen.scenario=Server", "loadgen.server_target_qps=2.5", "loadgen.min_query_count=1",
                                "loadgen.min_duration_ms=30000"]),
        ("--request-rate 10", ["loadgen.scenario=Server", "loadgen.server_target_qps=10", "loadgen.min_query_count=1",
                               "loadgen.min_duration_ms=30000"])]
    assert load_points(args(concurrency="8", duration=60))[0][1] == [
        "loadgen.scenario=Offline", "harness.max_in_flight=8", "loadgen.min_query_count=1",
        "loadgen.min_duration_ms=60000", "loadgen.offline_expected_qps=auto"]
    assert load_points(args(request_count=512, duration=5)) == [
        ("", ["loadgen.min_query_count=512", "loadgen.min_duration_ms=5000", "loadgen.performance_sample_count=512"])]
