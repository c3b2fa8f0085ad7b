"""Shared fixtures: isolated artifacts roots and a real `luigi` command line in a subprocess."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
# A tiny model trained for a handful of steps: these tests are about the DAG, not accuracy.
FAST = "model.tiny.train_steps=20,quantize.calib_size=4"


# Each xdist worker's processes (luigi, tritonserver's torch) get their share of the CPUs: torch
# sizes its OpenMP pool from all of them, and two workers' pools spinning against each other made
# training a stand-in take 515 s instead of 48.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    from harness.cpus import available_cpus
    os.environ["OMP_NUM_THREADS"] = str(max(1, available_cpus() // _WORKERS))

# Each xdist worker leases sandbox uids from a range of its own (tests/sandbox_leftovers.py), so one
# worker's check that its sandboxes left nothing never sees the other's, and sandboxed modules need
# not share a worker. Set before any test starts a sandbox; luigi subprocesses inherit it.
if os.environ.get("PYTEST_XDIST_WORKER") and "PERFDAG_SANDBOX_UID_BASE" not in os.environ:
    from sandbox_leftovers import worker_uid_base
    os.environ["PERFDAG_SANDBOX_UID_BASE"] = str(worker_uid_base(os.environ["PYTEST_XDIST_WORKER"]))

# pytest-xdist (addopts: -n 2): each worker runs whole modules, one after another, so a module's
# and the session's built roots are built once per worker, not once per test. Modules of
# independent minutes-long tests are split into one group per test.
PER_TEST = {"test_standins_fullrun"}
# The groups that take minutes, started first so that no worker is left with one at the end.
LONGEST_FIRST = ["test_multinode_slurm", "test_adv_serving", "test_search", "test_standins_fullrun", "test_whisper_fullrun",
                 "test_site",
                 "test_frontier", "test_faults", "test_slurm", "test_singlestream", "test_concurrency_sweep", "test_fullrun",
                 "test_operate", "test_openai_fullrun", "test_submission", "test_trust_artifacts",
                 # minutes too (test_sessions has the suite's longest test), though they were left to start in name order
                 "test_sessions", "test_qwen3_vl_standin", "test_observations", "test_adv_results", "test_interrupt"]


def group_of(nodeid: str) -> str:
    """The xdist group of a test: its module's name, or the test itself in PER_TEST's modules."""
    stem = Path(nodeid.split("::", 1)[0]).stem
    return nodeid if stem in PER_TEST else stem


# The fast lane (`pytest -m "not slow"`, README's Tests): every test here is marked `slow`, the one
# place that says which. Whole modules whose tests start luigi runs, LoadGen runs, tritonserver, `transformers serve`, routers,
# Slurm or training (most take 15 s to minutes on 2 cores), and any test anywhere that uses a root
# built by luigi (its first user pays minutes for the build). CI runs everything (.ci/run).
SLOW_MODULES = set(LONGEST_FIRST) | {
    "test_adv_peers", "test_adv_records", "test_adv_results", "test_adv_verify", "test_bench_url", "test_chat_core",
    "test_offline_auto", "test_real_routers", "test_synthetic", "test_code_keys", "test_compare", "test_dag_run",
    "test_failed_runs", "test_frontier", "test_gc", "test_interrupt", "test_invalidation", "test_loadgen_sut",
    "test_multinode_slurm", "test_observations", "test_progress", "test_qwen3_vl_standin", "test_search", "test_serve_stages",
    "test_serving", "test_sessions", "test_shared_across_nodes", "test_status_diff", "test_status_why",
    "test_triton_generate", "test_trtllm_golden", "test_trust_inputs", "test_url_flows", "test_whisper_fullrun"}
SLOW_FIXTURES = {"built_fast", "built_default"}


# The whole suite's size never drops unnoticed: a module that fails to import, a test renamed into a
# skip or a lost parametrization. Lower SUITE_FLOOR only in the commit that removes tests on purpose.
SUITE_FLOOR = int((REPO / "tests" / "suite_floor.txt").read_text().split()[0])


def whole_suite(config) -> bool:
    """A run of every test: no paths but tests/, no -m, -k, --deselect or last-failed selection."""
    paths = {Path(a.split("::")[0]).resolve() for a in config.args}
    return (paths <= {REPO / "tests"} and not config.option.markexpr and not config.option.keyword
            and not config.getoption("deselect", None) and not config.getoption("lf", False))


def pytest_collection_modifyitems(config, items):
    if whole_suite(config) and len(items) < SUITE_FLOOR:
        pytest.exit(f"the whole suite collected {len(items)} tests, fewer than the {SUITE_FLOOR} of "
                    "tests/suite_floor.txt: a module failed to import or tests were lost", returncode=1)
    for item in items:
        if Path(item.nodeid.split("::", 1)[0]).stem in SLOW_MODULES or SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
    rank = {g: i for i, g in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(item.nodeid.split("::", 1)[0]).stem, len(rank)))  # stable: modules stay whole


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        """xdist's loadscope (in collection order), with the scope being the group above."""
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # keep LONGEST_FIRST, not xdist's order by test count
    return ByGroup(config, log)


