"""MBXP pass@1 for mixtral-8x7b, computed as MLCommons computes it, on top of the sandbox.

Reproduces mlcommons/inference `language/mixtral-8x7b/evaluate-accuracy.py` + `evaluate_mbxp.py`
(checked at b66003e1, 2026-08-20; the MBXP logic is unchanged since 2a46c7af, 2024-06) and the
per-language execution of amazon-science/mxeval `mxeval/execution.py` (e09974f), which
MLCommons' Dockerfile.eval installs (with `npx tsc` replaced by `tsc`):

- Rows: the dataset's MBXP rows. `id` is "<language>_<entry point>" (split at the first "_"),
  `gt_output` holds the test code; the prompt (`input`) is NOT part of the program, because the
  model repeats it. The tests come from the dataset itself: nothing is read from mxeval's files.
- Post-processing of the decoded text: cut at the first "```" (if any); Python: lstrip();
  then every "\\_" becomes "_".
- Program: Python = solution + "\\n" + test + "\\n" + "check(<entry point>)", run by exec() in a
  child with mxeval's reliability guard, stdout/stderr swallowed, a SIGALRM timer; it passes only
  if exec() returns (SystemExit, os._exit or a crash fail). Other languages = solution + test,
  passed iff the run exits 0; C++: `g++ x.cpp -o x_cpp` then `./x_cpp`; TypeScript: `tsc x.ts
  --target es5 --lib es2016` must exit 2 (mxeval's rule) then `node x.js`; JavaScript `node`,
  PHP `php`, Ruby `ruby`. Compile timeout 100 s; run timeout int(timeout) (MLCommons: 20).
- Only cpp, javascript, php, python, ruby and typescript rows are evaluated; rows in other
  languages are left out of the denominator ("skipped" here), as MLCommons does.
- mbxp = 100 * passed / evaluated rows, NOT rounded (MLCommons returns the raw float); 0 when
  there is no MBXP row at all.

Deliberate deviations: programs run in the sandbox (address space 4 GiB, 64 processes, files
64 MiB, a 256 MiB private /tmp, 4096 files, no network, a file system of its own: MLCommons has no
such limits; sandbox.py); Python programs run on perfdag's base interpreter (never its venv), or
the system's python3 where the sandbox's uid cannot run that one, so third-party modules such as
numpy may be absent; a row whose toolchain is missing here is "not_scored" and counted as not
passed, so `mbxp` is then a lower bound and `complete` is False; and a Python row passes only if a
second judge agrees (below). The test code is part of the program, as mxeval runs it (solution +
test + check(...)): MBXP has no hidden answers to keep out.

Who decides a row's verdict. Other languages: the run's exit status, which the kernel reports to the
sandbox's driver, out of the program's reach; the program decides it, as under mxeval (one that
exits 0 before its tests ran passes there too). Python: mxeval's verdict is decided in the program's
own process, so it is taken twice (mbxp_runner.py): in the program's process as mxeval takes it, with
the runner's channel kept out of the program's way; then, for a row that passed there, by a judge in
a process the program cannot write to, which runs the same test and sees only data from the
program's process. The row passes when both say so, or when the second cannot run the test as
written (the test uses a name the solution defines: MBPP's `Pair`, a tree `root`), which the row's
`outside` says ("unknown: ..."). A row that passed in its process but fails outside is "failed" with
both verdicts in its detail, and counted in `disputed`. Every row whose program names something that
can decide a verdict from inside (reach.py: exit calls, fd and frame access, ...) lists it in
`reaches`; `flagged` names the passing ones.

Scored on this machine when its toolchains are present: python (always: perfdag's base or the
system's python3), cpp (g++), javascript (node, plus the `lodash` module that MBXP's JavaScript
tests require, found via NODE_PATH / PERFDAG_SANDBOX_NODE_PATH), typescript (tsc and node), php,
ruby. Where one is missing its rows are "not_scored" and named in `not_scored_languages`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harness.mlperf.codeexec import reach, sandbox
from harness.mlperf.codeexec.mbxp_runner import IN_PROCESS, JUDGE, SERVER  # the sandbox side

if TYPE_CHECKING:  # an annotation: the caller that reads the dataset imports pandas
    import pandas

MLCOMMONS_LANGUAGES = ("cpp", "python", "php", "javascript", "ruby", "typescript")
MLCOMMONS_TIMEOUT_S = 20.0  # evaluate_mbxp.py: checker(problem, solution, timeout=20.0)
COMPILE_TIMEOUT_S = 100.0   # mxeval's compile_timeout
STARTUP_SLACK_S = 1.0       # namespaces + interpreter start, on top of mxeval's timeout + 1
OUTSIDE_SLACK_S = 10.0      # the outside judge's calls cross a pipe: more time than mxeval's, never less
REQUIRED_COLUMNS = ("id", "gt_output")
DETAIL = 500  # characters of the failure message kept per row
# mxeval's commands: language -> (file, [(argv, is a compile step, accepted exit statuses)])
MXEVAL_STEPS = {
    "cpp": ("x.cpp", [(["g++", "x.cpp", "-o", "x_cpp"], True, (0,)), (["./x_cpp"], False, (0,))]),
    # mxeval counts tsc as compiled only when it exits 2 ("emitted, with diagnostics")
    "typescript": ("x.ts", [(["tsc", "x.ts", "--target", "es5", "--lib", "es2016"], True, (2,)),
                            (["node", "x.js"], False, (0,))]),
    "javascript": ("x.js", [(["node", "x.js"], False, (0,))]),
    "php": ("x.php", [(["php", "x.php"], False, (0,))]),
    "ruby": ("x.rb", [(["ruby", "x.rb"], False, (0,))]),
}

def postprocess(response: str, language: str) -> str:
    """evaluate_mbxp.py's treatment of the decoded text, before execution."""
    solution = response
    if "```" in solution:
        solution = solution[: solution.index("```")]
    if language == "python":
        solution = solution.lstrip()
    # go and scala have their own post-processing there, but are never evaluated
    return solution.replace("\\_", "_")


