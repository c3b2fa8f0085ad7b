"""LiveCodeBench pass@1 for the reasoning benchmarks (deepseek-r1, gpt-oss-120b), on top of the sandbox.
Over 400 lines because it follows MLCommons' grading step by step, and each step is kept next to the one before it.

How MLCommons grades a program, step by step: harness/mlperf/codeexec/lcb_runner.py, which does
the same inside the sandbox.

Here the same steps run in a Python runner inside the sandbox (harness/mlperf/codeexec/sandbox.py), one
job per program: only the program and the tests' inputs go in (on stdin), what each test produced
comes back on lines that carry a per-job nonce, and lcb_judge.py compares it with the
expected outputs in perfdag's process: the answers never reach the program, and the sandbox mounts
neither the problems copy nor anything else of the host's but the system's read-only directories.
perfdag's code, LiveCodeBench's facts.

Deliberate deviations: the sandbox's limits (4 GiB address space, 64 processes, no network, a
file system of its own, read-only but for a 256 MiB private /tmp) where LiveCodeBench has none;
programs run on perfdag's base interpreter (never its venv) or, where the sandbox's uid cannot run
that one, the system's python3: the standard library and what that interpreter has installed; a
value of a type the judge does not rebuild compares unequal (lcb_judge.py); a problems file that
LiveCodeBench would grade anyway (no tests at all, a call-based test that is not JSON, a test type
that contradicts func_name) is refused with the problem named; a question_id the log needs that the
local copy lacks stops the scoring (MLCommons scores it False) so a wrong or partial copy cannot
silently lower the score. Nothing is downloaded: the problems are a local file.

Problems file (`accuracy.livecodebench_problems`, `--livecodebench-problems`): JSON lines, one
problem per line (or one JSON list of them), each an object with
- `question_id`: string, what the dataset row's gt_output / ground_truth holds;
- `public_test_cases`: a JSON string of a list of {"input": str, "output": str, "testtype":
  "stdin" | "functional"}, or that list itself;
- `private_test_cases`: the same, or upstream's compressed form base64(zlib(pickle(JSON string)))
  (unpickled by a loader that accepts nothing but one str), or absent / "" / [] for none;
- `metadata`: a JSON string of an object, or the object; `func_name` makes the problem call-based;
- `starter_code` (optional, not used to grade). Other upstream fields are ignored.
"""
from __future__ import annotations

import base64
import io
import json
import os
import pickle
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from harness.errors import InputError
from harness.mlperf.codeexec import lcb_judge as judge
from harness.mlperf.codeexec import sandbox
from harness.mlperf.codeexec.lcb_judge import TRUNCATE
from harness.mlperf.codeexec.lcb_runner import PRELUDE, RUNNER  # the sandbox side
from harness.mlperf.scoring import reasoning as r

MLCOMMONS_TIMEOUT_S = 60.0  # eval_accuracy.py: timeout=60 (per test, lcb_runner's SIGALRM)
#: The release of livecodebench/code_generation_lite each benchmark's eval_accuracy.py loads.
RELEASES = {"deepseek-r1": "release_v1", "gpt-oss-120b": "release_v6"}
FIELD = "accuracy.livecodebench_problems"
FLAG = "--livecodebench-problems"
STARTUP_SLACK_S = 5.0     # interpreter start and reading the tests, before LiveCodeBench's own budget
MAX_PRIVATE_BYTES = 1 << 30  # a decompressed private-tests string larger than this is refused
RESULTS_FILE = "livecodebench_results.json"


class ProblemsError(InputError):
    """The local LiveCodeBench problems copy is not configured, unreadable or incomplete."""


@dataclass(frozen=True)
class Test:
    input: str
    output: str
    testtype: str  # stdin | functional


@dataclass
class Problem:
    question_id: str
    tests: list[Test]
    func_name: str | None = None
    starter_code: str = ""
    meta: dict = field(default_factory=dict)


def wanted(where: str) -> str:
    return (f"a local copy of livecodebench/code_generation_lite ({RELEASES['deepseek-r1']} for "
            f"deepseek-r1, {RELEASES['gpt-oss-120b']} for gpt-oss-120b) as JSON lines with question_id, "
            f"public_test_cases, private_test_cases and metadata; see harness/mlperf/codeexec/livecodebench.py")


# -- reading the problems ----------------------------------------------------------------------------

