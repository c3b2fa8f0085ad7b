"""The sandbox's driver: a standalone stdlib script that runs a job's steps. Never imported by perfdag.

`sandbox.py` starts it as `python -I -S -c <this file's text> CONFIG_JSON`, inside bwrap as the PID
namespace's init (`--as-pid-1`): bwrap has built the namespaces and the file system by then. Where
the user allowed the weaker mode without namespaces it runs on the host instead (as root, dropping
to the job's leased uid for each program).

    driver   non-dumpable (the program, same uid, can neither ptrace it nor read its memory) and
             deaf to the program: as a PID namespace's init it only receives signals it has a handler
             for, and it has none (every signal at its default, SIGCHLD blocked and waited for with
             sigtimedwait: no SIGINT handler for a KeyboardInterrupt, no SIGALRM timer to trip); for
             each step: say `start`, fork the program, watch it (wall clock, files in the private
             dirs, memory of the whole job) until it ends, then kill every other process (kill(-1)
             from init), report
    program  its own stdin/stdout/stderr and the step's extra fds (3, 4, ...) and no other fd, every
             signal at its default and unblocked, rlimits, the leased uid (weaker mode), no_new_privs,
             a seccomp filter that refuses memfd_create and memfd_secret (REFUSED),
             an OOM score of 1000 (the host's OOM killer takes the job before anything of perfdag's,
             unless the program lowers it again, which the kernel lets a process do),
             cwd = the private dir, execve

Report lines, on the report fd: `setup-error <message>` (before a program started: the sandbox's
fault), `start <step>`, then one of `exit <step> <returncode>` (negative: killed by that signal),
`timeout <step>`, `limit <step> inodes` (too many files in the private /tmp and /dev/shm, which bwrap
cannot cap), `limit <step> memory <bytes>` (the job's processes together held more than
`job_memory_bytes`: their anonymous and shared resident memory plus the job's System V segments), or
`driver-error <step> <message>`. When init exits the kernel kills whatever is left.
"""
import ctypes
import fcntl
import json
import os
import resource
import signal
import struct
import sys
import time

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 38
TICK_S = 0.05  # how often the wall clock, the private dirs' file counts and the job's memory are looked at
LIMITS = {"cpu_s": resource.RLIMIT_CPU, "memory_bytes": resource.RLIMIT_AS,
          "file_bytes": resource.RLIMIT_FSIZE, "nproc": resource.RLIMIT_NPROC,
          "nofile": resource.RLIMIT_NOFILE}
CATCHABLE = sorted(set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP})

# Refused to every program (ENOSYS), by a seccomp filter: memory in a memfd that no process maps is in no
# process's resident memory, so the job's memory cap could not see it. machine -> (audit arch, numbers).
REFUSED = {"x86_64": (0xC000003E, {"memfd_create": 319, "memfd_secret": 447}),
           "aarch64": (0xC00000B7, {"memfd_create": 279, "memfd_secret": 447})}

libc = ctypes.CDLL(None, use_errno=True)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_filter():
    """The classic BPF program: another ABI's calls (i386, x32) and the REFUSED calls get ENOSYS, the
    rest is allowed. None where the machine is not in REFUSED."""
    if os.uname().machine not in REFUSED:
        return None
    arch, numbers = REFUSED[os.uname().machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    refuse, allow = 0x00050000 | 38, 0x7FFF0000  # SECCOMP_RET_ERRNO | ENOSYS, SECCOMP_RET_ALLOW
    code = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, refuse), (ld, 0, 0, 0)]
    if arch == 0xC000003E:
        code += [(jge, 0, 1, 0x40000000), (ret, 0, 0, refuse)]  # x32 numbers
    for nr in numbers.values():
        code += [(jeq, 0, 1, nr), (ret, 0, 0, refuse)]
    code.append((ret, 0, 0, allow))
    return b"".join(struct.pack("HBBI", *c) for c in code), len(code)


def refuse_calls(compiled):
    """Install the filter on this process (no_new_privs is set): it and what it execs keep it."""
    if compiled is None:
        return
    buf = ctypes.create_string_buffer(compiled[0], len(compiled[0]))
    prog = SockFprog(compiled[1], ctypes.addressof(buf))
    if libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(prog), 0, 0) != 0:  # SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def report(cfg, line):
    os.write(cfg["report_fd"], (line.replace("\n", " ") + "\n").encode())


def deaf():
    """No handler for any signal: a PID namespace's init then ignores every signal sent from inside it
    (the program's kill(1, ...), to its group, or kill(-1)); SIGCHLD is blocked and waited for."""
    for sig in CATCHABLE:
        try:
            signal.signal(sig, signal.SIG_IGN if sig == signal.SIGPIPE else signal.SIG_DFL)
        except (OSError, ValueError):  # glibc's reserved real-time signals
            pass
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})