def _node_has(module: str) -> bool:
    return any(os.path.isdir(os.path.join(d, module)) for d in sandbox.node_path().split(":") if d)


def build_job(language: str, solution: str, test: str, entry_point: str, timeout_s: float,
              nonce: str) -> sandbox.Job | str:
    """The sandbox job mxeval would run for this row, or why it cannot be scored here. Python: the
    in-process judge, whose verdict line must carry `nonce`."""
    run_s = float(int(timeout_s))  # subprocess.run(timeout=int(timeout))
    if language == "python":
        py = sandbox.python_interpreter()
        if py is None:
            return ("python: no python3 that the sandbox's uid can run; "
                    "set PERFDAG_SANDBOX_PYTHON")
        program = solution + "\n" + test + "\n" + f"check({entry_point})"
        step = sandbox.Step([py, "-I", "runner.py", repr(timeout_s)],
                            timeout_s + 1 + STARTUP_SLACK_S, channel=True)
        return sandbox.Job([step], {"runner.py": IN_PROCESS, "program.py": program},
                           [py], language, secret=nonce)
    if language not in MXEVAL_STEPS:
        raise ValueError(f"mbxp: no runner for language {language!r}")
    file, plan = MXEVAL_STEPS[language]
    program = solution + test
    steps = [(argv, COMPILE_TIMEOUT_S if compile_ else run_s, ok) for argv, compile_, ok in plan]
    tools = [argv[0] for argv, _, _ in steps if not argv[0].startswith("./")]
    missing = [t for t in tools if sandbox.resolve_tool(t) is None]
    if missing:
        return (f"{language}: toolchain missing: {', '.join(missing)} not found on "
                f"{sandbox.SANDBOX_PATH}")
    env = {}
    if "node" in tools:
        env["NODE_PATH"] = sandbox.node_path()
        if "lodash" in program and not _node_has("lodash"):
            return (f"{language}: node module 'lodash' (required by MBXP's tests) not found; "
                    f"install it and name its node_modules in PERFDAG_SANDBOX_NODE_PATH")
    job_steps = [sandbox.Step([sandbox.resolve_tool(a[0]), *a[1:]], t, ok) for a, t, ok in steps]
    return sandbox.Job(job_steps, {file: program}, tools, language, env=env)


