"""Run untrusted, model-generated programs, never in perfdag's own process. No luigi imports.

Each job (one or more steps, e.g. compile then run) gets one bubblewrap sandbox (what it sees and
which namespaces: view.py) whose init is `_sandbox_init.py`, the driver that runs the steps:
- a private dir (cwd, HOME, TMPDIR: /tmp) and /dev/shm, size-capped tmpfs that vanish with the job;
  /usr and the toolchains read-only; nothing else of the host mounted;
- no network (a network namespace with only its own loopback), no new user namespaces, no
  capabilities, its own PID namespace whose init (the driver) it cannot signal or ptrace;
- rlimits on CPU time, address space, file size, open files and processes (per job: counted in the
  job's own user namespace; as root the job runs under a uid leased to it alone, uids.py,
  since root is exempt from the process limit);
- one memory cap for the job's whole process tree (Limits.job_memory_bytes), which the init counts;
- a wall-clock timeout per step, after which the init kills every process in the namespace; the
  job ends with its init, which makes the kernel kill anything left. perfdag backs it up by
  SIGKILLing bwrap's session, then (as root) any process still owned by the leased uid.
Only a sandbox that cannot start a program is an error (SandboxUnavailable, which stops the
scoring); whatever a program does to its sandbox is its own result's. A step may get a verdict
channel (Step.channel): fd 3, a file read back as RunResult.verdict, and fd 4, a pipe that holds
Job.secret once, for a runner to prove its lines with (mbxp_runner.py, lcb_runner.py).

bwrap is tried once per process with /bin/true. Where the kernel refuses (no unprivileged user
namespaces, a seccomp filter, no network namespace...) `SandboxUnavailable` names the cause, unless
the caller passes `allow_network=True` (the params' accuracy.allow_code_network): then a weaker mode
runs, the first that works of: the same sandbox sharing the host's network; as root only, no
namespaces at all (the leased uid, rlimits and timeouts; the host's files and network in view).

`run_program` runs one program, `run_many` runs jobs on N worker threads, each driving its own
subprocesses. A language whose toolchain is missing gives status "not_scored", never "passed".
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.mlperf.codeexec import uids as sandbox_uids
from harness.mlperf.codeexec.outcome import TAIL, RunResult, from_report
from harness.mlperf.codeexec.view import (
    SANDBOX_PATH,
    WORKDIR,
    SandboxUnavailable,
    bwrap_argv,
    bwrap_binary,
    extra_mounts,
    find_tool,
    node_path,
    python_interpreter,
)

INIT = Path(__file__).with_name("_sandbox_init.py")
SETUP_SLACK_S = 10.0  # namespaces and mounts, before the steps' own timeouts count
ALLOW_FIELD = "accuracy.allow_code_network"
ALLOW_HINT = (f"or set {ALLOW_FIELD}: true (python -m pipeline score: --allow-code-network; in code: "
              "allow_network=True) to run it with weaker isolation")
#: Isolation levels, strongest first; all but the first only where the caller allows them.
LEVELS = ("full", "shared-net", "none")
WEAKER = {"shared-net": "the sandbox, sharing the host's network",
          "none": "no namespaces: the host's files and network in view, a leased uid and rlimits"}


@dataclass(frozen=True)
class Limits:
    cpu_s: float | None = None          # None: the step's timeout + 1 s
    memory_bytes: int = 4 << 30         # address space, per process
    job_memory_bytes: int = 4 << 30     # resident memory of all the job's processes together
    file_bytes: int = 64 << 20          # largest file the program may write
    nproc: int = 64                     # processes and threads of the job
    nofile: int = 256
    disk_bytes: int = 256 << 20         # size of the private dir, and of /dev/shm (each a tmpfs)
    inodes: int = 4096                  # files and dirs the job may create there (both together)


@dataclass(frozen=True)
class Step:
    argv: list[str]
    timeout_s: float
    ok_returncodes: tuple[int, ...] = (0,)  # e.g. tsc's 2 ("emitted with diagnostics")
    stdin: str = ""
    channel: bool = False  # fd 3: a file read back as RunResult.verdict; fd 4: a pipe holding Job.secret


@dataclass
class Job:
    steps: list[Step]
    files: dict[str, str] = field(default_factory=dict)  # written into the private dir
    tools: list[str] = field(default_factory=list)       # binaries that must exist
    language: str = ""
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)
    stdout_chars: int = TAIL                             # how much of the last step's stdout to keep
    secret: str = ""                                     # what a channel step reads from its fd 4, once


# -- toolchains ------------------------------------------------------------------------------------

def _source(file: str, *steps: list[str]) -> tuple[str, list[list[str]]]:
    return file, list(steps)


# language -> (file name, steps); the first word of each step is a tool looked up on SANDBOX_PATH
LANGUAGES: dict[str, tuple[str, list[list[str]]]] = {
    "python": _source("main.py", ["python3", "main.py"]),
    "javascript": _source("main.js", ["node", "main.js"]),
    "cpp": _source("main.cpp", ["g++", "main.cpp", "-o", "main"], ["./main"]),
    "typescript": _source("main.ts", ["tsc", "main.ts", "--target", "es5", "--lib", "es2016"],
                          ["node", "main.js"]),
    "php": _source("main.php", ["php", "main.php"]),
    "ruby": _source("main.rb", ["ruby", "main.rb"]),
    "perl": _source("main.pl", ["perl", "main.pl"]),
    "bash": _source("main.sh", ["bash", "main.sh"]),
}


def resolve_tool(word: str) -> str | None:
    """Absolute path of a step's first word; './x' (built in the private dir) stays as it is."""
    if word.startswith("./"):
        return word
    if word == "python3":
        return python_interpreter()
    return find_tool(word)


