"""Run untrusted, model-generated programs, never in perfdag's own process. No luigi imports.

Each job (one or more steps, e.g. compile then run) gets one session of `_sandbox_init.py`
(run as root in a new session):
- a private directory (cwd, HOME, TMPDIR): a size-capped tmpfs that vanishes with the job's own
  mount namespace, where every other mount is read-only; the job runs under an unprivileged
  uid/gid leased to it alone (so a write outside its directory fails twice over: EROFS, EACCES);
- no network: its own network namespace (only a downed loopback); where the kernel refuses one,
  `SandboxUnavailable` unless the caller passes `allow_network=True`;
- rlimits on CPU time, address space, file size, open files and processes. RLIMIT_NPROC is not
  enforced for root, hence the unprivileged uid, leased per job so that one job's fork bomb
  cannot starve another job; on top, a PID namespace whose init exits when the program does,
  which makes the kernel kill everything the program left behind;
- a wall-clock timeout per step, after which the namespace's init kills every process in it;
  perfdag backs it up by SIGKILLing the session, then any process still owned by the leased uid
  (the fallback where no PID namespace exists).

Not root: where the kernel grants unprivileged user namespaces, the job keeps perfdag's uid
inside a user namespace of its own (its execve as a non-root uid drops the namespace's
capabilities, so it cannot undo the read-only mounts; RLIMIT_NPROC holds for a non-root uid);
otherwise `SandboxUnavailable`.

`run_program` runs one program, `run_many` runs jobs on N worker threads, each driving its own
subprocesses. A language whose toolchain is missing gives status "not_scored", never "passed".
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

INIT = Path(__file__).with_name("_sandbox_init.py")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
TAIL = 4000  # characters of stdout/stderr kept per result
UID_BASE = int(os.environ.get("PERFDAG_SANDBOX_UID_BASE", "1500000000"))
UID_SLOTS = 4096
SETUP_SLACK_S = 10.0  # namespaces and mounts, before the steps' own timeouts count
# the integrator may name its params knob here
ALLOW_NETWORK_HINT = ("to run generated code with the host's network anyway, pass "
                      "allow_network=True")


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot give the isolation asked for on this machine."""


@dataclass(frozen=True)
class Limits:
    cpu_s: float | None = None          # None: the step's timeout + 1 s
    memory_bytes: int = 4 << 30         # address space
    file_bytes: int = 64 << 20          # largest file the program may write
    nproc: int = 64                     # processes and threads of the job's uid
    nofile: int = 256
    disk_bytes: int = 256 << 20         # size of the private dir (a tmpfs)


@dataclass(frozen=True)
class Step:
    argv: list[str]
    timeout_s: float
    ok_returncodes: tuple[int, ...] = (0,)  # e.g. tsc's 2 ("emitted with diagnostics")
    stdin: str = ""


@dataclass
class Job:
    steps: list[Step]
    files: dict[str, str] = field(default_factory=dict)  # written into the private dir
    tools: list[str] = field(default_factory=list)       # binaries that must exist
    language: str = ""
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class RunResult:
    status: str  # passed | failed | timeout | killed | not_scored (| error: sandbox setup)
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    detail: str = ""
    step: int = 0  # index of the last step run


# -- toolchains ------------------------------------------------------------------------------------

def world_executable(path: str) -> bool:
    """True when an unprivileged uid can run `path` (every directory on the way searchable)."""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


def find_tool(name: str) -> str | None:
    """The tool as the sandboxed uid will find it on SANDBOX_PATH, or None."""
    found = shutil.which(name, path=SANDBOX_PATH)
    return found if found and world_executable(found) else None


def python_interpreter() -> str | None:
    """perfdag's interpreter when the sandboxed uid can run it, else the system's python3."""
    chosen = os.environ.get("PERFDAG_SANDBOX_PYTHON")
    if chosen:
        return chosen if world_executable(chosen) else None
    return sys.executable if world_executable(sys.executable) else find_tool("python3")


