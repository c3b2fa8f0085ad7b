"""LiveCodeBench's verdict on one program, given what its tests produced in the sandbox: the expected
outputs are compared here, in perfdag's process, and never handed to the program. No luigi imports.

The rules are lcb_runner's `testing_util.py` (see lcb_runner.py): tests in order, the
first failure ends the run (later reports are ignored: the runner could not know it had failed);
stdin tests compare stripped lines, equal as text or as lists of `decimal.Decimal` words; call-based
tests compare the returned value (a tuple made a list) with the JSON-parsed expected output by `==`.

The value crosses the sandbox's boundary as tagged data (lcb_runner.tagged) and is rebuilt
here from builtins alone: None, bool, int, float, str, list, tuple, dict, and the stdlib's Fraction,
Decimal and complex, so `==` here gives what `==` gave there for every such value, nested tuples and
1 == 1.0 == True included. Deliberate deviation: a value of any other type (a set, a deque, an
object of the program's own class) compares unequal to every expected output; MLCommons would call
that object's own `__eq__`, which is generated code and never runs outside the sandbox.
"""
from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from fractions import Fraction

TRUNCATE = 300  # characters of output / input / expected kept per failure (truncatefn)
VERDICT = {1: "passed", 0: "wrong_answer", -2: "wrong_answer", -3: "timeout", -4: "runtime_error",
           -1: "global_timeout"}


