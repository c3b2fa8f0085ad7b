"""Processes perfdag starts: spawn with a log, recognise them later, stop them and their group.

A process is perfdag's own when it carries the random token `spawn` put in its environment
(PERFDAG_LAUNCH_TOKEN, read back from /proc/<pid>/environ) and has the recorded pid and start
time: a record read back from the root may name any pid, so the record alone proves nothing, and
a process whose environment cannot be read is not ours. It belongs to the artifacts root whose
identity (`root_id`: the root directory's device and inode, which no other directory has) `spawn`
put beside the token (PERFDAG_ROOT_ID): a record copied from another root's world-readable
servers.json names that root's token, and its process is not this root's to stop. Helpers a
server starts (backend stubs, MPI ranks) inherit both, so what is left of a dead server is found
by them too. Servers run
in their own session (they outlive the launching run and are shared across runs); helpers that
must not outlive their parent get PR_SET_PDEATHSIG.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from harness.errors import ServingError


class ServerError(ServingError):
    """A server failed to start, is not ready, or died; the message carries its log's error lines."""


TOKEN_ENV = "PERFDAG_LAUNCH_TOKEN"
TOKEN = re.compile(r"[0-9a-f]{32}")  # secrets.token_hex(16): what a record's token must look like
ROOT_ENV = "PERFDAG_ROOT_ID"  # the artifacts root a server was launched from (root_id)


def root_id(root: str | os.PathLike) -> str:
    """The identity of an artifacts root: its real path and its directory's inode, which no other
    directory has (a copy, or another root, has another; a link to the root leads to the same). Not
    the device: a shared root mounted on several nodes has one device number per node. A root moved
    elsewhere is another root for servers launched before the move (stop those by pid)."""
    real = os.path.realpath(root)
    digest = hashlib.sha256(f"{real}\0{os.stat(real).st_ino}".encode("utf-8", "surrogateescape")).hexdigest()
    return digest[:32]


@dataclass
class Process:
    """A child we spawned, with the log its output goes to (from byte `log_offset` on)."""

    proc: subprocess.Popen
    argv: list[str]
    log_path: Path
    log_offset: int = 0
    env: dict[str, str] = field(default_factory=dict)  # what was set on top of the inherited environment
    token: str = ""  # TOKEN_ENV in its environment: how it is known as ours later

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def diagnostics(self, n: int = 40) -> str:
        return log_diagnostics(self.log_path, n, offset=self.log_offset)


def spawn(argv: Sequence[str], log_path: str | os.PathLike, *, env: Mapping[str, str] | None = None,
          env_overlay: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
          new_session: bool = True, die_with_parent: bool = False, shown: str | None = None,
          root: str | None = None) -> Process:
    """Starts `argv` with stdout+stderr appended to `log_path` (the command line goes first, as
    `shown` when given: e.g. with machine paths replaced by names).

    `env` replaces the inherited environment, `env_overlay` is set on top. `new_session` makes it
    a process-group leader, so stopping its group stops its helpers (stubs, MPI ranks) too. Its
    environment gets a fresh token (TOKEN_ENV) and, with `root` (a root_id), the root it serves
    (ROOT_ENV); its children inherit both.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    overlay = dict(env_overlay or {})
    token = secrets.token_hex(16)
    full_env = {**(dict(os.environ) if env is None else dict(env)), **overlay, TOKEN_ENV: token}
    full_env.pop(ROOT_ENV, None)  # never inherited: a server is the root's that launched it, or no root's
    if root is not None:
        full_env[ROOT_ENV] = root
    argv = [str(a) for a in argv]
    with open(log_path, "ab", buffering=0) as log:
        offset = log.tell()
        if shown is None:
            shown = " ".join([f"{k}={v}" for k, v in overlay.items()] + argv)
        log.write(("$ " + shown + "\n").encode())
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=full_env, cwd=None if cwd is None else str(cwd),
                                    start_new_session=new_session,
                                    preexec_fn=pdeathsig_preexec() if die_with_parent else None)
        except OSError as exc:
            raise ServerError(f"cannot start {argv[0]}: {exc}") from None
    return Process(proc=proc, argv=argv, log_path=log_path, log_offset=offset, env=overlay, token=token)


def pdeathsig_preexec(sig: int = signal.SIGTERM):
    """A preexec_fn asking the kernel to send `sig` when the spawning thread dies (Linux; else None)."""
    setter = pdeathsig_setter(sig)
    if setter is None:
        return None
    parent = os.getpid()

    def preexec() -> None:  # runs between fork and exec: no imports, no locks
        setter()
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def pdeathsig_setter(sig: int = signal.SIGTERM):
    """A function that sets PR_SET_PDEATHSIG for the calling process, or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, int(sig), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG


def start_time(pid: int) -> float | None:
    """The process' start time (seconds since the epoch), None when it is gone."""
    import psutil

    try:  # no such pid: one signal-0 probe says so (psutil's lookup costs ~20x that, and gc asks per record)
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except (OSError, ValueError, OverflowError):
        pass  # alive but another user's (EPERM), or a pid the kernel cannot take: psutil decides, as before
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p.create_time()
    except (psutil.Error, ValueError, OverflowError):
        return None


