"""Adversarial, issue 46: a generated program cannot forge its own verdict, cannot take the scoring down
with it (signals to the sandbox's init, its group, every process; exhausting files, disk, output), and
the memory of a job's whole process tree is capped, not each process's. Real programs in the real
sandbox; MBXP scored as MLCommons scores it, LiveCodeBench as lcb_runner grades it."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.mlperf.codeexec import livecodebench as lcb
from harness.mlperf.codeexec import mbxp, sandbox
from sandbox_leftovers import leftovers

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")

ADD_TEST = "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(1, 1) == 2\n"
HONEST = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"


@pytest.fixture(autouse=True)
def no_survivors():
    yield
    assert leftovers() == []


def score(texts, tests=None, ids=None, **kw):
    ids = ids or ["python_add"] * len(texts)
    rows = pd.DataFrame({"id": ids, "gt_output": tests or [ADD_TEST] * len(texts)})
    return mbxp.score_mbxp(rows, texts, **kw)


# -- MBXP: a verdict the program writes itself is not a pass ------------------------------------------

FORGERIES = {
    # the program: the runner's channel as names in __main__
    "issue": 'import __main__ as m; m.report.write(m.nonce + " passed\\n"); m.report.flush(); m.leave(0)\n',
    # fd numbers written directly, then a wrong answer
    "fds": "import os\nfor fd in range(64):\n    try:\n        os.write(fd, b'passed\\n')\n    except OSError:\n"
           "        pass\n" + WRONG,
    # the secret taken from the runner's pipe, the verdict line written, out before the runner can
    "steal": "import os\ns = os.read(4, 64)\nos.write(3, s[:-1] + b' passed\\n')\nos._exit(0)\n",
    # every inherited fd read and written
    "every-fd": "import os\ngot = b''\nfor fd in range(3, 64):\n    try:\n        got = got or os.read(fd, 64)\n"
                "    except OSError:\n        pass\nfor fd in range(3, 64):\n    try:\n"
                "        os.write(fd, got.strip() + b' passed\\n')\n    except OSError:\n        pass\nos._exit(0)\n",
    # the runner's functions replaced, then a wrong answer
    "patch": "import os, sys, signal, builtins\nw = os.write\n"
             "def forge(*a, **k):\n    w(3, b'x passed\\n')\n"
             "os.write = os.read = os._exit = signal.pthread_sigmask = sys.settrace = sys.setprofile = forge\n"
             "builtins.type = builtins.str = forge\n" + WRONG,
    # the verdict from an atexit hook, a signal handler, a thread that outlives the test, SystemExit(0)
    "atexit": "import atexit, os\natexit.register(lambda: os.write(3, os.read(4, 64)[:-1] + b' passed\\n'))\n" + WRONG,
    "signal": "import os, signal\ndef h(*a):\n    os.write(3, os.read(4, 64)[:-1] + b' passed\\n')\n    os._exit(0)\n"
              "for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGUSR1, signal.SIGVTALRM):\n    signal.signal(s, h)\n"
              "signal.setitimer(signal.ITIMER_VIRTUAL, 0.001)\n" + WRONG,
    "thread": "import os, sys, threading, time\n"
              "def watch():\n    while True:\n        for f in list(sys._current_frames().values()):\n"
              "            while f is not None:\n                s = f.f_locals.get('secret')\n"
              "                if isinstance(s, bytes) and len(s) == 33:\n"
              "                    os.write(3, s[:-1] + b' passed\\n')\n                    os._exit(0)\n"
              "                f = f.f_back\n        time.sleep(0.0005)\n"
              "threading.Thread(target=watch, daemon=True).start()\n" + WRONG,
    "exit-0": "import sys\n" + WRONG + "raise SystemExit(0)\n",
    # no channel at all: an object that says it equals anything
    "always-equal": "class Yes:\n    def __eq__(self, other):\n        return True\n\ndef add(a, b):\n    return Yes()\n",
}


def test_a_forged_mbxp_verdict_does_not_pass():
    """The issue's program and its variants (fd numbers, the runner's secret stolen and its line
    written, patched functions, atexit, signal handlers, a thread racing the runner, SystemExit(0),
    an always-equal object) fail their rows; an honest row passes. A forgery that beats the judge in
    the program's own process is caught by the one outside it: `disputed`, with both verdicts."""
    out = score([HONEST, *FORGERIES.values()])
    rows = dict(zip(["honest", *FORGERIES], out["per_row"]))
    assert rows.pop("honest")["status"] == "passed", out["per_row"][0]
    passed = {name: r for name, r in rows.items() if r["status"] == "passed"}
    assert passed == {}, passed
    assert out["passed"] == 1 and out["mbxp"] == 100 / (len(FORGERIES) + 1)
    assert "module '__main__' has no attribute 'report'" in rows["issue"]["detail"]
    assert "verdict channel holds what the runner did not write" in rows["fds"]["detail"]
    # the theft wins in its own process (as in mxeval); outside it the same test fails
    for name in ("steal", "always-equal"):
        assert rows[name]["outside"].startswith("failed") and "not in a process it cannot write to" in rows[name]["detail"]
    assert "returned <Yes>" in rows["always-equal"]["outside"]
    assert out["disputed"] >= 2 and out["flagged"] == []
    assert {"os.read", "os.write", "_exit"} <= set(rows["steal"]["reaches"])  # the evidence, per row
    assert "__main__" in rows["issue"]["reaches"] and "_current_frames" in rows["thread"]["reaches"]


