"""`python -m pipeline history`: every observation of one FullRun, PerformanceRun, Bench or RunSessions configuration, newest first, with
its headline numbers (no luigi). An observation that is not what was published is listed as refused."""
from __future__ import annotations

import csv
import io
import json

from harness.cache.store import finished_at
from harness.loadgen.verdict import is_valid
from harness.reports.sweep import fmt, whose

COLUMNS = ("observation", "finished", "scenario", "result", "tokens/s", "samples/s", "TTFT p99", "TPOT p99",
           "accuracy", "host")


def observed(store, stage: str, key: str):
    """Each observation of `stage` `key`, newest first, as (obs, why it is refused or None, its report or None)."""
    for obs in store.observations(stage, key):
        problems = store.observation_problems(stage, key, obs)
        report = None if problems else json.loads((obs["dir"] / "report.json").read_text())
        yield obs, (problems[0] if problems else None), report


def history(store, key: str, stage: str = "FullRun") -> list[dict]:
    """One row per observation of `stage` (FullRun, PerformanceRun, Bench or RunSessions) `key`: its id, when, whether it is the latest (what reuse
    takes), its headline numbers, and `refused` (why it is not trusted; None: it is)."""
    rows = []
    for obs, refused, report in observed(store, stage, key):
        row = {"observation": obs["id"], "latest": obs["latest"], "dir": str(obs["dir"]),
               "finished_at": finished_at(obs["manifest"]) or None, "refused": refused}
        if report is not None:
            p, a = report.get("performance") or {}, report.get("accuracy") or {}
            row.update(scenario=p.get("scenario"), valid=is_valid(p), tokens_per_s=p.get("tokens_per_second"),
                       samples_per_s=p.get("samples_per_second"), ttft_p99_ms=(p.get("ttft_ms") or {}).get("p99"),
                       tpot_p99_ms=(p.get("tpot_ms") or {}).get("p99"), accuracy=a.get("passed"),
                       measured=report.get("observations") or {},
                       sources={k: (p.get("sources") or {}).get(k) or "LoadGen" for k in ("ttft_ms", "tpot_ms")},
                       host_busy=(report.get("host") or {}).get("busy"))
        rows.append(row)
    return rows


def render(key: str, rows: list[dict], stage: str = "FullRun") -> str:
    if not rows:
        return f"{stage} {key[:16]}: no observations"
    table = [list(COLUMNS)]
    read = [r for r in rows if not r["refused"]]
    for i, metric in ((6, "ttft_ms"), (7, "tpot_ms")):  # whose TTFT and TPOT (LoadGen's, or the client's)
        table[0][i] += f" ({whose(read, metric)})" if read else ""
    for r in rows:
        name = r["observation"] + (" *" if r["latest"] else "")
        when = (r["finished_at"] or "")[:19].replace("T", " ")
        if r["refused"]:
            table.append([name, when, f"refused: {r['refused']}"])
            continue
        table.append([name, when, r["scenario"] or "-", "VALID" if r["valid"] else "INVALID", fmt(r["tokens_per_s"]),
                      fmt(r["samples_per_s"]), fmt(r["ttft_p99_ms"]), fmt(r["tpot_p99_ms"]),
                      "-" if r["accuracy"] is None else "PASS" if r["accuracy"] else "FAIL",
                      {True: "busy", False: "quiet"}.get(r.get("host_busy"), "-")])
    widths = [max(len(t[i]) for t in table if len(t) > i and len(t) == len(COLUMNS)) for i in range(len(COLUMNS))]
    lines = [f"{stage} {key[:16]}: {len(rows)} observation(s), newest first (* the latest: what reuse takes; "
             f"compare names one as {key[:8]}@OBSERVATION)"]
    for t in table:
        lines.append("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip() if len(t) == len(COLUMNS)
                     else "  ".join([t[0].ljust(widths[0]), t[1].ljust(widths[1]), t[2]]))
    return "\n".join(lines)


def flat(report: dict) -> dict:
    """Every summary metric of a report, one column each: performance's numbers and strings (a percentile
    table as `ttft_ms.p99`), accuracy's scores, and the host's state (`host.busy`, `host.load_before`, ...)."""
    out = {}
    for section in ("performance", "accuracy", "host"):
        for name, value in (report.get(section) or {}).items():
            col = name if section == "performance" else f"{section}.{name}"
            if isinstance(value, (int, float, str, bool)) or value is None:
                out[col] = value
            elif isinstance(value, dict):
                out.update({f"{col}.{k}": v for k, v in value.items() if isinstance(v, (int, float, str, bool))})
            elif isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
                out[col] = value[0]  # a load average: the 1-minute figure
    return out


def rows_of_root(store, keys: list[tuple[str, str]]) -> list[dict]:
    """One row per observation of each (stage, key), its identity first, then `flat` of its report;
    a refused observation keeps only its identity and why."""
    rows = []
    for stage, key in keys:
        for obs, refused, report in observed(store, stage, key):
            row = {"stage": stage, "key": key, "observation": obs["id"], "latest": obs["latest"],
                   "finished_at": finished_at(obs["manifest"]) or None, "run_id": (obs["manifest"] or {}).get("run_id"),
                   "refused": refused}
            rows.append({**row, **flat(report or {})})
    rows.sort(key=lambda r: r["finished_at"] or "", reverse=True)
    return rows


def to_csv(rows: list[dict]) -> str:
    """The rows as CSV, columns in first-seen order (identity first); a cell a row lacks is empty."""
    columns = list(dict.fromkeys(c for r in rows for c in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()