# -- isolation probe -------------------------------------------------------------------------------

_probe_lock = threading.Lock()
_probe: dict[str, str] = {}  # level -> "" (works) or why not


def _level_works(level: str) -> str:
    """'' when jobs run at `level` here, else why not (tried once per process with /bin/true)."""
    with _probe_lock:
        if level not in _probe:
            if level == "none" and os.geteuid() != 0:
                _probe[level] = "runs programs under a leased uid, which needs root"
            else:
                true = find_tool("true") or "/bin/true"
                res = _run_at(Job([Step([true], 10)], tools=[true]), level)
                _probe[level] = "" if res.status == "passed" else (res.detail or res.status)
        return _probe[level]


def capabilities() -> dict:
    """What this machine grants: the bwrap used and, per level tried, '' or why it fails."""
    why = _level_works("full")
    return {"bwrap": bwrap_binary(), "full": why == "", "why": why, "levels": dict(_probe)}


def isolation(allow_network: bool) -> str:
    """The level jobs run at: 'full', or a weaker one where allowed; else SandboxUnavailable."""
    why = _level_works("full")
    if not why:
        return "full"
    if allow_network:
        for level in LEVELS[1:]:
            if not _level_works(level):
                return level
        tried = "; ".join(f"{lv}: {_probe[lv]}" for lv in LEVELS)
        raise SandboxUnavailable(f"sandbox: no isolation level works here ({tried})")
    raise SandboxUnavailable(f"sandbox: bwrap cannot isolate generated code here ({why}); refusing to run it; "
                             "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                             f"user.max_user_namespaces > 0, no seccomp filter denying them) {ALLOW_HINT}")


# -- running ---------------------------------------------------------------------------------------

def _run_at(job: Job, level: str) -> RunResult:
    """Run the job at `level`: as root under a leased uid, else under perfdag's own."""
    if os.geteuid() != 0:
        return _launch(job, level, None)
    with sandbox_uids.uid_lease() as uid:
        return _launch(job, level, uid)