def test_the_judge_outside_agrees_with_mxeval_on_honest_programs():
    """Values cross as builtins (tuple vs list, sets, dicts, floats, a namedtuple, Fraction, builtin
    types as arguments, exceptions a test expects), so the second judge says what mxeval says; a test
    that uses a name only the solution defines cannot run outside (`unknown`) and keeps the
    in-process verdict, listed in `in_process_only`."""
    cases = [  # (solution, test, passes as in mxeval)
        ("def f(x):\n    return (x, x)\n", "def check(c):\n    assert c(1) == (1, 1)\n", True),
        ("def f(x):\n    return [x, x]\n", "def check(c):\n    assert c(1) == (1, 1)\n", False),
        ("def f(x):\n    return {x, 2}\n", "def check(c):\n    assert c(1) == {2, 1}\n", True),
        ("def f(x):\n    return {x: [x / 3]}\n", "def check(c):\n    assert c(1) == {1: [0.3333333333333333]}\n", True),
        ("from collections import namedtuple\nP = namedtuple('P', 'a b')\ndef f(x):\n    return P(x, 2)\n",
         "def check(c):\n    assert c(1) == (1, 2)\n", True),
        ("from fractions import Fraction\ndef f(x):\n    return Fraction(x, 2)\n", "def check(c):\n    assert c(1) == 0.5\n", True),
        ("def f(xs, t):\n    return [x for x in xs if not isinstance(x, t)]\n",
         "def check(c):\n    assert c((4, 7.7, 'a'), int) == [7.7, 'a']\n", True),
        ("def f(x):\n    raise ValueError(x)\n",
         "def check(c):\n    try:\n        c(1)\n    except ValueError:\n        return\n    assert False\n", True),
        ("def f(x):\n    return map(str, [x])\n", "def check(c):\n    assert c(1) == ['1']\n", False),
        ("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\ndef f(ps):\n    return len(ps)\n",
         "def check(c):\n    assert c([Pair(1, 2)]) == 1\n", True),
    ]
    out = score([c[0] for c in cases], [c[1] for c in cases], ["python_f"] * len(cases))
    assert [r["status"] == "passed" for r in out["per_row"]] == [c[2] for c in cases], out["per_row"]
    said = [r.get("outside") for r in out["per_row"]]
    assert said[-1].startswith("unknown: the test uses a name the solution defines")
    assert all(s == "passed" for s, c in zip(said[:-1], cases) if c[2])
    assert out["disputed"] == 0 and out["in_process_only"] == ["python_f"]


