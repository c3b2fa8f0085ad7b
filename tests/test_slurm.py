"""Stages as Slurm jobs, against a real one-node Slurm (munge, slurmctld, slurmd, two fake GPUs)
started once for this module by scripts/slurm-local.sh. Where it cannot start (not root, apt cannot
install it, the daemons do not come up) every test that needs it skips and says why."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import FAST, REPO, copied_root, local_slurm, luigi_cmd, run_luigi, run_records

BUILD_STAGES = {"PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "PrepareDataset", "CheckAccuracy"}
SLURM = "slurm.poll_s=0.5,slurm.mem=3G"  # servers, their Python stubs and LoadGen share one allocation
# Short LoadGen runs on the FAST model: these tests are about where stages run, not the numbers.
SHORT = ",dataset.num_samples=24,loadgen.min_duration_ms=800,loadgen.min_query_count=16," \
        "loadgen.offline_expected_qps=800,accuracy.target=0.05"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """SLURM_CONF of a running one-node cluster; stopped (by pid) after the module."""
    yield from local_slurm(tmp_path_factory, "slurm")


def squeue() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[:-1]


def job_state(job_id: str, timeout: float = 30) -> str:
    """The job's final state (COMPLETING and the like are waited out)."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
        state = next((f.split("=", 1)[1] for f in out.stdout.split() if f.startswith("JobState=")), "")
        if state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def processes_for(root: Path) -> list[psutil.Process]:
    """perfdag processes working on this root: the luigi worker, jobs' stages (environment), servers."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            if str(root) in " ".join(p.info["cmdline"] or []) or p.environ().get("PERFDAG_ARTIFACTS") == str(root):
                out.append(p)
        except (psutil.Error, TypeError):
            continue
    return out


def assert_nothing_left(root: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (squeue() or processes_for(root)):
        time.sleep(0.5)
    assert not squeue(), f"jobs left in squeue: {squeue()}"
    left = [(p.pid, " ".join(p.cmdline())[:200]) for p in processes_for(root)]
    assert not left, f"processes left behind: {left}"


def jobs(root: Path, kind: str | None = None) -> list[dict]:
    """Slurm jobs the runs on `root` recorded; kind None: build jobs ('allocation', 'step', 'array task'...)."""
    return [j for run in run_records(root) for j in run.get("slurm_jobs", []) if j.get("kind") == kind]


def all_jobs(root: Path) -> list[dict]:
    return [j for run in run_records(root) for j in run.get("slurm_jobs", [])]


class Worker:
    """A luigi worker in the background, its output in a file; ended after its test whatever happened
    (stop_workers_left): a failed assertion must not leave it holding the cluster for the next test."""
    started: list[Worker] = []

    def __init__(self, root: Path, task: str, overrides: str, env: dict | None = None):
        self.root, self.out = root, root.parent / f"{task}-{time.monotonic_ns()}.out"
        root.mkdir(parents=True, exist_ok=True)
        self.before = {j.get("log") for j in all_jobs(root)}  # earlier runs' jobs on this root are not this one's
        self.proc = subprocess.Popen(luigi_cmd(task, "--overrides", overrides), cwd=REPO,
                                     env={**os.environ, "PERFDAG_ARTIFACTS": str(root), **(env or {})},
                                     stdout=open(self.out, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        Worker.started.append(self)

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_job_log(self, needle: str, timeout: float = 180) -> dict:
        """The run record's job whose log shows `needle`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for j in all_jobs(self.root):
                if j.get("log") and j["log"] not in self.before and Path(j["log"]).exists() and needle in Path(j["log"]).read_text(errors="replace"):
                    return j
            assert self.proc.poll() is None, f"worker exited early:\n{self.text()[-3000:]}"
            time.sleep(0.5)
        raise AssertionError(f"no job log showed {needle!r} in {timeout} s:\n{self.text()[-3000:]}")

    def finish(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise


@pytest.fixture(autouse=True)
def stop_workers_left():
    """SIGTERM (the worker cancels its Slurm jobs), then SIGKILL, for any worker a test left running."""
    yield
    while Worker.started:
        w = Worker.started.pop()
        if w.proc.poll() is None:
            os.killpg(w.proc.pid, signal.SIGTERM)
            try:
                w.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(w.proc.pid, signal.SIGKILL)
                w.proc.wait()


# --- a FullRun whose build stages run as Slurm jobs -----------------------------------------------

@pytest.fixture(scope="module")
def fullrun(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm_fullrun") / "artifacts"
    t0 = time.monotonic()
    proc = run_luigi("FullRun", "--overrides", f"{FAST}{SHORT},{SLURM},slurm.gpus_per_stage={{BuildEngine: 1}}",
                     artifacts=root, check=False)
    print(f"FullRun through Slurm: {time.monotonic() - t0:.1f} s")
    assert proc.returncode in (0, 10, 11, 12), f"FullRun failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
    return root, proc


def test_fullrun_builds_its_build_stages_as_slurm_jobs(fullrun):
    root, proc = fullrun
    by_stage = {j["stage"]: j for j in jobs(root)}
    assert set(by_stage) == BUILD_STAGES  # serving and measuring run in the allocation (below)
    assert all(j["state"] == "COMPLETED" for j in by_stage.values()), by_stage
    assert len({j["job_id"] for j in by_stage.values()}) == len(BUILD_STAGES)
    (run,) = run_records(root)
    for stage, j in by_stage.items():
        assert f"Slurm job {j['job_id']} submitted" in proc.stderr
        assert f"[job {j['job_id']}]" in proc.stderr  # its log was streamed
        entry = next(v for v in run["stages"].values() if v["stage"] == stage)
        assert entry["status"] == "built" and entry["key"] == j["key"]
        manifest = json.loads((root / stage / j["key"][:16] / "manifest.json").read_text())
        assert manifest["key"] == j["key"]
        assert not list((root / stage).glob(".tmp-*"))
    assert (root / "FullRun").is_dir()


def test_fullrun_serves_and_measures_in_one_allocation_that_ends_with_the_run(fullrun):
    """LaunchServers holds an allocation; RunLoadgen and RunAccuracy run as steps of it (srun --overlap);
    the servers' records name the node and the job; FullRun's end scancels it, nothing is left."""
    root, proc = fullrun
    (alloc,) = jobs(root, "allocation")
    job_id = alloc["job_id"]
    assert alloc["stage"] == "LaunchServers" and alloc["state"] == "RUNNING" and alloc["node"] == socket.gethostname()
    (servers_json,) = root.glob("LaunchServers/*/servers.json")
    records = json.loads(servers_json.read_text())["servers"]
    assert records and all(r["slurm_job"] == job_id and r["node"] == socket.gethostname() for r in records)
    steps = {j["stage"]: j for j in jobs(root, "step")}
    assert set(steps) == {"RunLoadgen", "RunAccuracy"}
    for stage, step in steps.items():
        assert step["job_id"] == f"{job_id}/{stage}" and step["state"] == "COMPLETED", step
        assert f"{stage} " in Path(step["log"]).read_text()  # the step's own output, on the node
        assert f"{stage} {step['key'][:16]}: measuring inside Slurm allocation {job_id} on " in proc.stderr
    assert f"Slurm allocation {job_id} submitted" in proc.stderr
    assert f"ended their Slurm allocation {job_id}" in proc.stderr
    assert job_state(job_id) == "CANCELLED"  # by FullRun's release, not by its time limit
    (run,) = run_records(root)
    assert {v["stage"]: v["status"] for v in run["stages"].values()}["LaunchServers"] == "built"
    assert not list((root / ".servers").glob("*/procs/*.json"))
    assert not list((root / ".servers").glob("*/slurm.json"))
    assert_nothing_left(root)


def test_a_gpu_request_reaches_the_job_environment(fullrun):
    root, _ = fullrun
    logs = {j["stage"]: Path(j["log"]).read_text() for j in jobs(root)}
    assert "CUDA_VISIBLE_DEVICES=0\n" in logs["BuildEngine"]  # slurm.gpus_per_stage: {BuildEngine: 1}
    assert "CUDA_VISIBLE_DEVICES=unset" in logs["PrepareModel"]  # no GPU asked for, none given


def test_a_searchs_probes_are_steps_of_one_serving_allocation(fullrun, tmp_path):
    """Under Slurm a search's servers hold one allocation and every probe measures inside it, as a
    step; the allocation ends with the search."""
    search = ("loadgen.scenario=Server,search.slo=ttft_p99_ms<=2000,search.start=10,search.tolerance=0.5,"
              "search.max_probes=3,search.repeats=1,search.confirm=false,search.probe_min_duration_ms=800,"
              "search.probe_min_query_count=16")
    with copied_root(fullrun[0], tmp_path / "root") as root:
        proc = subprocess.run([sys.executable, "-m", "pipeline", "search", "--overrides",
                               f"{FAST}{SHORT},{SLURM},slurm.gpus_per_stage={{BuildEngine: 1}},{search}"],
                              cwd=REPO, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode in (0, 10), proc.stdout[-3000:] + proc.stderr[-3000:]
        (alloc,) = jobs(root, "allocation")
        probes = json.loads(next(root.glob("FindMaxLoad/*/search.json")).read_text())["probes"]
        steps = jobs(root, "step")
        assert len(probes) >= 2 and len(steps) == len(probes), proc.stderr[-6000:]
        assert {s["job_id"] for s in steps} == {f"{alloc['job_id']}/RunLoadgen"}
        assert {s["key"] for s in steps} == {p["key"] for p in probes}  # each probe, measured in it
        assert proc.stderr.count(f"Slurm allocation {alloc['job_id']} submitted") == 1
        assert job_state(alloc["job_id"]) == "CANCELLED"  # by the search's release
        assert_nothing_left(root)


def test_where_a_stage_ran_does_not_change_its_key(fullrun):
    """Asked without a slurm section, the engine built by a job is reused: its key, which chains
    PrepareModel's and Quantize's, is the same wherever they ran."""
    root, _ = fullrun
    run_luigi("BuildEngine", "--overrides", f"{FAST}{SHORT}", artifacts=root)
    last = run_records(root)[-1]
    assert {v["stage"]: v["status"] for v in last["stages"].values()} == {"BuildEngine": "reused"}
    assert "slurm_jobs" not in last


def test_a_4_point_sweep_runs_as_a_throttled_job_array_building_each_shared_stage_once(cluster, tmp_path):
    """Points differ only in LoadGen settings: one array task per point, at most 2 at once; across the
    tasks' runs every build stage is built once and reused by the others; four measurements."""
    root = tmp_path / "artifacts"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: slurm_points\nbase: {REPO / 'params' / 'default.yaml'}\n"
                     f"overrides: \"{FAST}{SHORT},{SLURM},slurm.max_parallel=2\"\n"
                     "grid:\n  loadgen.min_duration_ms: [600, 800]\n  loadgen.offline_expected_qps: [150, 200]\n")
    t0 = time.monotonic()
    proc = run_luigi("Sweep", "--sweep", str(sweep), artifacts=root, check=False)
    print(f"4-point Sweep as a Slurm job array: {time.monotonic() - t0:.1f} s")
    assert proc.returncode in (0, 10, 11, 12), f"Sweep failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
    (script,) = root.glob("runs/*/slurm/Sweep-*.sbatch")
    assert "#SBATCH --array=0-3%2\n" in script.read_text()
    tasks = jobs(root, "array task")
    array_id = tasks[0]["job_id"].split("_")[0]
    assert sorted(t["job_id"] for t in tasks) == [f"{array_id}_{i}" for i in range(4)]
    assert all(t["exit_code"] in ("0", "10", "11", "12") for t in tasks), tasks
    assert f"job array {array_id} (--array=0-3%2)" in proc.stderr
    for i in range(4):
        assert f"job {array_id}_{i} RUNNING" in proc.stderr and f"[point {i + 1}] perfdag" in proc.stderr
    assert not jobs(root)  # inside a task the point runs on its node: no nested jobs
    runs = run_records(root)
    assert len(runs) == 5  # the worker's (the Sweep) and one per point
    statuses = [(v["stage"], v["status"]) for run in runs for v in run["stages"].values()]
    for stage in BUILD_STAGES - {"CheckAccuracy"}:  # CheckAccuracy: one per distinct accuracy run
        assert statuses.count((stage, "built")) == 1, (stage, statuses)
    assert statuses.count(("RunLoadgen", "built")) == 4 and statuses.count(("FullRun", "built")) == 4
    assert statuses.count(("CheckAccuracy", "built")) == 1 and statuses.count(("RunAccuracy", "built")) == 1
    assert len(json.loads(next(root.glob("Sweep/*/sweep.json")).read_text())["rows"]) == 4
    assert_nothing_left(root)


# --- failures: scancel, the worker's SIGTERM, memory, a refused submission ---------------------------

def test_scancel_mid_stage_fails_clearly_publishes_nothing_and_a_rerun_resubmits(cluster, tmp_path):
    root = tmp_path / "artifacts"
    held = Worker(root, "PrepareModel", f"{FAST},{SLURM}", env={"PERFDAG_FAULT_SLEEP": "PrepareModel:300"})
    job = held.wait_job_log("fault hook: holding")  # built, not yet published
    subprocess.run(["scancel", job["job_id"]], check=True, timeout=30)
    rc = held.finish()
    out = held.text()
    assert rc != 0
    assert f"Slurm job {job['job_id']} on " in out and "was cancelled" in out and job["log"] in out, out[-3000:]
    assert not list(root.glob("PrepareModel/*/manifest.json"))  # nothing half-published
    assert_nothing_left(root)

    # The rerun belongs to a run that has already noted an INVALID result (as a Submission's second
    # FullRun would): that is the run's exit code, never the exit code of a job that built.
    run_id = "20261125T000000000000Z-1"
    (root / "runs" / run_id).mkdir(parents=True)
    (root / "runs" / run_id / "run.json").write_text(json.dumps(
        {"run_id": run_id, "stages": {}, "verdicts": {"FullRun_earlier": {"valid": False}}}))
    proc = run_luigi("PrepareModel", "--overrides", f"{FAST},{SLURM}", artifacts=root, check=False,
                     env={"PERFDAG_RUN_ID": run_id})
    assert proc.returncode == 10, proc.stderr[-3000:]
    again = jobs(root)[-1]
    assert again["job_id"] != job["job_id"] and again["state"] == "COMPLETED", again
    assert len(list(root.glob("PrepareModel/*/manifest.json"))) == 1
    assert not list(root.glob("PrepareModel/.tmp-*"))  # the killed build's temp dir was cleared
    assert_nothing_left(root)


def test_scancel_of_the_allocation_mid_measurement_names_the_job_and_a_rerun_succeeds(fullrun):
    """On the FullRun's root (builds reused): a new measurement held before publishing; scancel of its
    allocation fails it naming the job, leaves nothing; the rerun gets a new allocation and measures."""
    root, _ = fullrun
    # A RunLoadgen not measured yet; fewer samples (see README: tritonserver's crash under load in a 1-CPU allocation)
    overrides = f"{FAST}{SHORT},{SLURM},loadgen.min_query_count=17,loadgen.offline_expected_qps=200"
    held = Worker(root, "RunLoadgen", overrides, env={"PERFDAG_FAULT_SLEEP": "RunLoadgen:300"})
    step = held.wait_job_log("fault hook: holding")
    job_id = step["job_id"].split("/")[0]
    assert step["kind"] == "step" and step["stage"] == "RunLoadgen"
    subprocess.run(["scancel", job_id], check=True, timeout=30)
    rc = held.finish()
    out = held.text()
    assert rc != 0
    assert f"measuring in the servers' allocation failed: Slurm job {job_id} on " in out, out[-3000:]
    assert "was cancelled" in out and step["log"] in out
    assert not list(root.glob(f"RunLoadgen/{step['key'][:16]}/manifest.json"))
    assert_nothing_left(root)

    proc = run_luigi("RunLoadgen", "--overrides", overrides, artifacts=root, check=False)
    assert proc.returncode in (0, 10), proc.stderr[-3000:]
    again = jobs(root, "allocation")[-1]
    assert again["job_id"] != job_id and job_state(again["job_id"]) == "CANCELLED"
    assert (root / "RunLoadgen" / step["key"][:16] / "manifest.json").is_file()
    assert_nothing_left(root)


def test_a_server_crash_mid_measurement_is_relaunched_in_a_new_allocation(fullrun):
    """tritonserver killed while a step measures it: the step cannot relaunch it (what it starts dies
    with the step), so the worker ends that allocation, relaunches the servers in a new one and
    measures again; nothing is left holding the node (a stale allocation would starve later jobs)."""
    root, _ = fullrun
    overrides = f"{FAST}{SHORT},{SLURM},loadgen.min_query_count=19,loadgen.min_duration_ms=4000"
    held = Worker(root, "RunLoadgen", overrides)
    step = held.wait_job_log("RunLoadgen ")  # the step is building: LoadGen is starting or running
    job_id = step["job_id"].split("/")[0]
    killed = []
    for f in root.glob("LaunchServers/*/servers.json"):
        for rec in json.loads(f.read_text())["servers"]:
            if str(rec.get("slurm_job")) == job_id:
                os.kill(rec["pid"], signal.SIGKILL)
                killed.append(rec["pid"])
    assert killed, "no server recorded in the step's allocation"
    rc = held.finish()
    out = held.text()
    assert rc in (0, 10), out[-3000:]
    assert f"the servers in Slurm allocation {job_id} stopped answering mid-measurement" in out, out[-3000:]
    assert job_state(job_id) == "CANCELLED"
    again = jobs(root, "allocation")[-1]
    assert again["job_id"] != job_id and job_state(again["job_id"]) == "CANCELLED"  # ended with the run
    assert (root / "RunLoadgen" / step["key"][:16] / "manifest.json").is_file()
    relaunched = [r for r in run_records(root) if r.get("server_relaunches")]
    assert relaunched, run_records(root)
    # the record names the allocation, then each server that went, as seen from inside it
    named = relaunched[-1]["server_relaunches"][0]["servers"]
    assert named[0] == job_id and [s.split(" (pid ")[0] for s in named[1:]] == ["server 0"], named
    assert all(s.endswith(" is gone") or " crashed (" in s for s in named[1:]), named
    assert_nothing_left(root)


def test_sigterm_of_the_worker_mid_measurement_cancels_the_allocation(fullrun):
    root, _ = fullrun
    held = Worker(root, "RunLoadgen", f"{FAST}{SHORT},{SLURM},loadgen.min_query_count=18,loadgen.offline_expected_qps=200",
                  env={"PERFDAG_FAULT_SLEEP": "RunLoadgen:300"})
    step = held.wait_job_log("fault hook: holding")
    job_id = step["job_id"].split("/")[0]
    held.proc.send_signal(signal.SIGTERM)
    assert held.finish(60) == 130
    assert job_state(job_id) == "CANCELLED"
    assert_nothing_left(root)


def test_sigterm_of_the_worker_cancels_its_job(cluster, tmp_path):
    root = tmp_path / "artifacts"
    held = Worker(root, "PrepareModel", f"{FAST},{SLURM}", env={"PERFDAG_FAULT_SLEEP": "PrepareModel:300"})
    job = held.wait_job_log("perfdag: job ")  # running
    held.proc.send_signal(signal.SIGTERM)
    assert held.finish(60) == 130
    assert f"cancelled Slurm job {job['job_id']}" in held.text()
    assert job_state(job["job_id"]) == "CANCELLED"
    assert not list(root.glob("PrepareModel/*/manifest.json"))
    assert_nothing_left(root)


def test_a_job_over_its_memory_limit_is_a_clear_error(cluster, tmp_path):
    root = tmp_path / "artifacts"
    proc = run_luigi("PrepareModel", "--overrides", f"{FAST},{SLURM},slurm.mem=64M", artifacts=root, check=False)
    (job,) = jobs(root)
    assert proc.returncode != 0
    assert f"Slurm job {job['job_id']} on " in proc.stderr and "ran out of memory" in proc.stderr, proc.stderr[-3000:]
    assert "raise slurm.mem" in proc.stderr and job["log"] in proc.stderr
    assert job["state"] == "FAILED" and "OUT_OF_MEMORY" in job_state(job["job_id"])
    assert not list(root.glob("PrepareModel/*/manifest.json"))
    assert_nothing_left(root)


def test_a_refused_submission_names_sbatch_and_the_fix(cluster, tmp_path):
    root = tmp_path / "artifacts"
    proc = run_luigi("PrepareModel", "--overrides", f"{FAST},{SLURM},slurm.partition=nosuchpartition",
                     artifacts=root, check=False)
    assert proc.returncode != 0
    assert "sbatch refused perfdag-PrepareModel-" in proc.stderr and "invalid partition" in proc.stderr.lower()
    assert "check the slurm section" in proc.stderr


# --- the job script, rendered (no cluster needed) ---------------------------------------------------

def test_the_job_script_carries_every_setting_and_the_container():
    from harness.slurm import Container, JobSpec, render_script

    spec = JobSpec(name="perfdag-BuildEngine-0123", log=Path("/shared/runs/r/slurm/BuildEngine-%j.log"),
                   command=["python3", "-c", "print('hi there')"], workdir=Path("/src/perfdag"),
                   env={"PERFDAG_ARTIFACTS": "/shared/perfdag"}, partition="gpu", account="mlperf", gpus=8,
                   cpus=16, mem="64G", time_limit="120", extra_args=("--exclusive",),
                   container=Container(image="nvcr.io#nvidia/tritonserver:25.01-trtllm-python-py3",
                                       mounts=("/shared:/shared", "/src/perfdag:/src/perfdag"), workdir="/src/perfdag"),
                   array="0-7%3")
    text = render_script(spec)
    for opt in ("--partition=gpu", "--account=mlperf", "--gpus=8", "--cpus-per-task=16", "--mem=64G",
                "--time=120", "--array=0-7%3", "--exclusive", "--output=/shared/runs/r/slurm/BuildEngine-%j.log"):
        assert f"#SBATCH {opt}\n" in text
    assert "export PERFDAG_ARTIFACTS=/shared/perfdag\n" in text
    assert ("exec srun --ntasks=1 '--container-image=nvcr.io#nvidia/tritonserver:25.01-trtllm-python-py3' "
            "--container-mounts=/shared:/shared,/src/perfdag:/src/perfdag --container-workdir=/src/perfdag "
            "python3 -c 'print('\"'\"'hi there'\"'\"')'\n") in text
    from harness.slurm import srun_argv

    assert srun_argv("41", ["python3", "-c", "x"], name="perfdag-RunLoadgen-ab") == [
        "srun", "--jobid=41", "--overlap", "--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1",
        "--job-name=perfdag-RunLoadgen-ab", "python3", "-c", "x"]
    bare = render_script(JobSpec(name="x", log=Path("/a root/l"), command=["python3"], workdir=Path("/w")))
    assert "srun" not in bare and "--gpus" not in bare and "--partition" not in bare
    assert '#SBATCH --output="/a root/l"\n' in bare  # sbatch's own quoting, not the shell's


def test_each_way_a_job_ends_is_a_stage_error_naming_job_log_and_fix():
    """States this cluster cannot produce on demand (node failure, time limit) read like the ones it can."""
    from harness.slurm import ended_error

    log = Path("/shared/runs/r/slurm/BuildEngine-abc-7.log")
    assert ended_error("7", "COMPLETED", {}, log) is None
    cases = {"NODE_FAIL": "lost its node (node failure)", "TIMEOUT": "hit its time limit",
             "FAILED": "failed (exit code 1)", "CANCELLED+": "was cancelled", "PREEMPTED": "was preempted",
             "BOOT_FAIL": "could not boot its node", "WEIRD": "ended in state WEIRD"}
    for state, what in cases.items():
        text = ended_error("7", state, {"ExitCode": "1:0", "NodeList": "gpu07", "Reason": "None"}, log)
        assert text.startswith(f"Slurm job 7 on gpu07 {what}") and f"log: {log}" in text, text
    assert "raise slurm.time_limit_min" in ended_error("7", "TIMEOUT", {}, log)
    assert "signal 9" in ended_error("7", "FAILED", {"ExitCode": "0:9"}, log)


def test_an_array_task_runs_the_fullrun_the_worker_computed(tmp_path):
    """A Nightly's sweep: the date enters measuring keys, so the task's command line carries it."""
    from pipeline import FullRun
    from pipeline.sweep_array import _cli_args

    point = FullRun(params_file="params/default.yaml", overrides=f"{FAST},{SLURM}", nightly_date="2026-11-25",
                    as_point=True, point_label="1/4 base")
    args = _cli_args(point)
    assert args[args.index("--nightly-date") + 1] == "2026-11-25"
    assert args[args.index("--params-file") + 1] == str(REPO / "params" / "default.yaml")
    assert "--as-point" not in args and "--point-label" not in args  # not in any key
    again = FullRun(**{a[2:].replace("-", "_"): v for a, v in zip(args[::2], args[1::2])})
    assert again.key == point.key


def test_an_array_task_of_a_no_accuracy_sweep_runs_a_performance_run(tmp_path):
    """`Sweep --no-accuracy`: the array task's command names the point's own task, not FullRun, so it runs
    no accuracy run and computes the key the worker computed."""
    from pipeline import PerformanceRun, Sweep
    from pipeline.sweep_array import _cli_args

    sweep = Sweep(params_file="params/default.yaml", grid="harness.max_in_flight=1,2", overrides=f"{FAST},{SLURM}",
                  no_accuracy=True)
    points = list(sweep.upstream().values())
    assert {p.get_task_family() for p in points} == {"PerformanceRun"}
    args = _cli_args(points[0])
    again = PerformanceRun(**{a[2:].replace("-", "_"): v for a, v in zip(args[::2], args[1::2])})
    assert again.key == points[0].key and "CheckAccuracy" not in again.stage_keys()


def test_params_refuse_what_slurm_would_misread():
    from harness.backends import resolve
    from harness.config import ParamsError

    with pytest.raises(ParamsError) as e:
        resolve(REPO / "params" / "default.yaml",
                "slurm.mem=2GB,slurm.stages=[LaunchServers],slurm.gpus_per_stage={RunLoadgen: 1}")
    text = str(e.value)
    assert "slurm.mem" in text and "slurm.stages" in text and "gpus_per_stage names ['RunLoadgen']" in text
    assert resolve(REPO / "params" / "default.yaml", "").slurm is None  # unset: nothing runs on Slurm


# --- last: the module leaves nothing -----------------------------------------------------------------

def test_the_clusters_daemons_do_not_inherit_perfdags_variables(cluster):
    """scripts/slurm-local.sh starts munged, slurmctld and slurmd without the PERFDAG_* variables of
    whoever started it (this module starts it with PERFDAG_SLURM_PORT set)."""
    pids = [int(f.read_text()) for f in (Path(cluster).parent.parent / "run").glob("*.pid")]
    assert len(pids) == 3, pids
    for pid in pids:
        assert not [k for k in psutil.Process(pid).environ() if k.startswith("PERFDAG_")], pid


def test_zz_squeue_is_empty_and_no_perfdag_process_is_left(cluster, tmp_path_factory):
    """No job is left, and no process of this module's runs: a perfdag process carries this cluster's
    SLURM_CONF and an artifacts root under this session's temporary directory. The cluster's own
    daemons are not perfdag's, also for a user who exports PERFDAG_ARTIFACTS."""
    assert squeue() == []
    base = str(tmp_path_factory.getbasetemp()) + os.sep
    daemons = {int(f.read_text()) for f in (Path(cluster).parent.parent / "run").glob("*.pid")}
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if p.pid not in daemons | {os.getpid()} and env.get("SLURM_CONF") == cluster \
                and env.get("PERFDAG_ARTIFACTS", "").startswith(base):
            left.append((p.pid, " ".join(p.info["cmdline"] or [])[:200]))
    assert not left, left
