"""FullRun's report: report.json, report.md and PNG plots from the performance and accuracy runs."""
from __future__ import annotations

import json
from pathlib import Path

PCTS = ("p50", "p90", "p99")


def _pcts(d: dict | None) -> dict:
    d = d or {}
    return {p: d.get(p) for p in PCTS}


def build_report(stage_keys: dict[str, str], perf: dict, accuracy: dict, model_name: str) -> dict:
    s = accuracy["scores"]
    return {
        "model": model_name,
        "stages": stage_keys,
        "performance": {
            # LoadGen reports "VALID" / "INVALID"; the report keeps a boolean.
            "scenario": perf["scenario"], "valid": perf["valid"] in (True, "VALID"),
            "invalid_reason": perf.get("invalid_reason"),
            "samples_per_second": perf["samples_per_s"], "tokens_per_second": perf["tokens_per_s"],
            "ttft_ms": _pcts(perf.get("ttft_ms")), "tpot_ms": _pcts(perf.get("tpot_ms")),
            "latency_ms": _pcts(perf.get("latency_ms")), "early_stopping": perf.get("early_stopping"),
            # MLPerf's p99 limits this run was held to (Server / Interactive; None for Offline)
            "ttft_limit_ms": perf.get("ttft_constraint_ms"), "tpot_limit_ms": perf.get("tpot_constraint_ms"),
        },
        "accuracy": {"rouge1": s["rouge1"], "rouge2": s["rouge2"], "rougeL": s["rougeL"],
                     "tokens_per_sample": s.get("tokens_per_sample"), "target": accuracy["target"],
                     "reference": accuracy["reference_scores"], "passed": accuracy["passed"]},
    }


def _fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def render_markdown(report: dict, plots: list[str]) -> str:
    p, a = report["performance"], report["accuracy"]
    lines = [f"# perfdag report: {report['model']}", "",
             f"**{p['scenario']}**: {'VALID' if p['valid'] else 'INVALID'}"
             + (f" ({p['invalid_reason']})" if p.get("invalid_reason") else "")
             + f"; accuracy **{'PASS' if a['passed'] else 'FAIL'}**", "",
             "| metric | value |", "|---|---|",
             f"| samples/s | {_fmt(p['samples_per_second'], '.2f')} |",
             f"| tokens/s | {_fmt(p['tokens_per_second'], '.1f')} |"]
    for name in ("ttft_ms", "tpot_ms", "latency_ms"):  # LoadGen's percentiles (mlperf_log_detail.txt)
        lines.append(f"| {name} p50 / p90 / p99 (LoadGen) | " + " / ".join(_fmt(p[name][q], ".2f") for q in PCTS) + " |")
    lines += ["", "| accuracy | score | reference | needed |", "|---|---|---|---|"]
    for m in ("rouge1", "rouge2", "rougeL"):
        ref = a["reference"].get(m)
        lines.append(f"| {m} | {_fmt(a[m], '.4f')} | {_fmt(ref, '.4f')} | {_fmt(ref * a['target'] if ref else None, '.4f')} |")
    tps_ref = a["reference"].get("tokens_per_sample")
    lines.append(f"| tokens/sample | {_fmt(a['tokens_per_sample'])} | {_fmt(tps_ref)} | ±10% |")
    from .plots import stats_markdown

    lines += stats_markdown(report.get("client_stats") or {}, report.get("client_vs_loadgen") or {})
    lines += ["", "## Stages", "", "| stage | key |", "|---|---|"]
    lines += [f"| {k} | `{v[:16]}` |" for k, v in report["stages"].items()]
    lines += [""] + [f"![{Path(f).stem}]({f})" for f in plots]
    return "\n".join(lines) + "\n"


def plot(requests: list[dict], out_dir: Path, title: str, performance: dict | None = None) -> list[str]:
    """The report's PNGs (harness/plots.py): throughput by token arrival; for streamed runs latency
    over time and the per-request distributions; request lengths."""
    from .plots import plot_all

    return plot_all(requests, out_dir, title, performance or {})


def summary_text(report: dict, report_dir: Path) -> str:
    p, a = report["performance"], report["accuracy"]
    return "\n".join([
        "",
        f"perfdag FullRun: {report['model']}, {p['scenario']}",
        f"  result     {'VALID' if p['valid'] else 'INVALID'}" + (f" ({p['invalid_reason']})" if p.get("invalid_reason") else ""),
        f"  throughput {_fmt(p['samples_per_second'], '.2f')} samples/s, {_fmt(p['tokens_per_second'], '.1f')} tokens/s",
        f"  TTFT ms    (LoadGen) p50 {_fmt(p['ttft_ms']['p50'], '.2f')}  p90 {_fmt(p['ttft_ms']['p90'], '.2f')}  p99 {_fmt(p['ttft_ms']['p99'], '.2f')}",
        f"  TPOT ms    (LoadGen) p50 {_fmt(p['tpot_ms']['p50'], '.2f')}  p90 {_fmt(p['tpot_ms']['p90'], '.2f')}  p99 {_fmt(p['tpot_ms']['p99'], '.2f')}",
        f"  accuracy   {'PASS' if a['passed'] else 'FAIL'}: ROUGE-1 {a['rouge1']:.2f}  ROUGE-2 {a['rouge2']:.2f}  "
        f"ROUGE-L {a['rougeL']:.2f}  tokens/sample {_fmt(a['tokens_per_sample'])} (target {a['target']})",
        f"  report     {report_dir / 'report.md'}",
        "",
    ])


def write_report(out_dir: Path, report: dict, requests: list[dict]) -> list[str]:
    plots = plot(requests, out_dir, f"{report['model']} {report['performance']['scenario']}", report["performance"])
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out_dir / "report.md").write_text(render_markdown(report, plots))
    return plots