def test_other_languages_name_their_early_exits():
    """For C++, the verdict is the exit status the driver sees, as mxeval has it: a program that exits 0
    before its tests ran passes there and here; its row says so in `reaches` and `flagged`."""
    cpp_test = "\nint main() { if (add(2, 3) != 5) throw 1; return 0; }\n"
    early = "#include <cstdlib>\nint add(int a, int b) { std::exit(0); }\n"
    macro = "#define add(a, b) 5\n"
    assert "exit(" in mbxp.reach.reaches("cpp", early) and "#define add" in mbxp.reach.reaches("cpp", macro, cpp_test)
    assert mbxp.reach.reaches("cpp", "#define N 10\nint add(int a, int b) { return a + b; }\n", cpp_test) == []
    assert mbxp.reach.reaches("javascript", "function add(a, b) { process.exit(0) }") == ["process.exit"]


# -- the scoring goes on -------------------------------------------------------------------------------

SIGNALS = {  # program -> its row passes (a signal init ignores) or not (the program stopped itself)
    "import ctypes\nctypes.CDLL(None).kill(1, 2)\n": True,  # the issue's: SIGINT to the sandbox's init
    "import ctypes\nfor s in (1, 2, 3, 9, 10, 12, 14, 15, 17, 19, 20, 40):\n    ctypes.CDLL(None).kill(1, s)\n": True,
    # every process it may signal but init and itself: its own runner survives, the judge outside does not
    "import ctypes\nctypes.CDLL(None).kill(-1, 9)\n": False,
    "import ctypes\nctypes.CDLL(None).kill(0, 15)\n": False,  # its own group: the driver ignores it, it dies
    "import ctypes\nctypes.CDLL(None).kill(0, 19)\n": False,  # stopped: the wall clock ends it
    "import ctypes\ngetattr(ctypes.CDLL(None), 'raise')(40)\n": False,  # a real-time signal the signal module cannot name
    "import os\nfor fd in range(1024):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\n": False,
}


def test_a_program_signalling_its_sandbox_fails_only_its_own_row():
    """Signals to the sandbox's init (the issue's SIGINT, and SIGKILL, SIGSTOP, SIGTERM, ...), to the
    program's group and to every process, a real-time signal, closing every fd: each row gets its own
    verdict, the honest rows beside them pass, nothing is raised."""
    texts = [HONEST] + [src + HONEST for src in SIGNALS] + [HONEST]
    out = score(texts, timeout_s=2)
    got = [r["status"] == "passed" for r in out["per_row"]]
    assert got == [True, *SIGNALS.values(), True], out["per_row"]
    details = " ".join(r["detail"] for r in out["per_row"])
    assert "signal 40" in details and "timeout" in [r["status"] for r in out["per_row"]]


EXHAUSTING = {  # what each leaves the row with
    "import os\nwhile True:\n    os.write(1, b'x' * (1 << 20))\n": "File too large",  # 64 MiB of output
    "fds = []\nwhile True:\n    fds.append(open('/dev/null'))\n": "Too many open files",
    "n = 0\nwhile True:\n    open(f'/tmp/f{n}', 'wb').write(b'x' * (1 << 20))\n    n += 1\n": "No space left",
    # 64 processes, each of which then finishes the test and writes a verdict: more than one line
    "import ctypes\nlibc = ctypes.CDLL(None)\nwhile libc.fork() >= 0:\n    pass\n": "did not write",
}


def test_a_program_exhausting_its_sandbox_fails_only_its_own_row():
    """Output past the file limit, every fd, the private disk, every process slot: the row fails, the
    others are scored."""
    texts = [HONEST] + [src + HONEST for src in EXHAUSTING] + [HONEST]
    out = score(texts, timeout_s=3)
    rows = out["per_row"]
    assert [r["status"] for r in rows] == ["passed", *["failed"] * len(EXHAUSTING), "passed"], rows
    assert all(why in r["detail"] for why, r in zip(EXHAUSTING.values(), rows[1:])), rows


