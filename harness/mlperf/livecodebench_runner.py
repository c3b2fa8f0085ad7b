"""The grader that runs inside the sandbox for LiveCodeBench programs (harness/mlperf/livecodebench.py):
lcb_runner's prelude of imports and a Python runner that grades as its `testing_util.py` does. Kept
apart because it is program text, not perfdag code that runs in perfdag's process.

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

_STAR = "string re datetime collections heapq bisect copy math random statistics itertools functools " \
        "operator io sys json builtins typing".split()
#: lcb_runner's import_string: the names every program sees.
PRELUDE = "".join(f"from {m} import *\n" for m in _STAR) + \
    "".join(f"import {m}\n" for m in _STAR if m not in ("builtins", "typing")) + "sys.setrecursionlimit(50000)\n"

# Runs in the sandbox as the unprivileged uid. Reads "nonce\n" + JSON {code, fn_name, inputs,
# outputs, timeout, prelude} on stdin, grades as lcb_runner's testing_util does, and writes
# "nonce {passed, last, meta}" on the stdout it had (the program's own fd 1 is /dev/null).
RUNNER = r'''
import ast, builtins, io, json, os, signal, sys, time
from decimal import Decimal
from types import ModuleType
from unittest import mock

sys.set_int_max_str_digits(50000)  # compute_code_generation_metrics.py sets it in the parent
nonce = sys.stdin.readline().strip()
job = json.loads(sys.stdin.read())
# LiveCodeBench grades in a multiprocessing child: fd 0 and sys.stdin are /dev/null there
fd = os.open(os.devnull, os.O_RDONLY); os.dup2(fd, 0); os.close(fd)
sys.stdin = open(os.devnull)
report_fd = os.dup(1)
fd = os.open(os.devnull, os.O_WRONLY); os.dup2(fd, 1); os.close(fd)
T = float(job["timeout"])
PRELUDE = job["prelude"]


class TimeoutException(Exception):
    pass


def on_alarm(signum, frame):
    raise TimeoutException


def arm(seconds):
    signal.setitimer(signal.ITIMER_REAL, seconds)


def cut(s, n=300):
    s = s if isinstance(s, str) else str(s)
    return s if len(s) <= n else s[: n // 2] + "...(truncated) ..." + s[-n // 2:]


def say(passed, last=None, **meta):
    os.write(report_fd, (nonce + " " + json.dumps({"passed": passed, "last": last, "meta": meta}) + "\n").encode())
    os._exit(0)


def guard():  # testing_util.reliability_guard(None): what it takes away, the program lacks here too
    builtins.quit = None
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill system putenv remove removedirs rmdir fchdir setuid fork forkpty killpg rename "
                 "renames truncate replace unlink fchmod fchown chmod chown chroot lchflags lchmod "
                 "lchown getcwd chdir").split():
        setattr(os, name, None)
    import shutil, subprocess
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None


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


def lines_of(s):
    return [ln.strip() for ln in s.strip().split("\n")]


def decimals(line):
    try:
        return [Decimal(w) for w in line.split()]
    except Exception:
        return None


def failure(e, passed, inp, out):
    if "timeoutexception" in repr(e).lower():
        say(passed, -3, error=repr(e), error_message="Time Limit Exceeded", inputs=cut(inp), expected=cut(out))
    say(passed, -4, error=repr(e), error_message="Runtime Error", inputs=cut(inp), expected=cut(out))


def grade_stdin(code, inputs, outputs):
    sol = load(as_function(inline_main(code)))
    fn = getattr(sol, "wrapped_function")  # AttributeError: an error during testing, as upstream
    for n, (inp, out) in enumerate(zip(inputs, outputs)):
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
                failure(e, n, inp, out)
            finally:
                arm(0)
        finally:
            sys.stdout = saved
        got = sink.getvalue()
        got_lines, want_lines = lines_of(got), lines_of(out)
        wa = dict(output=cut(got), inputs=cut(inp), expected=cut(out))
        if len(got_lines) != len(want_lines):
            say(n, -2, error_message="Wrong answer: mismatched output length", **wa)
        for i, (a, b) in enumerate(zip(got_lines, want_lines)):
            if a == b:
                continue
            da, db = decimals(a), decimals(b)
            if da is None or db is None or da != db:
                say(n, -2, error_message=f"Wrong answer at output_line_idx={i}: {cut(a)} != {cut(b)}", **wa)
    say(len(inputs))


def grade_call(code, fn_name, inputs, outputs):
    sol = load(PRELUDE + "\n\n" + code)
    method = getattr(sol, fn_name)  # missing: an error during testing, as upstream
    args = [[json.loads(line) for line in inp.split("\n")] for inp in inputs]
    wants = [json.loads(out) for out in outputs]
    for n, (a, want) in enumerate(zip(args, wants)):
        arm(T)
        try:
            got = method(*a)
            arm(0)
            if isinstance(got, tuple):
                got = list(got)
            ok = got == want
            if not ok:
                say(n, 0, output=cut(got), inputs=cut(a), expected=cut(want), error_message="Wrong Answer")
        except Exception as e:
            arm(0)
            failure(e, n, a, want)
        finally:
            arm(0)
    say(len(inputs))


signal.signal(signal.SIGALRM, on_alarm)
guard()
try:
    if job["fn_name"]:
        grade_call(job["code"], job["fn_name"], job["inputs"], job["outputs"])
    else:
        grade_stdin(job["code"], job["inputs"], job["outputs"])
except Exception as e:  # run_test's own except: "Error during testing", result [-4]
    say(0, -4, error_message=f"Error during testing: {cut(repr(e))}")
except BaseException as e:  # SystemExit and the like end LiveCodeBench's worker: no result, all -1
    say(0, -1, error_message=f"the program ended the grading process: {cut(repr(e))}")
'''
