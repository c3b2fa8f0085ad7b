"""FullRun's report: report.json, report.md and PNG plots from the performance and accuracy runs."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import harness.host.state as host_state
from harness.loadgen.goodput import goodput_line
from harness.loadgen.verdict import answer_warnings, invalid_reason, is_valid, relaunch_lines
import harness.serving.server_metrics as server_metrics
import harness.reports.windows as windows

PCTS = ("p50", "p90", "p99")


def _pcts(d: dict | None) -> dict:
    d = d or {}
    return {p: d.get(p) for p in PCTS}


def build_report(stage_keys: dict[str, str], perf: dict, accuracy: dict | None, model_name: str) -> dict:
    """The report of a measurement and, unless `accuracy` is None (`pipeline bench`: a performance run
    only), its accuracy check."""
    from harness.loadgen.results import sources  # numpy: a cached run's summary builds no report

    return {
        "model": model_name,
        "stages": stage_keys,
        "performance": {
            # The run's verdict (harness/loadgen/verdict.py: LoadGen's, failed by any LoadGen error) as a
            # boolean; LoadGen's own word and its errors beside it.
            "scenario": perf["scenario"], "valid": is_valid(perf), "invalid_reason": invalid_reason(perf),
            "loadgen_valid": perf.get("loadgen_valid", perf.get("valid")),
            "loadgen_errors": perf.get("loadgen_errors") or {"count": perf.get("num_errors") or 0, "first": []},
            # servers that crashed mid-measurement and were relaunched (tasks/measuring.py)
            "relaunches": perf.get("relaunches") or [], "measured_attempt": perf.get("measured_attempt"),
            "samples_per_second": perf["samples_per_s"], "tokens_per_second": perf["tokens_per_s"],
            "ttft_ms": _pcts(perf.get("ttft_ms")), "tpot_ms": _pcts(perf.get("tpot_ms")),
            "latency_ms": _pcts(perf.get("latency_ms")), "early_stopping": perf.get("early_stopping"),
            # whose each of those is: LoadGen's, or the client's where LoadGen measured none (results.sources)
            "sources": sources(perf),
            # the share of requests that met the latency limits, and the throughput they make up
            "goodput": perf.get("goodput"),
            # SingleStream's metric: the p90 latency and LoadGen's early-stopping estimate (None elsewhere)
            "single_stream": perf.get("single_stream"),
            # MLPerf's p99 limits this run was held to (Server / Interactive; None for Offline)
            "ttft_limit_ms": perf.get("ttft_constraint_ms"), "tpot_limit_ms": perf.get("tpot_constraint_ms"),
            "target_qps": perf.get("target_qps"),  # LoadGen's effective target (Server / Interactive)
            # whether the client, not the server, may have set the pace; the in-flight limit and peak
            "client_bound": perf.get("client_bound"), "client_bound_reason": perf.get("client_bound_reason"),
            "max_in_flight": (perf.get("harness") or {}).get("max_in_flight"),
            "peak_in_flight": (perf.get("harness") or {}).get("peak_in_flight"),
            # streamed runs, client-side (harness/loadgen/chunks.py): per-token ITL, the gaps between
            # chunks, and how many tokens a chunk carried; p1 .. p99.9
            **{k: (perf.get("measured") or {}).get(k) for k in ("itl_ms", "chunk_gap_ms", "tokens_per_chunk")},
            # MLPerf's early-stopping estimate of each percentile, over the client's own timings
            # (harness/loadgen/early_stopping.py); None where the run had too few queries for it
            "early_stopping_estimates": (perf.get("measured") or {}).get("early_stopping"),
            # why requests ended: "stop" before their output limit, "length" at it (from token counts; the
            # server's own finish reasons beside them, where it says them), and how many answers were empty
            "finish_reasons": (perf.get("measured") or {}).get("finish"),
            "empty_answers": (perf.get("measured") or {}).get("empty"),
            # mostly empty answers, or finish reasons that contradict the server's (harness/loadgen/verdict.py)
            "answer_warnings": answer_warnings(perf.get("measured")),
            # the serving layout (serving/layout.py layout_summary): each role's instances and nodes
            "layout": perf.get("layout"),
        },
        "accuracy": None if accuracy is None else _accuracy(accuracy),
        # the host during the measurement: load, CPU of the client, the servers and other work (harness/host)
        host_state.KEY: perf.get(host_state.KEY),
        # the servers' own metrics over the timed run, each figure theirs (harness/serving/server_metrics.py)
        server_metrics.KEY: perf.get(server_metrics.KEY),
    }


def _accuracy(accuracy: dict) -> dict:
    """The benchmark's required metrics (its gates), under MLCommons' names, plus tokens/sample."""
    s = accuracy["scores"]
    return {**{m: s.get(m) for m in _required(accuracy)},
            "tokens_per_sample": s.get("tokens_per_sample"), "target": accuracy["target"],
            "benchmark": accuracy.get("benchmark", "llama2-70b"), "metrics": _required(accuracy),
            "reference": accuracy["reference_scores"], "passed": accuracy["passed"], "why": accuracy.get("why")}


def accuracy_passed(report: dict) -> bool:
    """The accuracy verdict; a performance-only report (no accuracy run) fails nothing."""
    return report["accuracy"] is None or bool(report["accuracy"]["passed"])


def source(p: dict, key: str) -> str:
    """Whose number a report's `key` percentiles are ("LoadGen" or "client"): its `sources`; a report
    written before they were recorded had LoadGen's only."""
    return (p.get("sources") or {}).get(key) or "LoadGen"