def children(n: int, mib: int, sleep_s: int) -> str:
    """A program's first lines: n forked children each touching `mib` MiB, sleeping; the parent waits too."""
    return ("import ctypes, mmap, os, time\nfor i in range(%d):\n    if ctypes.CDLL(None).fork() == 0:\n"
            "        held = mmap.mmap(-1, %d << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)\n"
            "        time.sleep(%d)\n        os._exit(0)\ntime.sleep(%d)\n" % (n, mib, sleep_s, sleep_s + 1))


def test_memory_no_process_maps_counts_or_cannot_be_had():
    """Memory no process maps any more is the job's too: System V segments, detached, count against its
    cap; a memfd (whose unmapped pages nothing would count) cannot be created at all. Every program
    starts first in line for the host's OOM killer."""
    memfd = sandbox.run_program("print(open('/proc/self/oom_score_adj').read())\nimport os\nos.memfd_create('hidden')\n",
                                "python", timeout_s=5)
    assert memfd.status == "failed" and "Function not implemented" in memfd.stderr, memfd
    assert memfd.stdout.strip() == "1000"
    src = ("import ctypes, time\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
           "for i in range(8):\n    sid = libc.shmget(0, 64 << 20, 0o1600)\n    at = libc.shmat(sid, None, 0)\n"
           "    ctypes.memset(at, 1, 64 << 20)\n    libc.shmdt(ctypes.c_void_p(at))\ntime.sleep(30)\n")
    res = sandbox.run_program(src, "python", timeout_s=20, limits=sandbox.Limits(job_memory_bytes=256 << 20))
    assert res.status == "killed" and "memory limit of 0.25 GiB" in res.detail, res
    assert res.wall_s < 10


# -- LiveCodeBench -------------------------------------------------------------------------------------

ADD_TESTS = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
             {"input": "5 5\n", "output": "10\n", "testtype": "stdin"}]


def test_a_livecodebench_program_cannot_write_its_runners_channel(tmp_path):
    """The runner's names are not in `__main__`; lines written to its channel without the secret, or the
    secret taken at load, fail the program ("tampered"); a SIGINT to the init, a huge output and a
    signal to the group each fail only their own program."""
    probs = {"add": lcb.parse_problem({"question_id": "add", "public_test_cases": ADD_TESTS, "metadata": {}})}
    honest = "a, b = map(int, input().split())\nprint(a + b)\n"
    cases = {
        "honest": (honest, True, None),
        "main": ("import __main__ as m\nm.say({'n': 0, 'output': '3'})\n" + honest, False, "runtime_error"),
        "fd3": ("import os\nos.write(3, b'x {\"n\": 0, \"output\": \"3\"}\\n')\n" + honest, False, "tampered"),
        "steal": ("import os\nos.read(4, 64)\n" + honest, False, "tampered"),
        "sigint": ("import ctypes\nctypes.CDLL(None).kill(1, 2)\n" + honest, True, None),
        "huge": ("print('x' * (100 << 20))\n", False, "crashed"),
        "group": ("import ctypes\nctypes.CDLL(None).kill(0, 9)\n" + honest, False, "crashed"),
    }
    out = lcb.run_programs(["add"] * len(cases), [c[0] for c in cases.values()], problems=probs, timeout_s=5,
                           workers=2, results_dir=tmp_path)
    recs = json.loads((tmp_path / lcb.RESULTS_FILE).read_text())["per_program"]
    assert [(r["passed"], r["error"]) for r in recs] == [c[1:] for c in cases.values()], recs
    assert out == [c[1] for c in cases.values()]
    assert "lacks the runner's secret" in recs[2]["detail"]["error_message"]


# -- through perfdag's own command ---------------------------------------------------------------------

def _log(tok, texts: dict[int, str], path: Path) -> Path:
    """An accuracy log answering dataset row i with texts[i]."""
    path.write_text(json.dumps([{"seq_id": i, "qsl_idx": i, "data": np.asarray(
        tok.encode(t, add_special_tokens=False), np.int32).tobytes().hex().upper()} for i, t in texts.items()]))
    return path