def outside_job(solution: str, test: str, entry_point: str, timeout_s: float) -> sandbox.Job:
    """The second judge of a Python row: the test run in a process the program cannot write to
    (mbxp_runner.JUDGE), the solution in a process of its own; everything on the judge's stdin, which
    the program cannot reach."""
    py = sandbox.python_interpreter()
    payload = {"solution": solution, "test": test, "entry_point": entry_point,
               "timeout": timeout_s + OUTSIDE_SLACK_S, "server": SERVER}
    step = sandbox.Step([py, "-I", "-S", "-c", JUDGE], timeout_s + OUTSIDE_SLACK_S + 1 + STARTUP_SLACK_S,
                        stdin=json.dumps(payload), channel=True)
    return sandbox.Job([step], {}, [py], "python")


def _check_rows(rows, generated_texts) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"mbxp: dataset rows lack column(s) {missing}; MLPerf's mixtral dataset "
                         f"has 'id' (\"<language>_<entry point>\") and 'gt_output' (the tests)")
    if len(rows) != len(generated_texts):
        raise ValueError(f"mbxp: {len(rows)} MBXP rows but {len(generated_texts)} generated texts; "
                         f"pass one decoded output per row, in the rows' order")
    for i, rid in enumerate(rows["id"]):
        if not isinstance(rid, str) or "_" not in rid:
            raise ValueError(f"mbxp: row {i}: id {rid!r} is not \"<language>_<entry point>\"")


def score_mbxp(rows: "pandas.DataFrame", generated_texts: list[str], *, workers: int = 2,
               timeout_s: float = MLCOMMONS_TIMEOUT_S, allow_network: bool = False,
               results_dir=None) -> dict:
    """MBXP pass@1 (percent, unrounded, as MLCommons) and one record per row."""
    _check_rows(rows, generated_texts)
    per_row, jobs, job_rows = [], [], []
    for rid, test, text in zip(rows["id"], rows["gt_output"], generated_texts):
        language, entry_point = rid.split("_", 1)
        record = {"id": rid, "language": language, "status": "", "detail": ""}
        per_row.append(record)
        if language not in MLCOMMONS_LANGUAGES:
            record.update(status="skipped", detail="MLCommons' evaluate_mbxp.py does not evaluate "
                                                   f"{language}; left out of the denominator")
            continue
        if not isinstance(test, str) or not isinstance(text, str):
            # MLCommons fails such a row too: prompt + solution + test raises a TypeError
            record.update(status="failed", detail="gt_output or generated text is not text")
            continue
        solution = postprocess(text, language)
        if found := reach.reaches(language, solution, test):
            record["reaches"] = found
        nonce = sandbox.new_nonce()
        job = build_job(language, solution, test, entry_point, timeout_s, nonce)
        if isinstance(job, str):
            record.update(status="not_scored", detail=job)
            continue
        jobs.append(job)
        job_rows.append((record, nonce, (solution, test, entry_point)))
    results = sandbox.run_many(jobs, workers=workers, allow_network=allow_network) if jobs else []
    for (record, nonce, _), res in zip(job_rows, results):
        record.update(_row_outcome(record["language"], res, nonce))
    # Python rows that passed in their own process: the same test again, judged outside it
    second = [(record, how) for record, _, how in job_rows if record["language"] == "python" and record["status"] == "passed"]
    outside = [outside_job(*how, timeout_s) for _, how in second]
    for (record, _), res in zip(second, sandbox.run_many(outside, workers=workers, allow_network=allow_network)
                                if outside else []):
        record.update(_second_opinion(res))
    return _summary(per_row, results_dir)


