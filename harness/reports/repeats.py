"""--repeat's summary (no luigi): one configuration measured several times in a run, each observation
and the spread of what its scenario is judged by (Nightly's metrics), and when to stop repeating.
Terminal output only: nothing here shapes an artifact."""
from __future__ import annotations

import harness.host.state as host_state
from harness.loadgen.verdict import is_valid
from harness.reports.nightly import metrics as judged_by
from harness.reports.report import source
from harness.reports.sweep import fmt, row
from harness.stats import noise


def judged_values(reports: list[dict]) -> dict[str, list]:
    """What the reports' scenario is judged by (Nightly's metrics: Offline tokens/s, Server and
    Interactive TTFT and TPOT p99 and goodput, SingleStream p90 latency), each repeat's value, labelled
    with whose number it is."""
    rows = [row({}, {**r, "stages": {"FullRun": "", **(r.get("stages") or {})}}) for r in reports]
    scenario = rows[0]["scenario"] if rows else None
    out = {}
    for m in judged_by():
        if scenario in m.scenarios and not m.of_search:
            values = [r.get(m.key) for r in rows]
            if noise.finite(values):
                key = {"ttft_p99_ms": "ttft_ms", "tpot_p99_ms": "tpot_ms"}.get(m.key)
                whose = f" ({source(reports[0]['performance'], key)})" if key else ""
                out[m.label + whose] = values
    return out


def converged(reports: list[dict], width: float) -> bool:
    """Whether every judged number's median is known within +-`width` at 95% (noise.converged)."""
    values = judged_values(reports)
    return bool(values) and all(noise.converged(v, width) for v in values.values())


REPEAT_COLUMNS = ["repeat", "observation", "result", "tokens/s", "TTFT p99", "accuracy", "host"]


def repeats_text(stage: str, key: str, reports: list[dict], asked: int) -> str:
    """--repeat's summary: each observation of this run, then what the scenario is judged by as
    median [interval of the median] with its confidence, and how sure each is."""
    rows = []
    for i, r in enumerate(reports, 1):
        p, a, h = r["performance"], r["accuracy"], r.get(host_state.KEY) or {}
        said = r.get("observations") or {}  # FullRun or Bench; a Bench report before 2026-12 named its own FullRun
        rows.append([str(i), str(said.get(stage) or said.get("FullRun") or "-"), "VALID" if is_valid(p) else "INVALID",
                     fmt(p["tokens_per_second"]), fmt(p["ttft_ms"].get("p99")),
                     "-" if a is None else "PASS" if a["passed"] else "FAIL",
                     "-" if not h else "busy" if h.get("busy") else "quiet"])
    widths = [max(len(x[c]) for x in rows + [REPEAT_COLUMNS]) for c in range(len(REPEAT_COLUMNS))]
    stopped = "" if len(reports) == asked else f" (of --repeat {asked}: converged)"
    lines = [f"\nperfdag {stage} {key[:16]}: {len(reports)} observations in this run{stopped} "
             f"(`python -m pipeline history {key[:16]}` lists every one)"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in [REPEAT_COLUMNS] + rows]
    spreads = {label: noise.spread(v) for label, v in judged_values(reports).items()}
    if any(s is not None and s.confidence is not None for s in spreads.values()):
        conf = next(s.confidence for s in spreads.values() if s is not None and s.confidence is not None)
        lines.append(f"  judged by, median [interval of the median, {conf:.0%} confidence] over "
                     f"{len(reports)} repeats:")
        width = max(len(label) for label in spreads)
        for label, sp in spreads.items():
            hw = sp.half_width if sp else None
            lines.append(f"    {label.ljust(width)}  {noise.fmt_spread(sp, fmt)}"
                         + ("" if hw is None else f"  (+-{hw:.1%})"))
        busy = sum(bool((r.get(host_state.KEY) or {}).get("busy")) for r in reports)
        if busy:
            lines.append(f"  WARNING    {busy} of {len(reports)} repeats ran on a busy host: their spread is partly "
                         "its other work")
    return "\n".join(lines) + "\n"
