"""The programs that run inside the sandbox for an MBXP Python row (harness/mlperf/codeexec/mbxp.py). Kept
apart because they are program text, not perfdag code that runs in perfdag's process.

Two judges, each in a sandbox job of its own:

IN_PROCESS is mxeval's `check_correctness`: solution + test + `check(<entry point>)` run by exec() in
one process, with mxeval's reliability guard, swallowed IO and SIGALRM timer; it passes only if exec()
returns. That is MLCommons' verdict, and it is decided in the program's own process, as in mxeval,
where the program can also reach the list the verdict is appended to. So the runner gives a program
as little as it can: nothing of its own in `__main__`, the verdict written with functions taken
before the program ran, to fd 3 (a file perfdag reads back) as `<secret> <result>`, the secret read
from fd 4 (a pipe that holds it once) only after exec() has returned. A program that writes to fd 3
without the secret, or takes the secret (the runner then finds the pipe empty and says so), leaves
more or other than the one line perfdag accepts: its row fails. What stays possible, as in mxeval,
is a program written to read fd 4, write fd 3 and exit before the runner can: the second judge is
there for that.

OUTSIDE runs the row's test in a process the program cannot write to: JUDGE (non-dumpable, so the
program, same uid, can neither ptrace it nor open its fds through /proc) reads the solution and the
test from its stdin, starts SERVER (the candidate's process: the solution exec()'d as mxeval does it,
under the same guard) and runs `check(candidate)` itself, `candidate` being a stand-in that sends each
call's arguments to SERVER and rebuilds what comes back. Values cross as data (VALUES: builtins,
their subclasses as their base type, Fraction, Decimal, complex, dict views as sets, builtin types by
name); anything else comes back as an object equal to nothing, so no code of the program runs in the
judge and no object of the program's (an `__eq__` that says yes to everything) compares there.
JUDGE writes `passed`, `failed: ...`, `timed out` or `unknown: ...` (the test uses a name the
solution defines, such as MBPP's `Pair`, or passes a value that cannot cross) to its fd 3.
"""
from __future__ import annotations

from harness.mlperf.codeexec.guard import TAKE_AWAY

# mxeval's reliability_guard and swallow_io's stream, as both the in-process runner and the candidate's
# process use them.
GUARD = TAKE_AWAY + r'''
import builtins, faulthandler, io, os, sys


class WriteOnly(io.StringIO):
    def read(self, *a, **k):
        raise IOError
    readline = readlines = read

    def readable(self, *a, **k):
        return False


def guard():
    faulthandler.disable()
    builtins.exit = builtins.quit = builtins.help = None
    take_away()
'''

# Runs in the sandbox as `python -I runner.py <timeout>`, in the private dir beside program.py.
IN_PROCESS = GUARD + r'''

def run():
    import contextlib, signal, types

    # Taken before the program runs: what it replaces later is not what writes the verdict.
    read, write, leave, setitimer = os.read, os.write, os._exit, signal.setitimer
    block, every, settrace, setprofile = signal.pthread_sigmask, signal.valid_signals(), sys.settrace, sys.setprofile
    kind, name_of, args_of, text = type, type.__dict__["__name__"].__get__, BaseException.args.__get__, str
    timeout = float(sys.argv[1])
    with open("program.py") as f:
        program = f.read()

    class Timeout(Exception):
        pass

    def on_alarm(signum, frame):
        raise Timeout("Timed out!")

    def said(e):  # the exception, described without running any of the program's code
        shown = ", ".join([a if kind(a) is text else "<" + name_of(kind(a)) + ">" for a in args_of(e)])
        return (name_of(kind(e)) + (": " + shown if shown else "")).encode("utf-8", "replace")

    sys.modules["__main__"] = types.ModuleType("__main__")  # `import __main__` finds nothing of the runner's
    guard()
    stream = WriteOnly()
    try:
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            saved_stdin, sys.stdin = sys.stdin, stream
            try:
                setitimer(signal.ITIMER_REAL, timeout)
                signal.signal(signal.SIGALRM, on_alarm)
                try:
                    exec(program, {})
                finally:
                    setitimer(signal.ITIMER_REAL, 0)
            finally:
                sys.stdin = saved_stdin
        result = b"passed"
    except Timeout:
        result = b"timed out"
    except BaseException as e:
        result = b"failed: " + said(e)
    block(signal.SIG_BLOCK, every)
    settrace(None)
    setprofile(None)
    try:
        secret = read(4, 64)
    except OSError:
        secret = b""
    if len(secret) != 33 or secret[-1:] != b"\n":
        secret, result = b"-\n", b"the secret was taken before the tests ended"
    write(3, secret[:-1] + b" " + result.replace(b"\n", b" ") + b"\n")
    leave(0)


run()
'''