def _launch(job: Job, level: str, uid: int | None) -> RunResult:
    """Run the job's steps one after another in one sandbox and one private dir."""
    base = Path(tempfile.mkdtemp(prefix="perfdag-sandbox-"))  # 0700: perfdag's side only
    opened: list[int] = []

    def fd(path: Path, flags: int) -> int:
        opened.append(os.open(path, flags | os.O_CLOEXEC, 0o600))
        return opened[-1]

    try:
        (base / "in").mkdir(mode=0o700)
        for name, text in job.files.items():
            (base / "in" / name).write_text(text)
        for i, step in enumerate(job.steps):
            (base / f"stdin.{i}").write_text(step.stdin)
        write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        stdio = [[fd(base / f"stdin.{i}", os.O_RDONLY), fd(base / f"stdout.{i}", write),
                  fd(base / f"stderr.{i}", write)] for i in range(len(job.steps))]
        for i, step in enumerate(job.steps):
            if step.channel:
                stdio[i] += [fd(base / "verdict", write | os.O_APPEND), _secret_pipe(job.secret, opened)]
        if level == "none":
            work = base / "work"
            shutil.copytree(base / "in", work)
            if uid is not None:
                for p in (work, *work.iterdir()):
                    os.chown(p, uid, uid)
            base.chmod(0o711)  # the leased uid may pass through to its dir, not look around
            return _run_session(job, level, uid, base, str(work), stdio, {})
        files = {name: fd(base / "in" / name, os.O_RDONLY) for name in job.files}
        return _run_session(job, level, uid, base, WORKDIR, stdio, files)
    finally:
        for f in opened:
            os.close(f)
        if uid is not None:
            sandbox_uids.kill_uid(uid)
        shutil.rmtree(base, ignore_errors=True)


def _secret_pipe(secret: str, opened: list[int]) -> int:
    """The read end of a pipe that holds `secret` and nothing else (its write end already closed): read
    once, it is empty, so a program that takes it leaves its runner nothing to prove itself with."""
    r, w = os.pipe2(os.O_CLOEXEC)
    opened.append(r)
    try:
        os.write(w, (secret + "\n").encode())
    finally:
        os.close(w)
    return r


def _command(job: Job, level: str, cfg: dict, files: dict[str, int]) -> list[str]:
    if level == "none":  # the driver on the host, as root, dropping to the leased uid per program
        return [sys.executable, "-I", "-S", str(INIT), json.dumps(cfg)]
    py = python_interpreter()
    if py is None:
        raise SandboxUnavailable("sandbox: no python3 that the sandbox's uid can run for its driver; "
                                 "set PERFDAG_SANDBOX_PYTHON")
    tools = [resolve_tool(s.argv[0]) or s.argv[0] for s in job.steps] + [py]
    argv = bwrap_argv(bwrap_binary(), share_net=level == "shared-net", disk_bytes=job.limits.disk_bytes,
                      files=files, mounts=extra_mounts(tools, job.env.get("NODE_PATH", "")))
    return argv + ["--", py, "-I", "-S", "-c", INIT.read_text(), json.dumps(cfg)]