def node_path() -> str:
    """Where node looks for modules (MBXP's JavaScript tests need lodash)."""
    dirs = os.environ.get("PERFDAG_SANDBOX_NODE_PATH", "").split(":")
    dirs += ["/usr/local/lib/node_modules", "/usr/lib/node_modules"]
    return ":".join(d for d in dirs if d and os.path.isdir(d))


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


# -- isolation probe and uid leases ----------------------------------------------------------------

_probe_lock = threading.Lock()
_probe: dict | None = None


def capabilities() -> dict:
    """Which namespaces this machine grants, tried once per process with /bin/true."""
    global _probe
    with _probe_lock:
        if _probe is None:
            root = os.geteuid() == 0
            _probe = {"root": root, "user": not root, "why": ""}
            for flag in ("net", "mount", "pid"):
                flags = {"net": False, "mount": False, "pid": False, "user": not root, flag: True}
                res = _launch(Job([Step(["/bin/true"], 10)]), flags, None)
                _probe[flag] = res.status == "passed"
                if not _probe[flag]:
                    _probe["why"] += f"{flag} namespace: {res.detail}; "
        return _probe


def _isolation(allow_network: bool) -> dict:
    caps = capabilities()
    if not caps["root"] and not (caps["pid"] and caps["mount"]):
        # without root there is no uid to drop to: a user namespace must do the isolating
        raise SandboxUnavailable(f"sandbox: not root and no unprivileged user namespaces here "
                                 f"({caps['why']}); run perfdag as root")
    if not caps["net"] and not allow_network:
        raise SandboxUnavailable(f"sandbox: no network namespace on this machine ({caps['why']}); "
                                 f"refusing to run generated code with network access; "
                                 f"{ALLOW_NETWORK_HINT}")
    return {"net": caps["net"], "mount": caps["mount"], "pid": caps["pid"], "user": caps["user"]}


