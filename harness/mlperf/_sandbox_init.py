"""The sandbox's launcher: a standalone stdlib script, run as root in a fresh session.

Never imported by perfdag; `sandbox.py` starts it as `python -I -S _sandbox_init.py CONFIG_JSON`.

    stage 0  unshare(net, mount, pid, ipc, uts); fork
    pid 1    (of the new PID namespace) make every mount read-only, mount a size-capped tmpfs
             owned by the job's uid as the private dir and copy the job's files into it, mount a
             fresh /proc; then for each step: fork the program, wait for it up to the step's
             timeout, SIGKILL everything else in the namespace (kill(-1) from pid 1), report
    program  rlimits, an unprivileged uid/gid, no_new_privs, cwd = the private dir, execve

Report lines, on the report fd: `setup-error <message>`, `exit <step> <returncode>` (negative:
killed by that signal) and `timeout <step>`. When pid 1 exits the kernel kills whatever is left.
"""
import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWUSER = 0x20000000, 0x40000000, 0x10000000
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
    """Every mount read-only in this mount namespace; the private dir is mounted afterwards."""
    mount(cfg, None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates back to the host
    for point, keep in mount_points():
        rc = libc.mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
                        | keep, None)
        # a mount hidden under another one is unreachable anyway
        if rc != 0 and os.path.ismount(point):
            check(cfg, rc, f"read-only remount of {point}")
    if cfg["flags"]["pid"]:
        mount(cfg, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this ns's pids


def start_program(cfg, step, index):
    """The program's process: stdio, limits, unprivileged ids, then execve. Never returns."""
    try:
        for fd, opened in enumerate(cfg["stdio"][index]):
            os.dup2(opened, fd)
        limits = {**cfg["limits"], "cpu_s": step["cpu_s"]}
        for name, value in limits.items():
            if value is not None and name in LIMITS:
                hard = value + 1 if name == "cpu_s" else value  # SIGXCPU first, SIGKILL 1 s later
                resource.setrlimit(LIMITS[name], (int(value), int(hard)))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(cfg["workdir"])
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])  # the leased uid is its gid too
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries give nothing back
        os.umask(0o077)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU):
            signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE/SIGXFSZ; the program must not
        os.set_inheritable(cfg["report_fd"], False)  # closed by execve, open until then
        os.execvpe(step["argv"][0], step["argv"], cfg["env"])
    except BaseException as exc:  # the sandbox's failure, not the program's
        report(cfg, f"setup-error cannot start {step['argv'][0]}: {exc!r}")
    os._exit(127)


def private_dir(cfg):
    """The private dir: a tmpfs of the job's uid where a mount namespace allows, with its files."""
    work, uid = cfg["workdir"], cfg["uid"]
    if cfg["flags"]["mount"]:
        owner = f",uid={uid},gid={uid}" if uid is not None else ""
        opts = f"size={cfg['limits']['disk_bytes']},nr_inodes=4096,mode=0700{owner}"
        check(cfg, libc.mount(b"tmpfs", work.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                              opts.encode()), f"tmpfs on {work}")
    for name in os.listdir(f"{cfg['base']}/in"):
        with open(f"{cfg['base']}/in/{name}", "rb") as src, open(f"{work}/{name}", "wb") as dst:
            dst.write(src.read())
        if uid is not None:
            os.chown(f"{work}/{name}", uid, uid)


class Expired(Exception):
    pass


def on_alarm(signum, frame):
    raise Expired


def run_step(cfg, step, index):
    """Run one step; True when it exited with an accepted status."""
    child = os.fork()
    if child == 0:
        start_program(cfg, step, index)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, step["timeout_s"])
    try:
        while True:  # as init, reap orphans too until the program itself is gone
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                break
    except Expired:
        os.kill(child, signal.SIGKILL)  # enough where there is no PID namespace to empty
        kill_all_but_me()
        report(cfg, f"timeout {index}")
        return False
    signal.setitimer(signal.ITIMER_REAL, 0)
    kill_all_but_me()  # nothing a step started outlives it
    code = os.waitstatus_to_exitcode(status)
    report(cfg, f"exit {index} {code}")
    return code in step["ok_returncodes"]


def kill_all_but_me():
    """From a PID namespace's init, kill(-1) reaches every other process in it."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break


def open_stdio(cfg):
    """Each step's stdin/stdout/stderr, opened on the host's mounts (a file open for writing in
    the new mount namespace would make its read-only remount fail with EBUSY)."""
    flags = (os.O_RDONLY, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    return [[os.open(f"{cfg['base']}/{name}.{i}", flag, 0o600)
             for name, flag in zip(("stdin", "stdout", "stderr"), flags)]
            for i in range(len(cfg["steps"]))]


def pid1(cfg):
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if cfg["flags"]["mount"]:
        read_only_except(cfg, cfg["workdir"])
    private_dir(cfg)
    for index, step in enumerate(cfg["steps"]):
        if not run_step(cfg, step, index):
            break
    os._exit(0)


def main():
    cfg = json.loads(sys.argv[1])
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # perfdag gone: so are we
    if os.getppid() != cfg["parent_pid"]:
        os._exit(125)
    cfg["stdio"] = open_stdio(cfg)
    flags = CLONE_NEWUTS | CLONE_NEWIPC
    flags |= CLONE_NEWNET if cfg["flags"]["net"] else 0
    flags |= CLONE_NEWNS if cfg["flags"]["mount"] else 0
    flags |= CLONE_NEWPID if cfg["flags"]["pid"] else 0
    if cfg["flags"].get("user"):
        flags |= CLONE_NEWUSER
        uid, gid = os.getuid(), os.getgid()
    check(cfg, libc.unshare(flags), f"unshare({flags:#x})")
    if flags & CLONE_NEWUSER:
        # the same uid inside: stage 0 and pid 1 hold the namespace's capabilities (they never
        # exec), the program's execve as a non-root uid drops them, so it cannot undo the mounts
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    pid = os.fork()
    if pid == 0:
        pid1(cfg)
    _, status = os.waitpid(pid, 0)
    os._exit(0 if os.waitstatus_to_exitcode(status) == 0 else 125)


if __name__ == "__main__":
    main()