def _run_session(job: Job, level: str, uid: int | None, base: Path, work: str, stdio: list[list[int]],
                 files: dict[str, int]) -> RunResult:
    lim = job.limits
    steps = [{"argv": s.argv, "timeout_s": s.timeout_s, "ok_returncodes": list(s.ok_returncodes),
              "cpu_s": max(1, int((lim.cpu_s or s.timeout_s + 1) + 0.999))} for s in job.steps]
    env = {"PATH": SANDBOX_PATH, "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8", **job.env}
    report_r, report_w = os.pipe()
    cfg = {"workdir": work, "steps": steps, "env": env, "stdio": stdio, "report_fd": report_w,
           "uid": uid if level == "none" else None, "inode_paths": [] if level == "none" else [WORKDIR, "/dev/shm"],
           "limits": {"memory_bytes": lim.memory_bytes, "file_bytes": lim.file_bytes,
                      "nproc": lim.nproc, "nofile": lim.nofile, "inodes": lim.inodes,
                      "job_memory_bytes": lim.job_memory_bytes}}
    as_uid = {"user": uid, "group": uid, "extra_groups": []} if uid is not None and level != "none" else {}
    started = time.monotonic()
    try:
        command = _command(job, level, cfg, files)
        with open(base / "init.err", "wb") as init_err:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=init_err, pass_fds=(report_w, *sum(stdio, []), *files.values()),
                                    start_new_session=True, **as_uid)
    except OSError as exc:  # e.g. a bwrap the leased uid may not run
        os.close(report_r)
        return RunResult("error", None, "", "", time.monotonic() - started, f"cannot start the sandbox: {exc}")
    except BaseException:
        os.close(report_r)
        raise
    finally:
        os.close(report_w)
    backstop = sum(s.timeout_s for s in job.steps) + SETUP_SLACK_S
    cut_off = False
    try:
        proc.wait(timeout=backstop)
    except subprocess.TimeoutExpired:
        cut_off = True
    finally:
        if proc.returncode is None:  # not reaped yet, so the session is still ours to kill
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.monotonic() - started
    with os.fdopen(report_r, "rb") as f:
        lines = f.read().decode("utf-8", "replace").splitlines()
    res = from_report(lines, job, base, wall, proc.returncode, backstop if cut_off else None)
    if any(s.channel for s in job.steps) and (base / "verdict").exists():
        with open(base / "verdict", "rb") as f:
            res.verdict = f.read(lim.file_bytes + 1).decode("utf-8", "replace")
    return res


def missing_tools(job: Job) -> list[str]:
    return [t for t in job.tools if resolve_tool(t) is None]


def run_job(job: Job, *, allow_network: bool = False) -> RunResult:
    """Run one job in a fresh sandbox. Raises SandboxUnavailable when isolation is impossible."""
    missing = missing_tools(job)
    if missing:
        return RunResult("not_scored", None, "", "", 0.0,
                         f"{job.language or 'program'}: toolchain missing: {', '.join(missing)} "
                         f"not found on {SANDBOX_PATH} (or not executable by the sandbox's uid)")
    res = _run_at(job, isolation(allow_network))
    if res.status == "error":  # the sandbox's fault, not the program's: never score it
        raise SandboxUnavailable(f"{res.detail}\n{res.stderr}".strip())
    return res


def program_job(argv_or_source: list[str] | str, language: str | None, *, timeout_s: float,
                limits: Limits | None = None) -> Job:
    """An argv, run as is, or a source text in one of LANGUAGES."""
    limits = limits or Limits()
    if not isinstance(argv_or_source, str):
        argv = list(argv_or_source)
        argv[0] = resolve_tool(argv[0]) or argv[0]
        return Job([Step(argv, timeout_s)], tools=[argv[0]], language=language or "",
                   limits=limits)
    if language not in LANGUAGES:
        raise ValueError(f"sandbox: language {language!r} unknown; known: {sorted(LANGUAGES)}")
    file, steps = LANGUAGES[language]
    tools = [s[0] for s in steps if not s[0].startswith("./")]
    resolved = [[resolve_tool(s[0]) or s[0], *s[1:]] for s in steps]
    env = {"NODE_PATH": node_path()} if "node" in tools else {}
    return Job([Step(s, timeout_s) for s in resolved], {file: argv_or_source}, tools, language,
               limits, env)


def run_program(argv_or_source: list[str] | str, language: str | None = None, *, timeout_s: float,
                limits: Limits | None = None, allow_network: bool = False) -> RunResult:
    """Run one program (an argv, or a source text in `language`) in the sandbox."""
    job = program_job(argv_or_source, language, timeout_s=timeout_s, limits=limits)
    return run_job(job, allow_network=allow_network)


def run_many(jobs: list[Job], workers: int = 2, *, allow_network: bool = False) -> list[RunResult]:
    """Run jobs on `workers` threads, each job in its own sandbox; results in the jobs' order."""
    if workers < 1:
        raise ValueError(f"sandbox: workers must be >= 1, got {workers}")
    isolation(allow_network)  # refuse before starting anything
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda j: run_job(j, allow_network=allow_network), jobs))


def new_nonce() -> str:
    return secrets.token_hex(16)