# Values as data, the same on both sides of the judge: tag() in the process that has the value, rebuild()
# in the one that receives it. rebuild() makes builtins only.
VALUES = r'''
import json
from decimal import Decimal
from fractions import Fraction
from collections.abc import ItemsView, KeysView

TYPES = {t.__name__: t for t in (int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset,
                                 object, type)}


class Opaque:
    """A value that could not cross: equal to nothing."""
    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return "<" + self.name + ">"


def tag(x):
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return {"i": hex(int.__index__(x))}
    if isinstance(x, float):
        return {"f": float.__repr__(float(x))}
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, bytes):
        return {"b": bytes.hex(x)}
    if isinstance(x, list):
        return {"l": [tag(v) for v in list.__iter__(x)]}
    if isinstance(x, tuple):
        return {"t": [tag(v) for v in tuple.__iter__(x)]}
    if isinstance(x, dict):
        return {"d": [[tag(k), tag(v)] for k, v in dict.items(x)]}
    if isinstance(x, (set, KeysView, ItemsView)):
        return {"s": [tag(v) for v in x]}
    if isinstance(x, frozenset):
        return {"z": [tag(v) for v in frozenset.__iter__(x)]}
    if isinstance(x, Fraction):
        return {"q": [hex(x.numerator), hex(x.denominator)]}
    if isinstance(x, Decimal):
        return {"m": str(x)}
    if isinstance(x, complex):
        return {"c": [repr(x.real), repr(x.imag)]}
    if t is type and TYPES.get(x.__name__) is x:
        return {"y": x.__name__}
    return {"o": t.__name__}


def rebuild(v):
    if v is None or isinstance(v, (bool, str)):
        return v
    (k, x), = v.items()
    if k == "i":
        return int(x, 16)
    if k == "f":
        return float(x)
    if k == "b":
        return bytes.fromhex(x)
    if k == "l":
        return [rebuild(e) for e in x]
    if k == "t":
        return tuple(rebuild(e) for e in x)
    if k == "d":
        return {rebuild(a): rebuild(b) for a, b in x}
    if k == "s":
        return {rebuild(e) for e in x}
    if k == "z":
        return frozenset(rebuild(e) for e in x)
    if k == "q":
        return Fraction(int(x[0], 16), int(x[1], 16))
    if k == "m":
        return Decimal(x)
    if k == "c":
        return complex(float(x[0]), float(x[1]))
    if k == "y":
        return TYPES[x]
    return Opaque(str(x))


def crossed(x):
    """Whether x arrives as itself: no Opaque anywhere in it."""
    v = tag(x)
    return "{\"o\":" not in json.dumps(v, separators=(",", ":"))
'''

# The candidate's process: started by JUDGE with requests on fd 0 and replies on fd 3. The first request
# holds the solution, exec()'d as mxeval does (the guard, swallowed IO); then one call per request.
SERVER = VALUES + GUARD + r'''
import contextlib


requests = os.fdopen(0, "rb")
write = os.write


def reply(doc):
    write(3, json.dumps(doc).encode() + b"\n")


def failure(e):
    return {"raise": type(e).__name__, "text": str(e)[:300]}


first = json.loads(requests.readline())
stream = WriteOnly()
guard()
with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
    sys.stdin = stream
    scope = {}
    try:
        exec(first["solution"], scope)
        fn = scope[first["entry_point"]]
    except BaseException as e:
        reply({"loaded": False, **failure(e)})
        os._exit(0)
    reply({"loaded": True})
    for line in requests:
        call = json.loads(line)
        try:
            got = fn(*[rebuild(a) for a in call["args"]], **{k: rebuild(v) for k, v in call["kwargs"].items()})
            try:
                doc = {"value": tag(got)}
            except BaseException:
                doc = {"value": {"o": "unrepresentable"}}
        except BaseException as e:
            doc = failure(e)
        reply(doc)
os._exit(0)
'''