class _OnlyStr(pickle.Unpickler):
    """Unpickles upstream's private tests: a pickle of one str. Any global (the way a pickle runs
    code) is refused, as is any persistent id; a result that is not a str is refused after."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused: the pickle names {module}.{name}; only a str is accepted")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused: the pickle holds a persistent id; only a str is accepted")


def decode_private(text: str):
    """upstream's private_test_cases: a JSON list as text, else base64(zlib(pickle(JSON text)))."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        packed = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ValueError("private_test_cases is neither JSON nor base64") from None
    d = zlib.decompressobj()
    try:
        raw = d.decompress(packed, MAX_PRIVATE_BYTES)
    except zlib.error as exc:
        raise ValueError(f"private_test_cases: base64 but not zlib ({exc})") from None
    if d.unconsumed_tail:
        raise ValueError(f"private_test_cases: decompresses to more than {MAX_PRIVATE_BYTES} bytes")
    try:
        obj = _OnlyStr(io.BytesIO(raw)).load()
    except Exception as exc:  # noqa: BLE001 - whatever a bad pickle raises, it is refused
        raise ValueError(f"private_test_cases: compressed, but not a pickled str ({exc})") from None
    if not isinstance(obj, str):
        raise ValueError(f"private_test_cases: the pickle holds a {type(obj).__name__}, not a str")
    try:
        return json.loads(obj)
    except json.JSONDecodeError as exc:
        raise ValueError(f"private_test_cases: decompressed, but not JSON ({exc.msg})") from None


def _tests(value, name: str) -> list[Test]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = decode_private(value) if name == "private_test_cases" else json.loads(value)
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list of tests, got {type(value).__name__}")
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, dict) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
            raise ValueError(f"{name}[{i}] must be an object with text 'input' and 'output'")
        kind = t.get("testtype")
        if kind not in ("stdin", "functional"):
            raise ValueError(f"{name}[{i}]: testtype {kind!r} is not 'stdin' or 'functional'")
        out.append(Test(t["input"], t["output"], kind))
    return out


def parse_problem(row: dict) -> Problem:
    """One upstream row (or the same with lists/dicts in place of JSON strings) as a Problem."""
    qid = row.get("question_id")
    if not isinstance(qid, str) or not qid:
        raise ValueError("question_id must be a non-empty string")
    meta = row.get("metadata") or {}
    if isinstance(meta, str):
        meta = json.loads(meta)
    if not isinstance(meta, dict):
        raise ValueError(f"metadata must be an object, got {type(meta).__name__}")
    tests = _tests(row.get("public_test_cases"), "public_test_cases") + \
        _tests(row.get("private_test_cases"), "private_test_cases")
    if not tests:
        raise ValueError("no tests (public_test_cases and private_test_cases are empty)")
    fn = meta.get("func_name")
    if fn is not None and (not isinstance(fn, str) or not fn.isidentifier()):
        raise ValueError(f"metadata.func_name {fn!r} is not a Python name")
    kinds = {t.testtype for t in tests}
    if kinds != {"functional" if fn else "stdin"}:
        raise ValueError(f"tests of type {sorted(kinds)} but metadata.func_name is {fn!r}: LiveCodeBench "
                         "calls <func_name> (functional) when it is set, else feeds stdin")
    if fn:
        for i, t in enumerate(tests):
            try:
                [json.loads(line) for line in t.input.split("\n")]
                json.loads(t.output)
            except json.JSONDecodeError:
                raise ValueError(f"test {i}: a functional test's input must be one JSON value per line "
                                 "and its output one JSON value") from None
    starter = row.get("starter_code") or ""
    return Problem(qid, tests, fn, starter if isinstance(starter, str) else "", meta)


def _rows(path: Path):
    """(line number, row) of a JSONL file, or of a JSON file holding a list of rows."""
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for i, row in enumerate(doc, start=1):
            yield f"item {i}", row
        return
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            if raw.strip():
                yield f"line {n}", json.loads(raw.decode("utf-8"))


def _open_check(path, where: str) -> Path:
    if path is None or str(path) == "":
        raise ProblemsError(f"{where}: not set; {wanted(where)}")
    p = Path(path).expanduser()
    if not p.is_file():
        raise ProblemsError(f"{where}: {p} is {'not a file' if p.exists() else 'missing'}; give {wanted(where)}")
    if not os.access(p, os.R_OK):
        raise ProblemsError(f"{where}: {p} cannot be read (permissions); give {wanted(where)}")
    return p


@lru_cache(maxsize=8)
def _ids_memo(real: str, size: int, mtime_ns: int, where: str) -> frozenset:
    ids = set()
    try:
        for at, row in _rows(Path(real)):
            qid = row.get("question_id") if isinstance(row, dict) else None
            if not isinstance(qid, str) or not qid:
                raise ProblemsError(f"{where}: {real} {at}: no question_id (a string); give {wanted(where)}")
            ids.add(qid)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProblemsError(f"{where}: {real}: not JSON lines ({exc}); give {wanted(where)}") from None
    except OSError as exc:
        raise ProblemsError(f"{where}: {real}: cannot be read ({exc.strerror}); give {wanted(where)}") from None
    if not ids:
        raise ProblemsError(f"{where}: {real} holds no problem; give {wanted(where)}")
    return frozenset(ids)


