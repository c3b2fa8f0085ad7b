"""The runner that runs inside the sandbox for LiveCodeBench programs (harness/mlperf/codeexec/livecodebench.py):
lcb_runner's prelude of imports and a Python runner that runs the tests as its `testing_util.py`
does. Kept apart because it is program text, not perfdag code that runs in perfdag's process.

The expected outputs never enter the sandbox: the runner gets the tests' inputs and reports what
each test produced; lcb_judge.py compares with the expected outputs in perfdag's process
(text and builtin values only: no generated code runs there). The runner stops at a time limit or
a runtime error, as testing_util does; after a wrong answer, which it cannot see, it runs the next
tests, whose results the judge ignores, so the verdict is the one testing_util gives.

How MLCommons scores a LiveCodeBench row (mlcommons/inference `language/deepseek-r1/eval_accuracy.py`
and `language/gpt-oss-120b/eval_accuracy.py` at b66003e1): the extracted program and the row's
question_id go to LiveCodeBench's own `lcb_runner` (the submodule at b1e7cab) with scenario
codegeneration, `release_version="release_v1"` (deepseek-r1) or `"release_v6"` (gpt-oss-120b) of
the `livecodebench/code_generation_lite` dataset, `timeout=60`, one program per problem; a
question_id not in the release scores False. lcb_runner (`evaluation/testing_util.py`,
`compute_code_generation_metrics.py`, `pass_k_utils.py`) then does, per program:

- the problem's tests are its public then its private test cases; `metadata["func_name"]` present
  makes it call-based (every test), absent makes it stdin/stdout;
- stdin programs: a trailing `if __name__ == '__main__':` block is inlined, every top-level
  statement but the imports is wrapped into a function `wrapped_function`, a fixed prelude of
  imports (`from string import *` ... `sys.setrecursionlimit(50000)`) is put in front; each test
  calls the function with sys.stdin, sys.stdin.read/readline/readlines and builtins.open mocked to
  give the test's input (SystemExit ends the call, not the test) and stdout captured; the output
  and the expected output are stripped, split into lines, each line stripped; the line counts must
  match and each line must be equal, or equal as lists of `decimal.Decimal` of its whitespace-split
  words (so 1.50 == 1.5, 1e2 == 100; no epsilon);
- call-based programs: the prelude, then the code, run once; `Solution()` when the text has
  "class Solution", else the module; its `<func_name>` is called with the test input's lines each
  parsed as one JSON value; the result (a tuple becomes a list) must `==` the JSON-parsed output;
- each test has a SIGALRM timer of `timeout` seconds (a "TimeoutException" is a time limit, any
  other Exception a runtime error); the first failing test ends the program's run; the whole run
  is killed after (timeout + 1) x tests + 5 s (every test then counts -1);
- the program passes iff every test's result is > 0 (pass@1 of one sample = passed or not).
  Result codes: True pass, False or -2 wrong answer, -3 time limit, -4 runtime error, -1 killed.
"""
from __future__ import annotations

from harness.mlperf.codeexec.guard import TAKE_AWAY

_STAR = "string re datetime collections heapq bisect copy math random statistics itertools functools " \
        "operator io sys json builtins typing".split()
#: lcb_runner's import_string: the names every program sees.
PRELUDE = "".join(f"from {m} import *\n" for m in _STAR) + \
    "".join(f"import {m}\n" for m in _STAR if m not in ("builtins", "typing")) + "sys.setrecursionlimit(50000)\n"