def _verdict(report: dict) -> str:
    a = report["accuracy"]
    return "performance only (no accuracy run)" if a is None else f"accuracy **{'PASS' if a['passed'] else 'FAIL'}**"


def _required(accuracy: dict) -> list[str]:
    return list(accuracy.get("required") or ("rouge1", "rouge2", "rougeL", "tokens_per_sample"))


#: How the summary names a metric (MLCommons' name otherwise).
_LABELS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "rougeLsum": "ROUGE-Lsum",
           "tokens_per_sample": "tokens/sample", "exact_match": "exact match", "gen_len": "gen_len"}


def _accuracy_line(a: dict) -> str:
    parts = []
    for m in a.get("metrics") or ("rouge1", "rouge2", "rougeL", "tokens_per_sample"):
        v = a.get(m)
        spec = ".1f" if m == "tokens_per_sample" else (".0f" if m == "gen_len" else ".2f")
        parts.append(f"{_LABELS.get(m, m)} {'missing' if v is None else format(v, spec)}")
    return "  ".join(parts)


def _fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def _errors(p: dict) -> tuple[int, list[str]]:
    """LoadGen's error count and its first error lines, each distinct line once with its count."""
    e = p.get("loadgen_errors") or {}
    kinds = e.get("kinds") or {}
    lines = [f"{k} (x{n})" for k, n in kinds.items()] if kinds else list(e.get("first") or [])
    return int(e.get("count") or 0), lines


def layout_markdown(layout: dict | None) -> list[str]:
    """The serving layout: one row per role, its instances' nodes and addresses, and where clients went."""
    if not layout:
        return []
    lines = ["", f"## Serving layout ({layout['kind']}, {len(layout['nodes'])} node(s))", "",
             "| role | instances | nodes | clients sent to |", "|---|---|---|---|"]
    for role, insts in layout["roles"].items():
        door = [i["url"] for i in insts if i["clients"]]
        lines.append(f"| {role} | {len(insts)} | {', '.join(sorted({i['node'] for i in insts}))} | "
                     f"{', '.join(door) or '-'} |")
    timings = layout.get("timings") or {}
    if timings:  # as the stack's own /metrics report them (serving/role_timings.py)
        lines += ["", "Per-role timings, from each instance's own metrics over the measurement:", "",
                  "| role | what | mean ms | requests |", "|---|---|---|---|"]
        for role, whats in timings.items():
            for what, t in whats.items():
                mean = t.get("mean_ms", t.get("last_ms"))
                lines.append(f"| {role} | {what}{'' if 'mean_ms' in t else ' (last)'} | {mean:.3f} | "
                             f"{t.get('count', '-')} |")
    return lines


