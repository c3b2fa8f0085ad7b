"""The sandbox's launcher: a standalone stdlib script, run as root in a fresh session.

Never imported by perfdag; `sandbox.py` starts it as `python -I -S _sandbox_init.py CONFIG_JSON`.

    stage 0  unshare(net, mount, pid, ipc, uts); fork
    pid 1    (of the new PID namespace) make every mount read-only except the private dir,
             mount a fresh /proc, fork the program, reap until the program exits, report its
             status and exit; the kernel then kills whatever the program left in the namespace
    program  rlimits, an unprivileged uid/gid, no_new_privs, cwd = the private dir, execve

Setup failures and the program's exit status go to the report fd as one line each:
`setup-error <message>` or `exit <returncode>` (negative: killed by that signal).
"""
import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
# per-mount options to keep when a mount is remounted read-only
KEEP = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
        "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
LIMITS = {"cpu_s": resource.RLIMIT_CPU, "memory_bytes": resource.RLIMIT_AS,
          "file_bytes": resource.RLIMIT_FSIZE, "nproc": resource.RLIMIT_NPROC,
          "nofile": resource.RLIMIT_NOFILE}

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                       ctypes.c_void_p]


def report(cfg, line):
    os.write(cfg["report_fd"], (line.replace("\n", " ") + "\n").encode())


def fail(cfg, message):
    report(cfg, "setup-error " + message)
    os._exit(125)


def check(cfg, rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        fail(cfg, f"{what} failed: {os.strerror(err)} (errno {err})")


def mount(cfg, src, target, fstype, flags):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    check(cfg, libc.mount(enc(src), enc(target), enc(fstype), flags, None), f"mount {target}")


def mount_points():
    """(mount point, flags to keep) of every mount, from /proc/self/mountinfo."""
    for line in open("/proc/self/mountinfo").read().splitlines():
        fields = line.split()
        # mountinfo escapes blanks and backslashes as octal
        point = fields[4].encode().decode("unicode_escape").encode("latin-1").decode()
        keep = 0
        for opt in fields[5].split(","):
            keep |= KEEP.get(opt, 0)
        yield point, keep


def read_only_except(cfg, workdir):
    """Everything read-only in this mount namespace, except the private dir."""
    mount(cfg, None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates back to the host
    mount(cfg, workdir, workdir, None, MS_BIND)  # its own mount, so it stays writable
    for point, keep in mount_points():
        if point == workdir:
            continue
        rc = libc.mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
                        | keep, None)
        # a mount hidden under another one is unreachable anyway
        if rc != 0 and os.path.ismount(point):
            check(cfg, rc, f"read-only remount of {point}")
    mount(cfg, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this namespace's pids


def start_program(cfg):
    """The program's process: limits, unprivileged ids, then execve. Never returns."""
    try:
        for name, value in cfg["limits"].items():
            if value is not None:
                hard = value + 1 if name == "cpu_s" else value  # SIGXCPU first, SIGKILL 1 s later
                resource.setrlimit(LIMITS[name], (int(value), int(hard)))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(cfg["workdir"])
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries give nothing back
        os.umask(0o077)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU):
            signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE/SIGXFSZ; the program must not
        os.execvpe(cfg["argv"][0], cfg["argv"], cfg["env"])
    except OSError as exc:
        os.write(2, f"sandbox: cannot start {cfg['argv'][0]}: {exc}\n".encode())
    os._exit(127)


def pid1(cfg):
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if cfg["flags"]["mount"]:
        read_only_except(cfg, cfg["workdir"])
    child = os.fork()
    if child == 0:
        os.close(cfg["report_fd"])
        start_program(cfg)
    while True:  # as init, reap orphans too until the program itself is gone
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    report(cfg, f"exit {os.waitstatus_to_exitcode(status)}")
    os._exit(0)


def main():
    cfg = json.loads(sys.argv[1])
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # perfdag gone: so are we
    if os.getppid() != cfg["parent_pid"]:
        os._exit(125)
    flags = CLONE_NEWUTS | CLONE_NEWIPC
    flags |= CLONE_NEWNET if cfg["flags"]["net"] else 0
    flags |= CLONE_NEWNS if cfg["flags"]["mount"] else 0
    flags |= CLONE_NEWPID if cfg["flags"]["pid"] else 0
    check(cfg, libc.unshare(flags), f"unshare({flags:#x})")
    pid = os.fork()
    if pid == 0:
        pid1(cfg)
    _, status = os.waitpid(pid, 0)
    os._exit(0 if os.waitstatus_to_exitcode(status) == 0 else 125)


if __name__ == "__main__":
    main()
