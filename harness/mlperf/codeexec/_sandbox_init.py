"""The sandbox's driver: a standalone stdlib script that runs a job's steps. Never imported by perfdag.

`sandbox.py` starts it as `python -I -S -c <this file's text> CONFIG_JSON`, inside bwrap as the PID
namespace's init (`--as-pid-1`): bwrap has built the namespaces and the file system by then. Where
the user allowed the weaker mode without namespaces it runs on the host instead (as root, dropping
to the job's leased uid for each program).

    driver   non-dumpable (the program, same uid, can neither ptrace it nor read its memory) and,
             as init, immune to the signals the program may send it; for each step: fork the
             program, wait up to the step's timeout, then kill every other process (kill(-1) from
             init), report
    program  its own stdin/stdout/stderr and no other fd, rlimits, the leased uid (weaker mode),
             no_new_privs, cwd = the private dir, execve

Report lines, on the report fd: `setup-error <message>`, `exit <step> <returncode>` (negative:
killed by that signal), `timeout <step>` and `limit <step> inodes` (too many files in the private
/tmp and /dev/shm, which bwrap cannot cap: the driver counts them every 50 ms). When init exits the kernel kills whatever is left.
"""
import ctypes
import json
import os
import resource
import signal
import sys
import time

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
TICK_S = 0.05  # how often the wall clock and the private dirs' file counts are looked at
LIMITS = {"cpu_s": resource.RLIMIT_CPU, "memory_bytes": resource.RLIMIT_AS,
          "file_bytes": resource.RLIMIT_FSIZE, "nproc": resource.RLIMIT_NPROC,
          "nofile": resource.RLIMIT_NOFILE}

libc = ctypes.CDLL(None, use_errno=True)


def report(cfg, line):
    os.write(cfg["report_fd"], (line.replace("\n", " ") + "\n").encode())


def start_program(cfg, step, index):
    """The program's process: stdio, no other fd, limits, ids, then execve. Never returns."""
    try:
        for fd, opened in enumerate(cfg["stdio"][index]):
            os.dup2(opened, fd)
        report_fd = cfg["report_fd"]  # the other steps' files stay the driver's
        os.closerange(3, report_fd)
        os.closerange(report_fd + 1, 1 << 16)
        limits = {**cfg["limits"], "cpu_s": step["cpu_s"]}
        for name, value in limits.items():
            if value is not None and name in LIMITS:
                hard = value + 1 if name == "cpu_s" else value  # SIGXCPU first, SIGKILL 1 s later
                resource.setrlimit(LIMITS[name], (int(value), int(hard)))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(cfg["workdir"])
        if cfg["uid"] is not None:  # the weaker mode, started as root
            os.setgroups([])
            os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])  # the leased uid is its gid too
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries give nothing back
        os.umask(0o077)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU):
            signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE/SIGXFSZ; the program must not
        os.set_inheritable(report_fd, False)  # closed by execve, open until then
        os.execvpe(step["argv"][0], step["argv"], cfg["env"])
    except BaseException as exc:  # the sandbox's failure, not the program's
        report(cfg, f"setup-error cannot start {step['argv'][0]}: {exc!r}")
    os._exit(127)


class Expired(Exception):
    pass


def files_in(paths):
    """Inodes in use on the private tmpfs: bwrap cannot cap their number (no nr_inodes), the driver does."""
    used = 0
    for p in paths:
        st = os.statvfs(p)
        used += st.f_files - st.f_ffree
    return used


def run_step(cfg, step, index):
    """Run one step; True when it exited with an accepted status."""
    child = os.fork()
    if child == 0:
        start_program(cfg, step, index)
    deadline = time.monotonic() + step["timeout_s"]
    state = {"running": True, "why": "timeout"}
    paths, allowed = cfg["inode_paths"], cfg["limits"]["inodes"] + files_in(cfg["inode_paths"])

    def on_tick(signum, frame):
        if not state["running"]:
            return
        if time.monotonic() >= deadline:
            raise Expired
        if paths and files_in(paths) > allowed:
            state["why"] = "inodes"
            raise Expired

    signal.signal(signal.SIGALRM, on_tick)
    signal.setitimer(signal.ITIMER_REAL, min(TICK_S, step["timeout_s"]), TICK_S)
    try:
        while True:  # as init, reap orphans too until the program itself is gone
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                state["running"] = False
                break
    except Expired:
        state["running"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.kill(child, signal.SIGKILL)  # enough where there is no PID namespace to empty
        kill_all_but_me()
        report(cfg, f"timeout {index}" if state["why"] == "timeout" else f"limit {index} inodes")
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


def main():
    cfg = json.loads(sys.argv[1])
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # perfdag (or bwrap) gone: so are we
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if cfg["uid"] is None and os.getpid() != 1:
        report(cfg, "setup-error the driver is not the init of a PID namespace of its own")
        os._exit(125)
    for index, step in enumerate(cfg["steps"]):
        if not run_step(cfg, step, index):
            break
    os._exit(0)


if __name__ == "__main__":
    main()