# Runs in the sandbox. Reads JSON {code, fn_name, inputs, timeout, prelude} on stdin: the tests' inputs,
# never their expected outputs. Runs the tests as lcb_runner's testing_util does and writes, on its
# verdict channel (fd 3, a file perfdag reads back; the program's own fd 1 is /dev/null), one line per
# test as it ends: "<secret> {"n", "output"}" (stdin: what the program printed), "<secret> {"n",
# "value", "shown"}" (call-based: the returned value, tuple made a list, as tagged data), or "<secret>
# {"n", "code", ...}" for a time limit (-3), a runtime error (-4) or the grading process ended (-1),
# after which it stops; "<secret> {"done": true}" after the last. The secret comes from fd 4, a pipe
# that holds it once, read at the first line, after the program's code has loaded: a program that
# takes it leaves the runner without it, and every line it writes without it is seen.
# lcb_judge.py, in perfdag, compares the outputs with the expected ones and refuses a channel that
# holds anything else.
RUNNER = TAKE_AWAY + r"""
import ast, builtins, io, json, os, signal, sys
from decimal import Decimal
from fractions import Fraction
from numbers import Integral, Real
from types import ModuleType
from unittest import mock

sys.set_int_max_str_digits(50000)  # compute_code_generation_metrics.py sets it in the parent
job = json.loads(sys.stdin.read())
# LiveCodeBench grades in a multiprocessing child: fd 0 and sys.stdin are /dev/null there
fd = os.open(os.devnull, os.O_RDONLY); os.dup2(fd, 0); os.close(fd)
sys.stdin = open(os.devnull)
report_fd = 3
fd = os.open(os.devnull, os.O_WRONLY); os.dup2(fd, 1); os.close(fd)
read, write, leave = os.read, os.write, os._exit  # taken before the program can replace them
secret = []
T = float(job["timeout"])
PRELUDE = job["prelude"]
current = 0  # the test running now


class TimeoutException(Exception):
    pass


def on_alarm(signum, frame):
    raise TimeoutException


def arm(seconds):
    signal.setitimer(signal.ITIMER_REAL, seconds)


def cut(s, n=300):
    s = s if isinstance(s, str) else str(s)
    return s if len(s) <= n else s[: n // 2] + "...(truncated) ..." + s[-n // 2:]


def say(record):
    line = json.dumps(record).encode() + b"\n"
    if not secret:  # the first line: the program's code has loaded by now
        try:
            got = read(4, 64)
        except OSError:
            got = b""
        secret.append(got[:-1] if len(got) == 33 and got[-1:] == b"\n" else b"-")
    write(report_fd, secret[0] + b" " + line)


def stop(n, code, **meta):
    say({"n": n, "code": code, **meta})
    leave(0)


def tagged(x):
    # the value as data perfdag rebuilds from builtins alone, so that == there is == here for them
    if x is None or x is True or x is False or type(x) is str:
        return x
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return {"i": hex(int(x))}
    if isinstance(x, float):
        return {"f": repr(float(x))}
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, list):
        return {"l": [tagged(v) for v in list.__iter__(x)]}
    if isinstance(x, tuple):
        return {"t": [tagged(v) for v in tuple.__iter__(x)]}
    if isinstance(x, dict):
        return {"d": [[tagged(k), tagged(v)] for k, v in dict.items(x)]}
    if isinstance(x, Fraction):
        return {"q": [hex(x.numerator), hex(x.denominator)]}
    if isinstance(x, Decimal):
        return {"m": str(x)}
    if isinstance(x, complex):
        return {"c": [repr(x.real), repr(x.imag)]}
    if isinstance(x, Integral):
        return {"i": hex(int(x))}
    if isinstance(x, Real):
        return {"f": repr(float(x))}
    return {"o": type(x).__name__}


def guard():  # testing_util.reliability_guard(None): what it takes away, the program lacks here too
    builtins.quit = None
    builtins.help = None
    take_away()


def inline_main(code):
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            code = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:
        pass
    return code


def as_function(code):
    try:
        tree = ast.parse(code)
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        rest = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        fn = ast.FunctionDef(name="wrapped_function", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                             kw_defaults=[], defaults=[]), body=rest, decorator_list=[], lineno=-1)
        return PRELUDE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(fn)
    except Exception:
        return code


def load(code):
    arm(T)
    try:
        module = ModuleType("tmp_sol", "")
        exec(code, module.__dict__)
        sol = module.Solution() if "class Solution" in code else module
        assert sol is not None
    finally:
        arm(0)
    return sol


class FakeBuffer:
    def __init__(self, text):
        self.data = text.encode("utf-8")

    def read(self, *a):
        return self.data

    def readline(self, *a):
        return self.data.split(b"\n")[0] + b"\n"


class FakeStdin:
    def __init__(self, text):
        self.text, self.stream, self.buffer = text, io.StringIO(text), FakeBuffer(text)

    def read(self, *a):
        return self.text

    def readline(self, *a):
        return self.stream.readline(*a)

    def readlines(self, *a):
        return self.text.split("\n")

    def __getattr__(self, name):
        return getattr(self.stream, name)


def call_with_input(fn, text):
    lines = iter(text.split("\n"))
    # the order testing_util's stacked @patch decorators are entered in
    with mock.patch("sys.stdin.read", lambda *a: text), \
            mock.patch("sys.stdin.readlines", lambda *a: text.split("\n")), \
            mock.patch("sys.stdin.readline", lambda *a: next(lines)), \
            mock.patch("sys.stdin", FakeStdin(text)), \
            mock.patch("builtins.open", mock.mock_open(read_data=text)):
        try:
            return fn()
        except SystemExit:
            pass


def failure(e, n, inp):
    if "timeoutexception" in repr(e).lower():
        stop(n, -3, error=repr(e), error_message="Time Limit Exceeded", inputs=cut(inp))
    stop(n, -4, error=repr(e), error_message="Runtime Error", inputs=cut(inp))


def grade_stdin(code, inputs):
    sol = load(as_function(inline_main(code)))
    fn = getattr(sol, "wrapped_function")  # AttributeError: an error during testing, as upstream
    global current
    for n, inp in enumerate(inputs):
        current = n
        arm(T)
        saved, sink = sys.stdout, io.StringIO()
        sink.close = lambda *a: 1
        sys.stdout = sink
        try:
            try:
                call_with_input(fn, inp)
                arm(0)
            except Exception as e:
                arm(0)
                failure(e, n, inp)
            finally:
                arm(0)
        finally:
            sys.stdout = saved
        say({"n": n, "output": sink.getvalue()})


def grade_call(code, fn_name, inputs):
    sol = load(PRELUDE + "\n\n" + code)
    method = getattr(sol, fn_name)  # missing: an error during testing, as upstream
    args = [[json.loads(line) for line in inp.split("\n")] for inp in inputs]
    global current
    for n, a in enumerate(args):
        current = n
        arm(T)
        try:
            got = method(*a)
            arm(0)
            if isinstance(got, tuple):
                got = list(got)
            say({"n": n, "value": tagged(got), "shown": cut(got)})
        except Exception as e:  # the call, or comparing what it returned (here: turning it into data)
            arm(0)
            failure(e, n, a)
        finally:
            arm(0)


signal.signal(signal.SIGALRM, on_alarm)
sys.modules["__main__"] = ModuleType("__main__")  # `import __main__` finds nothing of the runner's
guard()
try:
    if job["fn_name"]:
        grade_call(job["code"], job["fn_name"], job["inputs"])
    else:
        grade_stdin(job["code"], job["inputs"])
    say({"done": True})
except Exception as e:  # run_test's own except: "Error during testing", result [-4]
    stop(current, -4, error_message=f"Error during testing: {cut(repr(e))}")
except BaseException as e:  # SystemExit and the like end LiveCodeBench's worker: no result, all -1
    stop(current, -1, error_message=f"the program ended the grading process: {cut(repr(e))}")
leave(0)
"""