def render_markdown(report: dict, plots: list[str]) -> str:
    from harness.reports.plots import stats_markdown  # numpy: a cached run's summary never renders

    p, a = report["performance"], report["accuracy"]
    n_err, first = _errors(p)
    lines = [f"# perfdag report: {report['model']}", "",
             f"**{p['scenario']}**: {'VALID' if p['valid'] else 'INVALID'}"
             + (f" ({p['invalid_reason']})" if p.get("invalid_reason") else "")
             + f"; {_verdict(report)}", ""]
    if n_err:
        lines += [f"> **LoadGen logged {n_err} error(s)** (mlperf_log_detail.txt), so the run is INVALID whatever "
                  f"LoadGen's own verdict ({p.get('loadgen_valid') or '-'}); the first:", ">"]
        lines += [f"> - `{x}`" for x in first] + [""]
    for line in relaunch_lines(p):
        lines += [f"> **Server relaunched mid-measurement**: {line}", ""]
    lines += ["| metric | value |", "|---|---|",
             f"| samples/s | {_fmt(p['samples_per_second'], '.2f')} |",
             f"| tokens/s | {_fmt(p['tokens_per_second'], '.1f')} |",
             f"| goodput | {goodput_line(p.get('goodput'))} |",
             f"| in flight: limit / peak | {_fmt(p.get('max_in_flight'), 'd')} / {_fmt(p.get('peak_in_flight'), 'd')} |"]
    if p.get("client_bound"):
        lines[2:2] = [f"> **Warning: the client may have been the bottleneck**: {p['client_bound_reason']}", ""]
    for w in p.get("answer_warnings") or ():
        lines[2:2] = [f"> **Warning: the answers**: {w}", ""]
    if (report.get(host_state.KEY) or {}).get("busy"):
        lines[2:2] = [f"> **Warning: measured on a busy host**: {'; '.join(report[host_state.KEY]['busy_reasons'])}", ""]
    for name in ("ttft_ms", "tpot_ms", "latency_ms"):  # LoadGen's percentiles, or the client's where it has none
        lines.append(f"| {name} p50 / p90 / p99 ({source(p, name)}) | "
                     + " / ".join(_fmt(p[name][q], ".2f") for q in PCTS) + " |")
    if ss := p.get("single_stream"):
        lines.append(f"| SingleStream: p90 latency ms (its metric) / early-stopping estimate (of first tokens) | "
                     f"{_fmt(ss['p90_latency_ms'], '.2f')} / {_fmt(ss['early_stopping_latency_ms'], '.2f')} |")
    lines += _itl_rows(p)
    lines += _early_stopping_rows(p.get("early_stopping_estimates") or {})
    if f := p.get("finish_reasons"):
        total = max(1, f["stop"] + f["length"])
        lines.append(f"| finished: stop / length (at the output limit; from token counts) | {f['stop']:,} "
                     f"({f['stop'] / total:.0%}) / {f['length']:,} ({f['length'] / total:.0%}) |")
        if f.get("server"):
            lines.append("| finished, as the server said (its finish_reason) | "
                         + ", ".join(f"{k} {v:,}" for k, v in sorted(f["server"].items())) + " |")
    if p.get("empty_answers") is not None:
        lines.append(f"| empty answers (no token) | {p['empty_answers']:,} |")
    if a is not None:
        lines += _accuracy_table(a)

    lines += layout_markdown(p.get("layout"))
    lines += host_state.markdown(report.get(host_state.KEY))
    lines += server_metrics.markdown(report.get(server_metrics.KEY), report.get(host_state.KEY))
    lines += windows.markdown(p.get("time_slices"))
    lines += stats_markdown(report.get("client_stats") or {}, report.get("client_vs_loadgen") or {}, p.get("sources"))
    lines += ["", "## Stages", "", "| stage | key |", "|---|---|"]
    lines += [f"| {k} | `{v[:16]}` |" for k, v in report["stages"].items()]
    lines += [""] + [f"![{Path(f).stem}]({f})" for f in plots]
    return "\n".join(lines) + "\n"


def _itl_rows(p: dict) -> list[str]:
    """Inter-token latency and inter-chunk gaps (client-side), and how often a chunk carried several tokens."""
    out = []
    for key, label in (("itl_ms", "ITL ms p50 / p90 / p99 (client, per token)"),
                       ("chunk_gap_ms", "inter-chunk gap ms p50 / p90 / p99 (client)")):
        if p.get(key):
            out.append(f"| {label} | " + " / ".join(_fmt(p[key].get(q), ".2f") for q in PCTS) + " |")
    c = p.get("tokens_per_chunk")
    if c:
        out.append(f"| tokens per chunk: mean / max; chunks of several tokens | {c['mean']:.2f} / {c['max']}; "
                   f"{c['multi_token_chunks']:,} of {c['chunks']:,} chunks, {c['multi_token_share']:.0%} of tokens |")
    return out


def _early_stopping_rows(es: dict) -> list[str]:
    """MLPerf's early-stopping estimate at p50 / p90 / p99 / p99.9 ('-': too few queries for it)."""
    return [f"| {name} early-stopping estimate p50 / p90 / p99 / p99.9 (client) | "
            + " / ".join(_fmt(v.get(q), ".2f") for q in ("p50", "p90", "p99", "p99_9")) + " |"
            for name, v in es.items() if v]