# Runs in the sandbox as `python -I -S -c JUDGE`; its stdin: {"solution", "test", "entry_point", "timeout",
# "server"}; its verdict on fd 3. The program's code never runs in this process.
JUDGE = VALUES + r'''
import builtins, ctypes, fcntl, os, signal, sys

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, no /proc/<pid>/fd from the program
job = json.loads(sys.stdin.read())
verdict = os.fdopen(3, "w")


def say(text):
    verdict.write(text.replace("\n", " ") + "\n")
    verdict.flush()
    os._exit(0)


def cut(s, n=200):
    s = repr(s)
    return s if len(s) <= n else s[:n] + "..."


class Timeout(BaseException):
    pass


class Unknown(BaseException):
    pass


class FromCandidate(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout


req_r, req_w = os.pipe()
rep_r, rep_w = os.pipe()
null = os.open(os.devnull, os.O_RDWR)
child = os.fork()
if child == 0:
    try:
        lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD, 4) for fd in (req_r, null, null, rep_w)]
        for target, fd in enumerate(lifted):  # requests on 0, /dev/null on 1 and 2, replies on 3
            os.dup2(fd, target)
        os.closerange(4, 1 << 16)  # the judge's verdict file and everything else stay the judge's
        os.execv(sys.executable, [sys.executable, "-I", "-c", job["server"]])
    finally:
        os._exit(127)
for fd in (req_r, rep_w, null):
    os.close(fd)
to_server = os.fdopen(req_w, "wb")
from_server = os.fdopen(rep_r, "rb")
calls = []


def ask(doc):
    to_server.write(json.dumps(doc).encode() + b"\n")
    to_server.flush()
    line = from_server.readline()
    if not line.endswith(b"\n"):
        raise FromCandidate("the program's process ended")
    try:
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise ValueError
        return answer
    except (ValueError, RecursionError):
        raise FromCandidate("the program's process answered what its server does not write") from None


def candidate(*args, **kwargs):
    if not all(crossed(a) for a in (*args, *kwargs.values())):
        raise Unknown("the test passes a value that cannot be sent to the program's process")
    answer = ask({"args": [tag(a) for a in args], "kwargs": {k: tag(v) for k, v in kwargs.items()}})
    calls.append(cut(args))
    if "value" in answer:
        try:
            got = rebuild(answer["value"])
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            raise FromCandidate("the program's process answered a malformed value") from None
        calls[-1] += " returned " + cut(got)
        return got
    calls[-1] += " raised " + str(answer.get("raise"))
    kind = getattr(builtins, str(answer.get("raise")), None)
    if isinstance(kind, type) and issubclass(kind, BaseException) and kind is not Unknown:
        try:
            error = kind(answer.get("text", ""))
        except Exception:
            error = FromCandidate(answer.get("raise"))
    else:
        error = FromCandidate(answer.get("raise"))
    error.from_candidate = True
    raise error


signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, float(job["timeout"]))
try:
    loaded = ask({"solution": job["solution"], "entry_point": job["entry_point"]})
    if not loaded.get("loaded"):
        say("failed: the solution does not load: " + str(loaded.get("raise")) + ": " + str(loaded.get("text", ""))[:200])
    scope = {}
    exec(job["test"], scope)
    scope["check"](candidate)
    outcome = "passed"
except Timeout:
    outcome = "timed out"
except Unknown as e:
    outcome = "unknown: " + str(e)
except NameError as e:
    if getattr(e, "from_candidate", False):
        outcome = "failed: NameError from the program"
    else:
        outcome = "unknown: the test uses a name the solution defines (" + str(e)[:100] + ")"
except BaseException as e:
    outcome = "failed: " + type(e).__name__ + (" after " + calls[-1] if calls else "")
finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
os.kill(child, signal.SIGKILL)
say(outcome)
'''