def luigi_cmd(task: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "luigi", "--module", "pipeline", task, "--local-scheduler", *args]


def run_luigi(task: str, *args: str, artifacts: Path, env: dict | None = None, check: bool = True,
              timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PERFDAG_ARTIFACTS": str(artifacts), **(env or {})}
    proc = subprocess.run(luigi_cmd(task, *args), cwd=REPO, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"luigi {task} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def run_records(artifacts: Path) -> list[dict]:
    """Every run.json under the root, oldest first."""
    files = sorted((artifacts / "runs").glob("*/run.json"), key=lambda f: f.stat().st_mtime)
    return [json.loads(f.read_text()) for f in files]


def statuses(run: dict) -> dict[str, str]:
    return {v["stage"]: v["status"] for v in run["stages"].values()}


@pytest.fixture(autouse=True, scope="session")
def _default_root(tmp_path_factory):
    """A test that forgets to name its root writes into this session's, never the repository's
    artifacts/ (a task's key hashes an outside checkpoint into <root>/.hashcache)."""
    if "PERFDAG_ARTIFACTS" in os.environ:
        yield
        return
    os.environ["PERFDAG_ARTIFACTS"] = str(tmp_path_factory.mktemp("default_root") / "artifacts")
    yield
    os.environ.pop("PERFDAG_ARTIFACTS", None)


@pytest.fixture(autouse=True)
def _no_run_id_across_tests():
    """A test that runs a stage in-process makes this process a run (PERFDAG_RUN_ID, in os.environ so
    luigi's workers share it); the next test's subprocesses would inherit it and write into that run's
    record. Each test starts and ends without one."""
    os.environ.pop("PERFDAG_RUN_ID", None)
    yield
    os.environ.pop("PERFDAG_RUN_ID", None)


@pytest.fixture
def artifacts(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "artifacts"
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    for var in ("TRTLLM_CHECKPOINT_FLAGS", "TRTLLM_BUILD_FLAGS", "TRTLLM_RUNTIME_FLAGS"):
        monkeypatch.delenv(var, raising=False)
    return root


def shared_built_root(tmp_path_factory, name: str, *luigi_args: str, datasets: tuple[str, ...] = ()) -> Path:
    """An artifacts root holding `BuildEngine <luigi_args>`, and `PrepareDataset <luigi_args>` with each
    of `datasets`' overrides appended, built once for the whole test session: the xdist workers share it
    (the first builds it under a lock, the others wait and use it). Tests copy it before changing
    anything, or only read it."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's directory, above each worker's own
    root, done = base / name, base / f"{name}.built"
    with FileLock(str(base / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker that failed half-way
            run_luigi("BuildEngine", *luigi_args, artifacts=root)
            for extra in datasets:
                run_luigi("PrepareDataset", *luigi_args[:-1], f"{luigi_args[-1]},{extra}", artifacts=root)
            done.touch()
    return root


# The FAST model's datasets that many tests' runs read (their short settings: 24 samples in test_slurm's
# and the fault tests', 64 in SHORT's and the search's, 16 in the frontier's). Each is the unquantized
# model's greedy references, a process importing torch and transformers: one of them was built 32
# times over in one suite, 18 s each on a loaded host. Prepared once here, a copied root reuses them.
FAST_DATASETS = tuple(f"dataset.num_samples={n}" for n in (16, 24, 64))


@pytest.fixture(scope="session")
def built_fast(tmp_path_factory) -> Path:
    """An artifacts root holding PrepareModel -> Quantize -> BuildEngine for FAST, and FAST_DATASETS, built once."""
    return shared_built_root(tmp_path_factory, "built_fast", "--overrides", FAST, datasets=FAST_DATASETS)


# The default (trained) model with short LoadGen runs: accuracy is meaningful, durations small.
SHORT = "loadgen.min_duration_ms=2000,loadgen.min_query_count=32,dataset.num_samples=64"


@pytest.fixture(scope="session")
def built_default(tmp_path_factory) -> Path:
    """An artifacts root holding the default model's PrepareModel -> BuildEngine, built once."""
    return shared_built_root(tmp_path_factory, "built_default")


@pytest.fixture
def gpu_overrides(tmp_path) -> str:
    """Overrides that let the GPU examples validate here: a checkpoint and a dataset that exist."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (tmp_path / "data.pkl").write_bytes(b"")
    return f"model.checkpoint={tmp_path / 'ckpt'},dataset.path={tmp_path / 'data.pkl'}"


def launched_from(root, word: str) -> list[int]:
    """pids of processes perfdag launched from this artifacts root (their environment names it: servers
    run from their private directory, so their command lines name that, not the root) whose command
    line holds `word`."""
    from harness.serving.processes import ROOT_ENV, root_id

    try:
        rid = root_id(root)
    except OSError:  # no such root (any more)
        return []
    return [p.pid for p in psutil.process_iter(["environ", "cmdline"])
            if (p.info.get("environ") or {}).get(ROOT_ENV) == rid and word in " ".join(p.info.get("cmdline") or [])]


def tritonservers_under(root) -> list[int]:
    """pids of tritonserver processes launched from this artifacts root, or whose command line points
    into it. A child of one of them is left out: between fork and exec, a Python-backend stub still
    carries its tritonserver's command line (a loaded host stretches that window enough to be seen)."""
    out = subprocess.run(["pgrep", "-f", f"tritonserver.*{root}"], capture_output=True, text=True)
    pids = sorted({int(p) for p in out.stdout.split()} | set(launched_from(root, "tritonserver")))
    return [p for p in pids if _ppid(p) not in pids]


def _ppid(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:  # gone since pgrep saw it
        return None


def openai_servers_under(root) -> list[int]:
    """pids of OpenAI-compatible servers (`transformers serve`, ...) launched from this root, or whose
    command line points into it."""
    out = subprocess.run(["pgrep", "-f", f"serve .*{root}"], capture_output=True, text=True)
    return sorted({int(p) for p in out.stdout.split()} | set(launched_from(root, "serve ")))


@contextlib.contextmanager
def copied_root(built: Path, dest: Path):
    """A copy of a session-built artifacts root (its run history left out); afterwards any
    tritonserver under it is killed, whatever the test did (passed or failed)."""
    shutil.copytree(built, dest, ignore=shutil.ignore_patterns("runs"))
    try:
        yield dest
    finally:  # a failed assertion too: a test that keeps its servers must not leave them running
        for pid in tritonservers_under(dest):
            os.kill(pid, signal.SIGKILL)


def republish(artifact_dir: Path) -> None:
    """Rewrites an artifact's manifest as if it had been published as it is now: for tests that need
    a broken artifact perfdag trusts (a bad engine that was built that way, not tampered with)."""
    from harness.cache import integrity

    m = json.loads((artifact_dir / "manifest.json").read_text())
    m["files"], m["links"] = integrity.describe(artifact_dir, skip=m.get("volatile", ()))
    m["content_digest"] = integrity.content_digest(m["files"], m["links"])
    (artifact_dir / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True))


def signing_key_env(folder: Path) -> dict:
    """The environment of a holder of a fresh signing key, kept in `folder` (mode 0600)."""
    key = folder / "signing.key"
    key.write_text(hashlib.sha256(os.urandom(32)).hexdigest())
    key.chmod(0o600)
    return {"PERFDAG_SIGNING_KEY_FILE": str(key)}


@pytest.fixture
def key_env(tmp_path) -> dict:
    return signing_key_env(tmp_path)


def sign_all(root: Path, env: dict) -> None:
    """Signs a root's manifests as a key holder would have published them."""
    from harness.cache import signing

    key = signing.load_key(env["PERFDAG_SIGNING_KEY_FILE"])
    for f in root.glob("*/*/manifest.json"):
        m = json.loads(f.read_text())
        m["signature"] = signing.signature(m, key)
        f.write_text(json.dumps(m, indent=2, sort_keys=True))


@contextlib.contextmanager
def echo_tritonserver(root: Path, **parameters: str):
    """A real CPU tritonserver serving the echo model (harness/serving/testing/echo_model.py) as `echo`,
    decoupled, with these model parameters (token_delay_ms, max_batch, ...); yields 'host:port'."""
    from harness.backends.torch.repo import render_torch_model_config
    from harness.serving import ports
    from harness.serving.triton import cpu_server, server
    from harness.serving.triton.pbtxt import write_model_repo

    echo_py = REPO / "harness" / "serving" / "testing" / "echo_model.py"
    cfg = render_torch_model_config("echo", decoupled=True, max_batch_size=64, engine_dir="unused",
                                    extra_parameters=parameters)
    repo = write_model_repo(root / "repo", {"echo": cfg}, echo_py.read_text())
    grpc, http, metrics = ports.free_ports(3)
    h = cpu_server.start_tritonserver(repo, root / "server.log", grpc_port=grpc, http_port=http,
                                     metrics_port=metrics, backend_dir=server.prepare_backend_dir(root / "backends"))
    try:
        cpu_server.wait_ready(h, timeout_s=120)
        yield f"127.0.0.1:{grpc}"
    finally:
        cpu_server.stop_server(h, timeout=20)


SLURM_LOCAL = REPO / "scripts" / "slurm-local.sh"


def _free_ports(n: int) -> int:
    """A first port with the next n-1 free too (slurmctld, then one slurmd per node)."""
    for _ in range(50):
        socks = [socket.socket() for _ in range(n)]
        try:
            socks[0].bind(("127.0.0.1", 0))
            port = socks[0].getsockname()[1]
            for k, s in enumerate(socks[1:], 1):
                s.bind(("127.0.0.1", port + k))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1")


def local_slurm(tmp_path_factory, name: str, nodes: int = 1):
    """A fixture body: SLURM_CONF of a running local cluster of `nodes` slurmd (scripts/slurm-local.sh),
    stopped (by pid) afterwards. A start that fails is retried once, in a fresh directory on fresh
    ports (a daemon that exits at once, a port taken between choosing and binding it). Where it still
    cannot start, the tests skip and say why, unless PERFDAG_REQUIRE_SLURM=1 (CI, which has root and
    apt): there a Slurm module that skipped would pass without testing anything, so it fails."""
    if os.geteuid() != 0:
        pytest.skip("Slurm tests need root: slurmd runs the jobs and sets up their cgroups")
    failures = []
    for _attempt in range(2):
        d = tmp_path_factory.mktemp(name)
        env = {**os.environ, "PERFDAG_SLURM_PORT": str(_free_ports(nodes + 1)), "PERFDAG_SLURM_NODES": str(nodes)}
        t0 = time.monotonic()
        try:
            out = subprocess.run(["bash", str(SLURM_LOCAL), "start", str(d)], env=env, capture_output=True,
                                 text=True, timeout=600)
        except subprocess.TimeoutExpired:
            out = None
        if out is not None and out.returncode == 0:
            break
        subprocess.run(["bash", str(SLURM_LOCAL), "stop", str(d)], env=env, capture_output=True, timeout=120)
        failures.append(f"{d}: " + ("timed out" if out is None else (out.stderr.strip() or out.stdout.strip())[-500:]))
        print(f"slurm-local: start failed: {failures[-1]}")
    else:
        why = f"a local {nodes}-node Slurm could not be started: " + " | then: ".join(failures)
        if os.environ.get("PERFDAG_REQUIRE_SLURM") == "1":
            pytest.fail(why + " (PERFDAG_REQUIRE_SLURM=1)", pytrace=False)
        pytest.skip(why)
    print(f"slurm-local: {nodes} node(s) up in {time.monotonic() - t0:.1f} s" + (" (second try)" if failures else ""))
    conf = str(d / "etc" / "slurm.conf")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf  # run_luigi passes os.environ on; a worker's sbatch finds it
    yield conf
    subprocess.run(["bash", str(SLURM_LOCAL), "stop", str(d)], env=env, capture_output=True, timeout=120)
    if old is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = old