def _accuracy_table(a: dict) -> list[str]:
    lines = ["", "| accuracy | score | reference | needed |", "|---|---|---|---|"]
    for m in a.get("metrics") or ("rouge1", "rouge2", "rougeL", "tokens_per_sample"):
        ref = a["reference"].get(m)
        if m in ("tokens_per_sample", "gen_len"):
            lines.append(f"| {m} | {_fmt(a.get(m))} | {_fmt(ref)} | ±10% |")
        else:
            lines.append(f"| {m} | {_fmt(a.get(m), '.4f')} | {_fmt(ref, '.4f')} | "
                         f"{_fmt(ref * a['target'] if ref else None, '.4f')} |")
    if a.get("why"):
        lines += ["", f"Accuracy FAIL: {a['why']}"]
    return lines


def plot(requests: list[dict], out_dir: Path, title: str, performance: dict | None = None, chunks=None) -> list[str]:
    """The report's PNGs (harness/reports/plots.py): throughput by token arrival; for streamed runs latency
    over time, the per-request distributions and inter-token latency (`chunks`: chunks.npz); request lengths."""

    from harness.reports.plots import plot_all  # numpy: a cached run's summary never plots

    return plot_all(requests, out_dir, title, performance or {}, chunks)


def color_wanted(stream=None) -> bool:
    """Red for what went wrong, on a terminal only (and never under NO_COLOR)."""
    stream = stream or sys.stdout
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def _red(text: str, color: bool) -> str:
    return f"\033[31m{text}\033[0m" if color else text


def summary_text(report: dict, report_dir: Path, color: bool = False) -> str:
    p, a = report["performance"], report["accuracy"]
    n_err, first = _errors(p)
    verdict = "VALID" if p["valid"] else _red("INVALID", color)
    return "\n".join([
        "",
        f"perfdag {'FullRun' if a is not None else 'bench'}: {report['model']}, {p['scenario']}",
        f"  result     {verdict}" + (f" ({p['invalid_reason']})" if p.get("invalid_reason") else ""),
        *([_red(f"  ERRORS     LoadGen logged {n_err} error(s) (LoadGen's own verdict: {p.get('loadgen_valid') or '-'});"
                " the first:", color)] + [f"               {x}" for x in first] if n_err else []),
        *[_red(f"  RELAUNCH   {line}", color) for line in relaunch_lines(p)],
        f"  throughput {_fmt(p['samples_per_second'], '.2f')} samples/s, {_fmt(p['tokens_per_second'], '.1f')} tokens/s",
        f"  goodput    {goodput_line(p.get('goodput'))}",
        f"  in flight  limit {_fmt(p.get('max_in_flight'), 'd')}, peak {_fmt(p.get('peak_in_flight'), 'd')}",
        *([f"  WARNING    client-bound: {p['client_bound_reason']}"] if p.get("client_bound") else []),
        *[_red(f"  WARNING    answers: {w}", color) for w in p.get("answer_warnings") or ()],
        *([f"  host       {host_state.line(report[host_state.KEY])}"] if report.get(host_state.KEY) else []),
        *([_red(f"  WARNING    busy host: {'; '.join(report[host_state.KEY]['busy_reasons'])}", color)]
          if (report.get(host_state.KEY) or {}).get("busy") else []),
        *[f"  server     {line}" for line in server_metrics.lines(report.get(server_metrics.KEY))],
        *([f"  latency ms (LoadGen) p90 {_fmt(p['single_stream']['p90_latency_ms'], '.2f')} (SingleStream's metric); "
           f"early-stopping estimate {_fmt(p['single_stream']['early_stopping_latency_ms'], '.2f')} (of first tokens)"]
          if p.get("single_stream") else []),
        *[f"  {name} ms    {'(' + source(p, key) + ')':<9} p50 {_fmt(p[key]['p50'], '.2f')}  "
          f"p90 {_fmt(p[key]['p90'], '.2f')}  p99 {_fmt(p[key]['p99'], '.2f')}"
          for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"))],
        *([f"  ITL ms     (client)  p50 {_fmt(p['itl_ms']['p50'], '.2f')}  p90 {_fmt(p['itl_ms']['p90'], '.2f')}  "
           f"p99 {_fmt(p['itl_ms']['p99'], '.2f')}"] if p.get("itl_ms") else []),
        f"  accuracy   " + ("- (performance only)" if a is None else
                            f"{'PASS' if a['passed'] else 'FAIL'}: {_accuracy_line(a)} (target {a['target']})"),
        f"  report     {report_dir / 'report.md'}",
        "",
    ])


def write_report(out_dir: Path, report: dict, requests: list[dict], chunks=None) -> list[str]:
    report["performance"]["time_slices"] = windows.time_slices(requests)
    plots = plot(requests, out_dir, f"{report['model']} {report['performance']['scenario']}", report["performance"],
                 chunks)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out_dir / "report.md").write_text(render_markdown(report, plots))
    return plots