def is_same_process(pid: int | None, create_time: float | None) -> bool:
    """`pid` still is the process that started at `create_time` (not a recycled pid). Anything but
    a positive int and a number (what a forged record may hold) is no process."""
    if type(pid) is not int or pid <= 0 or type(create_time) not in (int, float):
        return False
    started = start_time(pid)
    return started is not None and abs(started - float(create_time)) < 1.0


def labels(pid: int) -> tuple[str | None, str | None]:
    """(launch token, root id) in the process' environment; (None, None) when it cannot be read."""
    import psutil

    try:
        env = psutil.Process(pid).environ()
    except (psutil.Error, OSError, ValueError):
        return None, None
    return env.get(TOKEN_ENV), env.get(ROOT_ENV)


def carries_token(pid: int, token: str | None, root: str | None) -> bool:
    """The process' environment holds TOKEN_ENV=`token` and ROOT_ENV=`root` (False when it cannot be
    read, or either differs: not ours, or another root's)."""
    if not isinstance(token, str) or not TOKEN.fullmatch(token) or not isinstance(root, str) or not root:
        return False
    return labels(pid) == (token, root)


def is_own_process(pid: int | None, create_time: float | None, token: str | None, root: str | None) -> bool:
    """`pid` is the process perfdag spawned with `token` at `create_time`, launched from the root `root`
    (a root_id): safe to signal."""
    return is_same_process(pid, create_time) and carries_token(pid, token, root)


def processes_with_token(token: str | None, root: str | None = None) -> list[int]:
    """Live processes whose environment holds TOKEN_ENV=`token` (a dead server's stubs) and, given a
    `root` (a root_id), ROOT_ENV=`root`; this one excepted. What stops processes always names the root."""
    import psutil

    if not isinstance(token, str) or not TOKEN.fullmatch(token):
        return []
    out = []
    for p in psutil.process_iter(["environ"]):
        env = p.info.get("environ") or {}
        if p.pid != os.getpid() and env.get(TOKEN_ENV) == token and (root is None or env.get(ROOT_ENV) == root):
            out.append(p.pid)
    return out


def terminate(pid: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> int | None:
    """SIGTERM the process (its whole group when it leads one), SIGKILL after `timeout`, and make sure
    nothing of the group is left. Returns the exit code when we could reap it."""
    def alive() -> bool:
        if proc is not None:
            return proc.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        with contextlib.suppress(ChildProcessError, OSError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        try:  # a zombie someone else has yet to reap is dead for our purposes
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return True

    def group_alive() -> bool:
        try:
            os.killpg(pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def signal_group(sig: int) -> None:
        # A session leader's group holds only it and its helpers; never signal anything else.
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
                return
        except (ProcessLookupError, PermissionError):
            pass
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    if alive():
        signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive():
            signal_group(signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    # Helpers (backend stubs) outlive a killed leader briefly; reap the rest of the group (no
    # longer than the caller's grace: an interrupted run must end within seconds).
    if group_alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            deadline = time.monotonic() + min(5.0, timeout)
            while group_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if group_alive():
                os.killpg(pid, signal.SIGKILL)
    return proc.returncode if proc is not None else None


# --- logs ------------------------------------------------------------------------------------

def _read_log(path: str | os.PathLike, offset: int = 0, max_bytes: int | None = None) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        start = offset if max_bytes is None else max(offset, size - max_bytes)
        f.seek(min(start, size))
        return f.read().decode("utf-8", "replace")


def log_tail(path: str | os.PathLike, n: int = 40, offset: int = 0) -> str:
    """The last `n` lines of the log (from byte `offset` on)."""
    try:
        data = _read_log(path, offset, 256 * 1024)
    except OSError as exc:
        return f"<no log: {exc}>"
    return "\n".join(data.splitlines()[-n:])


# Harmless on a CPU-only host; not worth repeating in error reports.
_NOISE = ("CudaDriverHelper", "pinned memory", "CUDA driver", "cuda_memory_manager", "GPU metrics")


def log_errors(path: str | os.PathLike, n: int = 20, offset: int = 0) -> list[str]:
    """The log's error lines (glog `E...`, `ERROR`, `error:`, failed loads, tracebacks), CPU noise dropped.

    Triton prints its model/backend tables after the failure, so the failure itself is usually
    not among the last lines."""
    try:
        text = _read_log(path, offset, 8 * 1024 * 1024)
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        s = line.lstrip()
        if (s.startswith("E") and s[1:5].isdigit()) or "ERROR" in s or s.startswith("error:") \
                or "failed to load" in s or "Traceback" in s:
            if not any(x in s for x in _NOISE):
                out.append(line)
    return out[-n:]


def log_diagnostics(path: str | os.PathLike, n: int = 40, offset: int = 0) -> str:
    """Error lines of the log followed by its last `n` lines, for exception messages."""
    errors = log_errors(path, offset=offset)
    head = ("error lines:\n" + "\n".join(errors) + "\n") if errors else ""
    return f"{head}last log lines ({path}):\n{log_tail(path, n, offset=offset)}"