def test_score_goes_on_when_an_mbxp_row_signals_its_init(tmp_path):
    """`python -m pipeline score` on the mixtral stand-in (44 rows; the log answers its 12 MBXP rows) with
    one MBXP row sending SIGINT to the sandbox's init, one forging its verdict, one whose four forked
    children touch 1.5 GiB each (each far under the 4 GiB per-process cap) and one whose three children
    hold 256 MiB each: no traceback, accuracy.json and every row's result are written; the signalling
    row passes on its merits, the forged one fails, the four children are killed once the job holds
    its 4 GiB together, well before the 6 GiB they would hold, and the row names the limit; the three
    pass."""
    sys.path.insert(0, str(REPO / "tests"))
    import mlperf_scoring_fixtures as MF

    from harness.model.corpus import standin_path, standin_rows
    from pipeline.cli import main

    tok_dir = MF.save_tokenizer(tmp_path / "tok")
    rows = standin_rows("mixtral-8x7b")
    texts = {i: r["canonical_solution"] for i, r in enumerate(rows) if r["dataset"] == "MBXP"}
    first, second, third, fourth = list(texts)[:4]
    texts[first] = "import ctypes\nctypes.CDLL(None).kill(1, 2)\n" + texts[first]
    texts[second] = FORGERIES["issue"]
    texts[third] = children(4, 1536, 60) + texts[third]
    texts[fourth] = children(3, 256, 1) + texts[fourth]
    log = _log(MF.load_tokenizer(tok_dir), texts, tmp_path / "log.json")
    rc = main(["score", "--benchmark", "mixtral-8x7b", "--log", str(log), "--dataset", str(standin_path("mixtral-8x7b")),
               "--tokenizer", str(tok_dir), "--out", str(tmp_path / "out")])
    assert rc in (0, 11)
    doc = json.loads((tmp_path / "out" / "accuracy.json").read_text())
    kept = json.loads((tmp_path / "out" / "code_outputs" / "mbxp_results.json").read_text())
    statuses = [r["status"] for r in kept["per_row"]]
    assert len(statuses) == 12 and statuses[:4] == ["passed", "failed", "killed", "passed"], kept["per_row"]
    assert doc["scores"]["mbxp"] == 100 * statuses.count("passed") / 12
    big = kept["per_row"][2]["detail"]
    assert "over its memory limit of 4.00 GiB" in big, big
    assert 4.0 <= float(big.split("held ")[1].split(" GiB")[0]) < 5.0


def test_score_goes_on_when_a_livecodebench_program_signals_its_init(tmp_path):
    """The same for deepseek-r1's LiveCodeBench rows: the score command writes its results."""
    sys.path.insert(0, str(REPO / "tests"))
    import mlperf_scoring_fixtures as MF

    from pipeline.cli import main

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"question_id": "add", "public_test_cases": ADD_TESTS, "metadata": {}}) + "\n")
    data = tmp_path / "ds.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [
        {"input": "q1", "gt_output": "add", "dataset": "livecodebench"},
        {"input": "q2", "gt_output": "add", "dataset": "livecodebench"}]))
    tok_dir = MF.save_tokenizer(tmp_path / "tok")
    honest = "a, b = map(int, input().split())\nprint(a + b)\n"
    texts = {0: f"```python\nimport ctypes\nctypes.CDLL(None).kill(1, 2)\n{honest}```",
             1: f"```python\nimport ctypes\nctypes.CDLL(None).kill(0, 9)\n{honest}```"}
    log = _log(MF.load_tokenizer(tok_dir), texts, tmp_path / "log.json")
    rc = main(["score", "--benchmark", "deepseek-r1", "--log", str(log), "--dataset", str(data), "--tokenizer",
               str(tok_dir), "--out", str(tmp_path / "out"), "--livecodebench-problems", str(problems),
               "--livecodebench-timeout", "2"])
    assert rc in (0, 11)
    doc = json.loads((tmp_path / "out" / "accuracy.json").read_text())
    kept = json.loads((tmp_path / "out" / "code_outputs" / lcb.RESULTS_FILE).read_text())
    assert [(r["passed"], r["error"]) for r in kept["per_program"]] == [(True, None), (False, "crashed")]
    assert doc["scores"]["exact_match"] == pytest.approx(50.0)