def question_ids(path, where: str = FIELD) -> frozenset:
    """The question_ids of a problems file (memoised per process by path, size and mtime)."""
    p = _open_check(path, where)
    st = p.stat()
    return _ids_memo(os.path.realpath(p), st.st_size, st.st_mtime_ns, where)


def missing_message(where: str, path, missing: Sequence[str], have: int, benchmark: str = "") -> str:
    shown = ", ".join(sorted(missing)[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    release = f" ({RELEASES[benchmark]} for {benchmark})" if benchmark in RELEASES else ""
    return (f"{where}: {path} lacks {len(missing)} question_id(s) the dataset's LiveCodeBench rows need "
            f"({shown}; it has {have}); give the release{release} of livecodebench/code_generation_lite "
            "that holds them")


def check_ids(path, needed: Iterable[str], where: str = FIELD, benchmark: str = "") -> None:
    """Raise one ProblemsError line unless the file exists, parses and holds every needed id."""
    have = question_ids(path, where)
    missing = sorted(set(needed) - have)
    if missing:
        raise ProblemsError(missing_message(where, path, missing, len(have), benchmark))


def load_problems(path, needed: Iterable[str] | None = None, where: str = FIELD,
                  benchmark: str = "") -> dict[str, Problem]:
    """The problems of `path` (only the `needed` ones, decoded; all when None), by question_id."""
    p = _open_check(path, where)
    want = None if needed is None else set(needed)
    if want is not None:
        check_ids(p, want, where, benchmark)
    out: dict[str, Problem] = {}
    try:
        for at, row in _rows(p):
            if not isinstance(row, dict):
                raise ProblemsError(f"{where}: {p} {at}: not a JSON object; give {wanted(where)}")
            qid = row.get("question_id")
            if want is not None and qid not in want:
                continue
            try:
                out[qid] = parse_problem(row)
            except (ValueError, TypeError) as exc:
                raise ProblemsError(f"{where}: {p} {at} (question_id {qid!r}): {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProblemsError(f"{where}: {p}: not JSON lines ({exc}); give {wanted(where)}") from None
    if want is not None and (gone := sorted(want - set(out))):
        raise ProblemsError(missing_message(where, p, gone, len(out), benchmark))
    return out


# -- which rows need it ------------------------------------------------------------------------------

def families_for(benchmark: str):
    return {"deepseek-r1": r.FAMILIES, "gpt-oss-120b": r.GPT_OSS_FAMILIES}.get(benchmark)


def needed_ids(benchmark: str, rows: Iterable[dict]) -> list[str]:
    """The question_ids of the LiveCodeBench rows among `rows` (dicts of a row's columns), in order."""

    fams = families_for(benchmark)
    if fams is None:
        return []
    truth_cols = ("gt_output", "ground_truth") if benchmark == "deepseek-r1" else ("ground_truth",)
    out = []
    for row in rows:
        kind = row.get("dataset")
        if kind is None or r.is_missing(kind) or r.family(kind, fams) != "livecodebench":
            continue
        truth = next((row[c] for c in truth_cols if c in row), None)
        if truth is not None and not r.is_missing(truth):
            out.append(str(truth))
    return out


# -- running -----------------------------------------------------------------------------------------

def build_job(problem: Problem, code: str, timeout_s: float, nonce: str) -> sandbox.Job | str:
    """The sandbox job: the runner and, on its stdin, the program and the tests' inputs only."""
    py = sandbox.python_interpreter()
    if py is None:
        return "python: no python3 that the sandbox's uid can run; set PERFDAG_SANDBOX_PYTHON"
    payload = {"code": code, "fn_name": problem.func_name, "timeout": timeout_s, "prelude": PRELUDE,
               "inputs": [t.input for t in problem.tests]}
    # check_correctness's global budget: (timeout + 1) x tests + 5 s
    budget = (timeout_s + 1) * len(problem.tests) + 5 + STARTUP_SLACK_S
    step = sandbox.Step([py, "-I", "runner.py"], budget, stdin=json.dumps(payload), channel=True)
    return sandbox.Job([step], {"runner.py": RUNNER}, [py], "python", secret=nonce)


def _outcome(problem: Problem, res: sandbox.RunResult, nonce: str) -> dict:
    if res.status == "not_scored":
        return {"passed": False, "error": "not_scored", "error_code": -1, "verdicts": ["not_scored"] * len(problem.tests),
                "detail": {"error_message": res.detail}}
    why = f"{res.detail or res.status}: {res.stderr.strip()[-TRUNCATE:]}".strip(": ")
    return judge.verdict(problem, res.verdict, nonce, res.status, res.detail if res.status == "timeout" else why)


def run_programs(question_ids: Sequence[str], codes: Sequence[str], *, problems: dict[str, Problem],
                 workers: int = 2, timeout_s: float = MLCOMMONS_TIMEOUT_S, allow_network: bool = False,
                 results_dir=None, where: str = FIELD) -> list[bool]:
    """pass@1 of each program over its problem's tests: the scorers' `code_runner`. Writes
    `<results_dir>/livecodebench_results.json` (one record per program) when results_dir is given."""
    if len(question_ids) != len(codes):
        raise ValueError(f"livecodebench: {len(question_ids)} question_ids but {len(codes)} programs")
    missing = sorted({q for q in question_ids if q not in problems})
    if missing:
        raise ProblemsError(missing_message(where, "the problems copy", missing, len(problems)))
    records, jobs, job_records = [], [], []
    for i, (qid, code) in enumerate(zip(question_ids, codes)):
        problem = problems[qid]
        rec = {"program": i, "question_id": qid, "tests": len(problem.tests),
               "kind": "functional" if problem.func_name else "stdin"}
        records.append(rec)
        nonce = sandbox.new_nonce()
        job = build_job(problem, code if isinstance(code, str) else "", float(timeout_s), nonce)
        if isinstance(job, str):
            rec.update(passed=False, error="not_scored", error_code=None, verdicts=[], detail={"error_message": job})
            continue
        jobs.append(job)
        job_records.append((rec, problem, nonce))
    results = sandbox.run_many(jobs, workers=workers, allow_network=allow_network) if jobs else []
    for (rec, problem, nonce), res in zip(job_records, results):
        rec.update(_outcome(problem, res, nonce))
    if results_dir is not None:
        out = Path(results_dir)
        out.mkdir(parents=True, exist_ok=True)
        passed = sum(r["passed"] for r in records)
        doc = {"programs": len(records), "passed": passed,
               "pass@1": 100.0 * passed / len(records) if records else None,
               "timeout_s_per_test": float(timeout_s),
               "not_scored": sum(r["error"] == "not_scored" for r in records), "per_program": records}
        _write_private(out / RESULTS_FILE, json.dumps(doc, indent=1, default=str))
    return [bool(r["passed"]) for r in records]


def _write_private(path: Path, text: str) -> None:
    """Written 0600: the results quote the expected outputs of the failing tests."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def code_runner(benchmark: str, needed: Iterable[str], path, *, workers: int = 2,
                timeout_s: float = MLCOMMONS_TIMEOUT_S, allow_network: bool = False, results_dir=None,
                where: str = FIELD):
    """The `code_runner(question_ids, codes)` for `benchmark`'s scorer, the `needed` problems loaded
    from `path` up front (a missing or incomplete copy is one ProblemsError line naming `where`)."""
    from functools import partial

    problems = load_problems(path, needed, where, benchmark)
    return partial(run_programs, problems=problems, workers=workers, timeout_s=timeout_s,
                   allow_network=allow_network, results_dir=results_dir, where=where)


def lazy_runner(benchmark: str, path, *, workers: int = 2, timeout_s: float = MLCOMMONS_TIMEOUT_S,
                allow_network: bool = False, results_dir=None, where: str = FIELD):
    """A `code_runner(question_ids, codes)` that loads the problems it is asked about on its first
    calls (each file read once per new set of ids); a missing or incomplete copy raises one line."""
    problems: dict[str, Problem] = {}

    def run(question_ids, codes):
        new = sorted(set(question_ids) - set(problems))
        if new:
            problems.update(load_problems(path, new, where, benchmark))
        return run_programs(question_ids, codes, problems=problems, workers=workers, timeout_s=timeout_s,
                            allow_network=allow_network, results_dir=results_dir, where=where)

    return run


def require(benchmark: str, rows: Iterable[dict], path, where: str = FIELD) -> list[str]:
    """Check, before anything runs, that `path` holds every question_id of the LiveCodeBench rows
    among `rows`; returns those ids. No LiveCodeBench row: nothing is required."""
    ids = needed_ids(benchmark, rows)
    if not ids:
        return ids
    if path is None or str(path) == "":
        raise ProblemsError(f"{where}: not set, and the dataset has {len(ids)} LiveCodeBench row(s) that "
                            f"{benchmark} scores by running their code; give {wanted(where)}")
    check_ids(path, ids, where, benchmark)
    return ids
