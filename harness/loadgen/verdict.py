"""A run's verdict, defined once: LoadGen's own, failed by any error LoadGen logged; and the record
of a server relaunched mid-measurement. Every consumer of validity (FullRun's report and exit code,
Sweep tables, Nightly, submission, compare) reads it through `is_valid`.

Why errors fail a run: MLCommons' submission checker (mlcommons/inference,
tools/submission/submission_checker/) rejects a log holding any LoadGen error, i.e. an MLLOG entry
whose metadata says `is_error` (`error_runtime`, `error_invalid_config`, ...): it prints each one and
"<log> has loadgen errors, number of errors: N" (checks/accuracy_check.py and, up to #2542 of
Feb 2026, checks/performance_check.py `loadgen_errors_check`; submission_checker_old.py
`check_performance_dir`). Only with --submission-exceptions does it forgive "Loadgen built with
uncommitted changes!" (and, in a performance log since #2542, "Multiple conf files are used" where no
compliance test is required). Since #2542 its performance check fails errors only under that flag,
which reads as an inversion; perfdag applies the rule every other version and the accuracy check
apply: any LoadGen error makes the run INVALID, whatever LoadGen's own "Result is" says. (perfdag's
LoadGen reads one user.conf per process and its wheel logs no uncommitted-changes error, so neither
exception arises.)
"""
from __future__ import annotations

import collections
import json
import re
from pathlib import Path

#: How many of a run's errors result.json, the summary and report.md quote (in log order).
FIRST_ERRORS = 5
#: LoadGen's words for a completion of fewer than 2 tokens (use_token_latencies: TPOT divides by n - 1).
TOKEN_COUNT_ERRORS = ("n_tokens argument missing", "Number of tokens need to be greater than 1")
_MAYBE_ERROR = re.compile(r'"is_error"\s*:\s*true')


def read_errors(detail_log: Path, summary: str = "") -> dict:
    """LoadGen's errors in mlperf_log_detail.txt, counted as the checker counts them (every entry whose
    metadata says is_error): {count, first: the first FIRST_ERRORS as 'key: value', kinds: the first
    FIRST_ERRORS distinct lines, in log order, with their counts}. Without a detail log, the count
    from the summary's "N ERRORS encountered"."""
    lines: list[str] = []
    if detail_log.is_file():
        with open(detail_log, errors="replace") as f:
            for raw in f:
                if not _MAYBE_ERROR.search(raw):  # cheap pre-filter; the JSON decides
                    continue
                i = raw.find(":::MLLOG")
                try:
                    obj = json.loads(raw[i + len(":::MLLOG"):]) if i >= 0 else {}
                except json.JSONDecodeError:
                    continue
                if (obj.get("metadata") or {}).get("is_error") is True:
                    lines.append(f"{obj.get('key')}: {' '.join(str(obj.get('value')).split())}")
        count = len(lines)
    else:
        m = re.search(r"(\d+) ERRORS encountered", summary)
        count = int(m.group(1)) if m else 0
    kinds = collections.Counter(lines)  # keeps the order lines were first seen
    return {"count": count, "first": lines[:FIRST_ERRORS], "kinds": dict(list(kinds.items())[:FIRST_ERRORS])}


def errors_reason(errors: dict | None, num_errors: int | None = None) -> str | None:
    """Why errors make a run INVALID, in one line: the count, each kind of error with its count, and
    the fix where perfdag knows it. None where LoadGen logged none."""
    errors = errors or {}
    count = errors.get("count") or num_errors or 0
    if not count:
        return None
    kinds = errors.get("kinds") or {}
    said = "; ".join(f"{k} (x{n})" for k, n in kinds.items()) or "see mlperf_log_detail.txt"
    text = f"LoadGen logged {count} error(s): {said}"
    if any(w in k for k in kinds for w in TOKEN_COUNT_ERRORS):
        text += " (responses under 2 tokens are padded with the end token only where the dataset names one: set its end_id)"
    return text


def run_validity(loadgen_validity: str | None, errors: dict) -> str | None:
    """result.json's `valid`: LoadGen's verdict (None in accuracy runs), INVALID where it logged an error."""
    return "INVALID" if errors.get("count") else loadgen_validity