def oom_first():
    """Raise our OOM score to the maximum (allowed without privileges; children inherit it)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def start_program(cfg, step, index):
    """The program's process: stdio and extra fds, no other fd, limits, ids, then execve. Never returns."""
    try:
        wanted = cfg["stdio"][index]  # fd i of the program gets wanted[i]
        # first above every target number, so that no dup2 overwrites an fd still to be placed
        lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD, len(wanted) + 3) for fd in wanted]
        for target, fd in enumerate(lifted):
            os.dup2(fd, target)
        report_fd = cfg["report_fd"]  # open until execve, for a setup-error
        os.closerange(len(wanted), report_fd)
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
        refuse_calls(cfg["seccomp"])
        os.umask(0o077)
        for sig in CATCHABLE:  # the driver's dispositions (and Python's ignored SIGPIPE) are not the program's
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.set_inheritable(report_fd, False)  # closed by execve
        os.execvpe(step["argv"][0], step["argv"], cfg["env"])
    except BaseException as exc:  # the sandbox's failure, not the program's
        report(cfg, f"setup-error cannot start {step['argv'][0]}: {exc!r}")
    os._exit(127)


def files_in(paths):
    """Inodes in use on the private tmpfs: bwrap cannot cap their number (no nr_inodes), the driver does."""
    used = 0
    for p in paths:
        st = os.statvfs(p)
        used += st.f_files - st.f_ffree
    return used


def job_processes(cfg):
    """(pid, /proc/<pid>/status lines) of every live process of the job but the driver: all of this
    PID namespace, or (weaker mode, on the host) those of the leased uid. status is readable without
    ptrace access, so a process that makes itself non-dumpable cannot hide."""
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            continue  # gone meanwhile
        fields = dict(ln.split(b":", 1) for ln in lines if b":" in ln)
        if fields.get(b"State", b"").split()[:1] == [b"Z"]:
            continue  # ended, holds nothing, cannot be killed
        if cfg["uid"] is not None and str(cfg["uid"]).encode() not in fields.get(b"Uid", b"").split():
            continue
        out.append((int(name), fields))
    return out


def memory_in_use(cfg):
    """Bytes the job holds: each process's anonymous and shared resident memory (RssAnon + RssShmem),
    plus the resident pages of the job's System V segments, attached or not. Pages shared between
    processes count once per process: an over-estimate, never an under-estimate."""
    total = 0
    for _, fields in job_processes(cfg):
        for key in (b"RssAnon", b"RssShmem"):
            try:
                total += int(fields.get(key, b"0 kB").split()[0]) * 1024
            except (ValueError, IndexError):
                pass
    try:
        with open("/proc/sysvipc/shm", "rb") as f:
            head = f.readline().split()
            rss, uid = head.index(b"rss"), head.index(b"uid")
            for line in f:
                cols = line.split()
                if cfg["uid"] is None or int(cols[uid]) == cfg["uid"]:
                    total += int(cols[rss])
    except (OSError, ValueError, IndexError):
        pass
    return total


def reap(child):
    """Reap every child that has ended (as init, orphans too); the program's wait status, or None."""
    got = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return got
        if pid == 0:
            return got
        if pid == child:
            got = status


def run_step(cfg, step, index):
    """Run one step; True when it exited with an accepted status."""
    report(cfg, f"start {index}")
    child = os.fork()
    if child == 0:
        start_program(cfg, step, index)
    deadline = time.monotonic() + step["timeout_s"]
    limits = cfg["limits"]
    paths = cfg["inode_paths"]
    allowed = limits["inodes"] + files_in(paths)
    cap = limits.get("job_memory_bytes")
    why, next_check = None, 0.0
    while True:
        status = reap(child)
        if status is not None:
            break
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            why = "timeout"
        elif now >= next_check:  # once a tick, however often a SIGCHLD (the program may send it) wakes us
            next_check = now + TICK_S
            if paths and files_in(paths) > allowed:
                why = "limit {} inodes"
            elif cap and (held := memory_in_use(cfg)) > cap:
                why = "limit {} memory " + str(held)
        if why:
            kill_job(cfg, child)
            report(cfg, f"timeout {index}" if why == "timeout" else why.format(index))
            return False
        signal.sigtimedwait({signal.SIGCHLD}, max(0.001, min(next_check - now, left)))
    kill_job(cfg, None)  # nothing a step started outlives it
    code = os.waitstatus_to_exitcode(status)
    report(cfg, f"exit {index} {code}")
    return code in step["ok_returncodes"]


def kill_job(cfg, child):
    """Kill every process of the job but the driver and reap them: from a PID namespace's init kill(-1)
    reaches all of them; on the host (weaker mode) the leased uid's, until none is left."""
    if child is not None:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
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
        return
    if cfg["uid"] is None:
        return
    for _ in range(200):
        pids = [pid for pid, _ in job_processes(cfg)]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap(None)
        if not pids:
            return
        time.sleep(0.01)


def main():
    cfg = json.loads(sys.argv[1])
    cfg["seccomp"] = seccomp_filter()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # perfdag (or bwrap) gone: so are we
    oom_first()  # first: a non-dumpable process's /proc/self files are root's, not its own to write
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    deaf()
    if cfg["uid"] is None and os.getpid() != 1:
        report(cfg, "setup-error the driver is not the init of a PID namespace of its own")
        os._exit(125)
    index = 0
    try:
        for index, step in enumerate(cfg["steps"]):
            if not run_step(cfg, step, index):
                break
    except BaseException as exc:  # a program has run: never the whole scoring's failure, only its row's
        kill_job(cfg, None)
        report(cfg, f"driver-error {index} {exc!r}")
    os._exit(0)


if __name__ == "__main__":
    main()