def _row_outcome(language: str, res: sandbox.RunResult, nonce: str) -> dict:
    if res.status == "not_scored":
        return {"status": "not_scored", "detail": res.detail}
    if language == "python" and res.status == "passed":
        return _in_process_verdict(res.verdict, nonce)
    if res.status == "passed":
        return {"status": "passed", "detail": ""}
    stage = "compile" if len(MXEVAL_STEPS.get(language, ("", []))[1]) > 1 and res.step == 0 else "run"
    message = (res.stderr.strip() or res.stdout.strip())[-DETAIL:]
    return {"status": res.status, "detail": f"{stage}: {res.detail}: {message}".strip(": ")}


def _in_process_verdict(channel: str, nonce: str) -> dict:
    """The in-process runner's verdict: exactly one line `<nonce> <result>` on its channel, or the row fails."""
    if channel == "":
        return {"status": "failed", "detail": "the program ended before its tests finished"}
    lines = channel.split("\n")
    if not (len(lines) == 2 and lines[1] == "" and lines[0].startswith(nonce + " ")):
        return {"status": "failed", "detail": "the verdict channel holds what the runner did not write "
                                              f"({len(lines) - 1} line(s)): {channel[:DETAIL]!r}"}
    said = lines[0][len(nonce) + 1:]
    if said == "passed":
        return {"status": "passed", "detail": ""}
    return {"status": "timeout" if said == "timed out" else "failed", "detail": said[:DETAIL]}


def _second_opinion(res: sandbox.RunResult) -> dict:
    """A Python row that passed in its own process, after the judge outside it: still passed (the judge
    agrees, or cannot run this test: `outside` says why), or failed with both verdicts."""
    said = res.verdict[:-1] if res.status == "passed" and res.verdict.count("\n") == 1 and res.verdict.endswith("\n") \
        else f"no verdict: the judge's job {res.status}: {res.detail}".strip(": ")
    if said == "passed" or said.startswith("unknown: "):
        return {"outside": said}
    return {"status": "failed", "outside": said[:DETAIL],
            "detail": f"passed in the program's own process, but not in a process it cannot write to: {said}"[:DETAIL]}


def _disputed(record: dict) -> bool:
    said = record.get("outside")
    return said is not None and said != "passed" and not said.startswith("unknown: ")


def _summary(per_row: list[dict], results_dir) -> dict:
    evaluated = [r for r in per_row if r["status"] != "skipped"]
    passed = sum(r["status"] == "passed" for r in evaluated)
    not_scored = [r for r in evaluated if r["status"] == "not_scored"]
    if not per_row:
        mbxp = 0  # evaluate-accuracy.py: no MBXP result at all gives 0
    elif not evaluated:
        raise ValueError("mbxp: no MBXP row in a language MLCommons evaluates "
                         f"({', '.join(MLCOMMONS_LANGUAGES)}); its script divides by zero here")
    else:
        mbxp = 100 * passed / len(evaluated)
    out = {"mbxp": mbxp, "scored": len(evaluated) - len(not_scored), "passed": passed,
           "not_scored": len(not_scored),
           "not_scored_languages": sorted({r["language"] for r in not_scored}),
           "skipped": len(per_row) - len(evaluated), "complete": not not_scored,
           "disputed": sum(_disputed(r) for r in evaluated),
           "in_process_only": [r["id"] for r in evaluated
                               if r["status"] == "passed" and r.get("outside", "").startswith("unknown")],
           "flagged": [r["id"] for r in evaluated if r["status"] == "passed" and r.get("reaches")],
           "per_row": per_row}
    if results_dir is not None:
        path = Path(results_dir)
        path.mkdir(parents=True, exist_ok=True)
        (path / "mbxp_results.json").write_text(json.dumps(out, indent=1))
    return out