def cut(s, n: int = TRUNCATE) -> str:
    s = s if isinstance(s, str) else str(s)
    return s if len(s) <= n else s[: n // 2] + "...(truncated) ..." + s[-n // 2:]


class Unequal:
    """A returned value of a type the judge does not rebuild: equal to nothing."""

    def __init__(self, kind: str):
        self.kind = kind

    def __eq__(self, other):
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return f"<{self.kind}>"


def rebuild(v):
    """The value a call-based program returned, from its tagged form; ValueError if malformed."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if not (isinstance(v, dict) and len(v) == 1):
        raise ValueError(f"not a tagged value: {cut(repr(v), 80)}")
    (tag, x), = v.items()
    try:
        if tag == "i":
            return int(x, 16)
        if tag == "f":
            return float(x)
        if tag == "l":
            return [rebuild(e) for e in x]
        if tag == "t":
            return tuple(rebuild(e) for e in x)
        if tag == "d":
            return {rebuild(k): rebuild(e) for k, e in x}
        if tag == "q":
            return Fraction(int(x[0], 16), int(x[1], 16))
        if tag == "m":
            return Decimal(x)
        if tag == "c":
            return complex(float(x[0]), float(x[1]))
        if tag == "o":
            return Unequal(str(x))
    except (TypeError, ValueError, InvalidOperation, ZeroDivisionError) as exc:
        raise ValueError(f"malformed {tag!r} value: {exc}") from None
    raise ValueError(f"unknown tag {tag!r}")


def lines_of(s: str) -> list[str]:
    return [ln.strip() for ln in s.strip().split("\n")]


def decimals(line: str):
    try:
        return [Decimal(w) for w in line.split()]
    except Exception:  # noqa: BLE001 - convert_line_to_decimals: any failure is "not decimals"
        return None


def stdin_mismatch(got: str, want: str) -> str | None:
    """None when the printed output matches the expected one, else lcb_runner's message."""
    got_lines, want_lines = lines_of(got), lines_of(want)
    if len(got_lines) != len(want_lines):
        return "Wrong answer: mismatched output length"
    for i, (a, b) in enumerate(zip(got_lines, want_lines)):
        if a == b:
            continue
        da, db = decimals(a), decimals(b)
        if da is None or db is None or da != db:
            return f"Wrong answer at output_line_idx={i}: {cut(a)} != {cut(b)}"
    return None


def reports(channel: str, nonce: str) -> tuple[dict[int, dict], bool, str | None]:
    """The runner's per-test reports, whether it said it was done, and what is wrong with the channel
    (None when nothing is). The runner writes one line per test in order (0, 1, ...), each carrying
    the secret it took from its pipe, none after a failure's and only "done" after the last; a line
    without the secret, out of order or after the end is a line the runner did not write. An
    unfinished last line is the run cut off mid-report (the wall clock, a limit), not a forgery."""
    by_test: dict[int, dict] = {}
    done, ended = False, False
    lines = channel.split("\n")[:-1]  # the text after the last newline is unfinished
    for i, line in enumerate(lines):
        if not line.startswith(nonce + " "):
            return by_test, done, f"line {i + 1} lacks the runner's secret"
        try:
            rec = json.loads(line[len(nonce) + 1:])
        except (ValueError, RecursionError):
            return by_test, done, f"line {i + 1} is not the runner's JSON"
        if not isinstance(rec, dict) or done or ended:
            return by_test, done, f"line {i + 1} follows the runner's last"
        if rec == {"done": True}:
            done = True
            continue
        n = rec.get("n")
        if not isinstance(n, int) or isinstance(n, bool) or n != len(by_test):
            return by_test, done, f"line {i + 1} reports test {n!r} where the runner reports test {len(by_test)}"
        by_test[n] = rec
        ended = "code" in rec
    return by_test, done, None


def _compare(test, rec: dict, fn_name: str | None) -> tuple[int, dict] | None:
    """None when the test passed, else (LiveCodeBench's result code, its metadata)."""
    if "code" in rec:
        code = rec["code"] if rec["code"] in (-1, -3, -4) else -4
        meta = {k: cut(v) for k, v in rec.items() if k in ("error", "error_message", "inputs")}
        if code in (-3, -4) and not str(meta.get("error_message", "")).startswith("Error during testing"):
            meta["expected"] = cut(json.loads(test.output) if fn_name else test.output)
        return code, meta
    if fn_name:
        want = json.loads(test.output)
        args = [json.loads(line) for line in test.input.split("\n")]
        try:
            ok = rebuild(rec.get("value")) == want
        except (ValueError, RecursionError) as exc:
            return -4, {"error": repr(exc), "error_message": "Runtime Error", "inputs": cut(args),
                        "expected": cut(want)}
        if ok:
            return None
        return 0, {"output": cut(rec.get("shown", "")), "inputs": cut(args), "expected": cut(want),
                   "error_message": "Wrong Answer"}
    got = rec.get("output")
    got = got if isinstance(got, str) else ""
    why = stdin_mismatch(got, test.output)
    if why is None:
        return None
    return -2, {"output": cut(got), "inputs": cut(test.input), "expected": cut(test.output), "error_message": why}


def verdict(problem, channel: str, nonce: str, ended: str, why: str) -> dict:
    """The program's record: passed, error kind, LiveCodeBench's error code, per-test verdicts, detail.
    `channel` is what the runner wrote (RunResult.verdict), `ended` how the sandbox job ended (its
    RunResult.status), `why` its detail."""
    tests = problem.tests
    n = len(tests)
    by_test, done, wrong = reports(channel, nonce)
    if wrong is None and done and len(by_test) != n:
        wrong = f"the runner is said to be done after {len(by_test)} of {n} tests"
    if wrong is not None:  # the program wrote to its runner's channel: its row fails, whatever else is there
        return {"passed": False, "error": "tampered", "error_code": -1, "verdicts": ["tampered"] * n,
                "detail": {"error_message": f"the verdict channel holds lines the runner did not write: {wrong}"}}
    verdicts: list[str] = []
    for i, test in enumerate(tests):
        rec = by_test.get(i)
        if rec is None:
            break  # the run ended, or was killed, before this test did
        failed = _compare(test, rec, problem.func_name)
        if failed is None:
            verdicts.append("passed")
            continue
        code, meta = failed
        if code == -1:  # the grading process ended: LiveCodeBench counts every test -1
            return {"passed": False, "error": "crashed", "error_code": -1, "verdicts": ["crashed"] * n,
                    "detail": meta}
        kind = VERDICT[code]
        if kind == "runtime_error" and str(meta.get("error_message", "")).startswith("Error during testing"):
            kind = "error_during_testing"  # does not compile, no such function, an exception at load
        verdicts += [VERDICT[code]] + ["not_run"] * (n - i - 1)
        return {"passed": False, "error": kind, "error_code": code, "verdicts": verdicts, "detail": meta}
    if len(verdicts) == n:
        return {"passed": True, "error": None, "error_code": None, "verdicts": verdicts, "detail": {}}
    # no verdict for every test: the sandbox's wall clock, a signal, or the program ended the process
    kind = "global_timeout" if ended == "timeout" else "crashed"
    return {"passed": False, "error": kind, "error_code": -1, "verdicts": [kind] * n,
            "detail": {"error_message": why}}