def error_count(result: dict) -> int:
    return int((result.get("loadgen_errors") or {}).get("count") or result.get("num_errors") or 0)


def is_valid(result: dict) -> bool:
    """Whether a run is VALID: LoadGen said so and logged no error. `result`: result.json's content
    (valid "VALID"/"INVALID") or a report's performance part (valid True/False), old ones included
    (a result.json from before this rule, VALID with num_errors > 0, is INVALID here)."""
    return result.get("valid") in ("VALID", True) and not error_count(result)


def invalid_reason(result: dict) -> str | None:
    """The reasons a run is INVALID, errors first (None for a VALID run)."""
    if is_valid(result):
        return None
    said = result.get("invalid_reason")
    if error_count(result) and not (said or "").startswith("LoadGen logged"):
        said = "; ".join(x for x in (errors_reason(result.get("loadgen_errors"), result.get("num_errors")), said) if x)
    return said or "LoadGen reported INVALID without a reason"


# --- the answers themselves -----------------------------------------------------------------------

#: Most answers empty: a server that returns nothing measures fast, and LoadGen sees 2 end tokens each.
EMPTY_SHARE = 0.5
#: The server's finish reasons contradict the token counts when more requests than this share (or 1)
#: disagree on reaching the output limit (re-tokenized text may miss the limit by a token now and then).
FINISH_DISAGREEMENT = 0.05


def answer_warnings(measured: dict | None) -> list[str]:
    """What is wrong with the answers a run measured, though LoadGen may call it VALID: most of them
    empty, or the server's own finish reasons contradicting the token counts against the output limit
    (result.json's `measured`: requests, empty, finish)."""
    m = measured or {}
    n = int(m.get("requests") or 0)
    out = []
    empty = int(m.get("empty") or 0)
    if n and empty / n > EMPTY_SHARE:
        out.append(f"{empty:,} of {n:,} answers ({empty / n:.0%}) were empty (no token; LoadGen was told 2 end tokens "
                   "each): the throughput is of a server that returned nothing")
    finish = m.get("finish") or {}
    server = finish.get("server")
    if n and isinstance(server, dict) and server:
        said_length = int(server.get("length") or 0)
        counted = int(finish.get("length") or 0)
        if abs(said_length - counted) > max(1, FINISH_DISAGREEMENT * n):
            said = ", ".join(f"{k} {v:,}" for k, v in sorted(server.items()))
            out.append(f"the server's finish reasons ({said}) contradict the token counts: {counted:,} of {n:,} "
                       f"answers reached their output limit, the server said {said_length:,} did; the counts (or "
                       "the limit it applied) are not what perfdag asked for")
    return out


# --- relaunches ------------------------------------------------------------------------------------

def relaunch_entry(at: str, attempt: int, servers: list[str], error: str, kept: str | None) -> dict:
    """One relaunch: when (UTC, ISO), which attempt crashed, why (the gone_servers lines), the
    measurement's error, and where the crashed attempt's files are."""
    return {"at": at, "attempt": attempt, "why": "; ".join(servers), "servers": servers,
            "error": error, "kept": kept}


def record_relaunches(out_dir: Path, doc: dict, relaunches: list[dict], attempt: int) -> None:
    """Writes the relaunches and the measured attempt into the run's result.json (where the stage wrote
    one) and into its output document `doc` (its `result` where it has one)."""
    fields = {"relaunches": relaunches, "measured_attempt": attempt}
    path = Path(out_dir) / "result.json"
    if path.is_file():
        result = json.loads(path.read_text())
        result.update(fields)
        path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (doc["result"] if isinstance(doc.get("result"), dict) else doc).update(fields)


def relaunch_lines(result: dict) -> list[str]:
    """One line per relaunch, for the summary and report.md (none where there was none)."""
    out = []
    for r in result.get("relaunches") or ():
        out.append(f"{r.get('why') or 'a server was gone'} at {r.get('at', '?')} during attempt {r.get('attempt', '?')}"
                   f"; relaunched and measured again from the start (measured: attempt "
                   f"{result.get('measured_attempt', '?')}; the crashed attempt's files: {r.get('kept') or 'not kept'})")
    return out