def _state_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "perfdag-sandbox-uids"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def _uid_in_use(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True  # a real account: never borrow it
    except KeyError:
        return bool(processes_of_uid(uid))


@contextlib.contextmanager
def uid_lease():
    """A uid (used as gid too) that no other job, here or in another perfdag, holds meanwhile."""
    state = _state_dir()
    for slot in range(UID_SLOTS):
        uid = UID_BASE + slot
        fd = os.open(state / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if _uid_in_use(uid):
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            kill_uid(uid)
            os.close(fd)
        return
    raise SandboxUnavailable(f"sandbox: all {UID_SLOTS} uids from {UID_BASE} are in use; set "
                             f"PERFDAG_SANDBOX_UID_BASE to a free range")


def processes_of_uid(uid: int) -> list[int]:
    """Pids whose real, effective or saved uid is `uid`."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if str(uid) in line.split()[1:4]:
                            pids.append(int(entry.name))
                        break
        except OSError:
            pass
    return pids


def kill_uid(uid: int, patience_s: float = 5.0) -> None:
    """SIGKILL every process of `uid` until none is left."""
    deadline = time.monotonic() + patience_s
    while pids := processes_of_uid(uid):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"sandbox: processes of uid {uid} survive SIGKILL: {pids}")
        time.sleep(0.02)


# -- running ---------------------------------------------------------------------------------------

def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - TAIL))
        return f.read().decode("utf-8", "replace")


def _launch(job: Job, flags: dict, uid: int | None) -> RunResult:
    """Run the job's steps one after another in one sandbox session and one private dir."""
    base = Path(tempfile.mkdtemp(prefix="perfdag-sandbox-"))
    try:
        base.chmod(0o711)  # the job's uid may pass through to its dir, not look around
        (base / "in").mkdir(mode=0o700)
        for name, text in job.files.items():
            (base / "in" / name).write_text(text)
        work = base / "work"
        work.mkdir(mode=0o700)
        if uid is not None:
            os.chown(work, uid, uid)
        for i, step in enumerate(job.steps):
            (base / f"stdin.{i}").write_text(step.stdin)
        return _run_session(job, flags, uid, base, work)
    finally:
        if uid is not None:
            kill_uid(uid)
        shutil.rmtree(base, ignore_errors=True)


def _run_session(job: Job, flags: dict, uid: int | None, base: Path, work: Path) -> RunResult:
    lim = job.limits
    steps = [{"argv": s.argv, "timeout_s": s.timeout_s, "ok_returncodes": list(s.ok_returncodes),
              "cpu_s": max(1, int((lim.cpu_s or s.timeout_s + 1) + 0.999))} for s in job.steps]
    env = {"PATH": SANDBOX_PATH, "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8",
           **job.env}
    report_r, report_w = os.pipe()
    cfg = {"base": str(base), "workdir": str(work), "steps": steps, "env": env, "uid": uid,
           "flags": flags, "report_fd": report_w, "parent_pid": os.getpid(),
           "limits": {"memory_bytes": lim.memory_bytes, "file_bytes": lim.file_bytes,
                      "nproc": lim.nproc, "nofile": lim.nofile, "disk_bytes": lim.disk_bytes}}
    started = time.monotonic()
    with open(base / "init.err", "wb") as init_err:
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(INIT), json.dumps(cfg)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=init_err, pass_fds=(report_w,), start_new_session=True)
    os.close(report_w)
    backstop = sum(s.timeout_s for s in job.steps) + SETUP_SLACK_S
    try:
        proc.wait(timeout=backstop)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.returncode is None:  # not reaped yet, so the session is still ours to kill
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.monotonic() - started
    with os.fdopen(report_r, "rb") as f:
        lines = f.read().decode("utf-8", "replace").splitlines()
    return _result(lines, job, base, wall)


def _result(lines: list[str], job: Job, base: Path, wall: float) -> RunResult:
    setup = [ln[len("setup-error "):] for ln in lines if ln.startswith("setup-error ")]
    if setup:
        return RunResult("error", None, "", _tail(base / "init.err"), wall,
                         f"sandbox setup: {setup[0]}")
    steps = [ln.split() for ln in lines if ln.startswith(("exit ", "timeout "))]
    if not steps:
        return RunResult("timeout", None, "", _tail(base / "init.err"), wall,
                         "sandbox session killed before its first step ended")
    kind, index = steps[-1][0], int(steps[-1][1])
    step = job.steps[index]
    out, err = _tail(base / f"stdout.{index}"), _tail(base / f"stderr.{index}")
    if kind == "timeout":
        return RunResult("timeout", None, out, err, wall,
                         f"wall-clock timeout after {step.timeout_s:g} s: killed", index)
    rc = int(steps[-1][2])
    if rc in step.ok_returncodes:
        if index == len(job.steps) - 1:
            return RunResult("passed", rc, out, err, wall, "", index)
        return RunResult("timeout", rc, out, err, wall, "sandbox session killed between steps",
                         index)
    if rc < 0:
        return RunResult("killed", rc, out, err, wall, f"killed by {signal.Signals(-rc).name}",
                         index)
    return RunResult("failed", rc, out, err, wall, f"exit status {rc}", index)


def missing_tools(job: Job) -> list[str]:
    return [t for t in job.tools if resolve_tool(t) is None]


def run_job(job: Job, *, allow_network: bool = False) -> RunResult:
    """Run one job in a fresh sandbox. Raises SandboxUnavailable when isolation is impossible."""
    missing = missing_tools(job)
    if missing:
        return RunResult("not_scored", None, "", "", 0.0,
                         f"{job.language or 'program'}: toolchain missing: {', '.join(missing)} "
                         f"not found on {SANDBOX_PATH} (or not executable by other users)")
    flags = _isolation(allow_network)
    if flags["user"]:  # not root: the job keeps perfdag's uid, inside its own user namespace
        res = _launch(job, flags, None)
    else:
        with uid_lease() as uid:
            res = _launch(job, flags, uid)
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
    _isolation(allow_network)  # refuse before starting anything
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda j: run_job(j, allow_network=allow_network), jobs))


def new_nonce() -> str:
    return secrets.token_hex(16)
