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
            # whether the client, not the server, may have set the pace; the in-flight limit and peak
            "client_bound": perf.get("client_bound"), "client_bound_reason": perf.get("client_bound_reason"),
            "max_in_flight": (perf.get("harness") or {}).get("max_in_flight"),
            "peak_in_flight": (perf.get("harness") or {}).get("peak_in_flight"),
        },
        # The benchmark's required metrics (its gates), under MLCommons' names, plus tokens/sample.
        "accuracy": {**{m: s.get(m) for m in _required(accuracy)},
                     "tokens_per_sample": s.get("tokens_per_sample"), "target": accuracy["target"],
                     "benchmark": accuracy.get("benchmark", "llama2-70b"), "metrics": _required(accuracy),
                     "reference": accuracy["reference_scores"], "passed": accuracy["passed"],
                     "why": accuracy.get("why")},
    }


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


def render_markdown(report: dict, plots: list[str]) -> str:
    p, a = report["performance"], report["accuracy"]
    lines = [f"# perfdag report: {report['model']}", "",
             f"**{p['scenario']}**: {'VALID' if p['valid'] else 'INVALID'}"
             + (f" ({p['invalid_reason']})" if p.get("invalid_reason") else "")
             + f"; accuracy **{'PASS' if a['passed'] else 'FAIL'}**", "",
             "| metric | value |", "|---|---|",
             f"| samples/s | {_fmt(p['samples_per_second'], '.2f')} |",
             f"| tokens/s | {_fmt(p['tokens_per_second'], '.1f')} |",
             f"| in flight: limit / peak | {_fmt(p.get('max_in_flight'), 'd')} / {_fmt(p.get('peak_in_flight'), 'd')} |"]
    if p.get("client_bound"):
        lines[2:2] = [f"> **Warning: the client may have been the bottleneck**: {p['client_bound_reason']}", ""]
    for name in ("ttft_ms", "tpot_ms", "latency_ms"):
        lines.append(f"| {name} p50 / p90 / p99 | " + " / ".join(_fmt(p[name][q], ".2f") for q in PCTS) + " |")
    lines += ["", "| accuracy | score | reference | needed |", "|---|---|---|---|"]
    for m in a.get("metrics") or ("rouge1", "rouge2", "rougeL", "tokens_per_sample"):
        ref = a["reference"].get(m)
        if m in ("tokens_per_sample", "gen_len"):
            lines.append(f"| {m} | {_fmt(a.get(m))} | {_fmt(ref)} | ±10% |")
        else:
            lines.append(f"| {m} | {_fmt(a.get(m), '.4f')} | {_fmt(ref, '.4f')} | "
                         f"{_fmt(ref * a['target'] if ref else None, '.4f')} |")
    if a.get("why"):
        lines += ["", f"Accuracy FAIL: {a['why']}"]
    lines += ["", "## Stages", "", "| stage | key |", "|---|---|"]
    lines += [f"| {k} | `{v[:16]}` |" for k, v in report["stages"].items()]
    lines += [""] + [f"![{Path(f).stem}]({f})" for f in plots]
    return "\n".join(lines) + "\n"


def plot(requests: list[dict], out_dir: Path, title: str, performance: dict | None = None) -> list[str]:
    """throughput.png (completed tokens/s over time), latency.png (TTFT and request latency) and, when
    the run streamed, tpot.png; the scenario's p99 limits drawn where it has them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not requests:
        return []
    perf = performance or {}
    files = ["throughput.png"]
    _throughput(plt, requests, out_dir / files[0], title, perf.get("tokens_per_second"))
    ttft = [r["ttft_ms"] for r in requests if r.get("ttft_ms") is not None]
    lat = [r["latency_ms"] for r in requests]
    panels = ([("time to first token", ttft, perf.get("ttft_limit_ms"))] if ttft else []) + \
        [("request latency", lat, None)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (name, values, limit) in zip(axes[0], panels):
        _histogram(ax, values, limit, name, "ms")
    fig.suptitle(f"{title}: latency"), fig.tight_layout(), fig.savefig(out_dir / "latency.png", dpi=100)
    plt.close(fig)
    files.append("latency.png")
    tpot = [r["tpot_ms"] for r in requests if r.get("tpot_ms") is not None]
    if tpot:
        fig, ax = plt.subplots(figsize=(7, 4))
        _histogram(ax, tpot, perf.get("tpot_limit_ms"), "time per output token", "ms per token")
        ax.set_title(f"{title}: time per output token")
        fig.tight_layout(), fig.savefig(out_dir / "tpot.png", dpi=100), plt.close(fig)
        files.append("tpot.png")
    return files


_NICE_BINS = (0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600)


def throughput_bins(requests: list[dict], target_bins: int = 50) -> tuple[list[float], list[float], list[float]]:
    """(bin starts s, widths s, completed tokens/s) from the first issue to the last completion.
    Each bin's rate is its tokens over its own width; a last partial bin shorter than half a bin
    is merged into the one before (a few ms of tail would read as a collapse or a spike)."""
    ends = [(r["issue_ms"] + r["latency_ms"]) / 1000 for r in requests]
    span = max(max(ends), 1e-3)
    w = next((b for b in _NICE_BINS if span / b <= target_bins), _NICE_BINS[-1])
    full = int(span // w)
    rest = span - full * w
    edges = [k * w for k in range(full + 1)]
    if rest >= w / 2 or full == 0:
        edges.append(span)
    else:
        edges[-1] = span  # the short tail joins the last full bin
    tokens = [0.0] * (len(edges) - 1)
    for r, t in zip(requests, ends):
        k = min(int(t // w), len(tokens) - 1)
        tokens[k] += r["n_tokens"]
    widths = [b - a for a, b in zip(edges, edges[1:])]
    return edges[:-1], widths, [n / wd for n, wd in zip(tokens, widths)]


def _throughput(plt, requests, path: Path, title: str, mean_tps) -> None:
    starts, widths, rates = throughput_bins(requests)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(starts, rates, width=widths, align="edge", color="tab:blue", alpha=0.6, edgecolor="tab:blue",
           label=f"completed tokens/s ({widths[0]:g} s bins)")
    if mean_tps:
        ax.axhline(mean_tps, color="k", linestyle="--", linewidth=1, label=f"LoadGen: {mean_tps:,.0f} tokens/s")
    ax.set_xlim(0, starts[-1] + widths[-1]), ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since the first query"), ax.set_ylabel("generated tokens/s")
    ax.set_title(f"{title}: throughput over time"), ax.legend(loc="lower right")
    fig.tight_layout(), fig.savefig(path, dpi=100), plt.close(fig)


def _histogram(ax, values: list[float], limit, name: str, unit: str) -> None:
    """Counts from zero; log-spaced bins when the values (and the limit) span a wide range."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    p99 = float(np.percentile(v, 99))
    lo = max(float(v[v > 0].min()) if (v > 0).any() else 1e-3, 1e-3)
    hi = max(float(v.max()), limit or 0)
    log = hi / lo > 50
    bins = np.geomspace(lo, hi * 1.05, 40) if log else 40
    ax.hist(np.clip(v, lo, None) if log else v, bins=bins, color="tab:blue", alpha=0.7, label=name)
    if log:
        ax.set_xscale("log")
    ax.axvline(p99, color="tab:orange", linewidth=1.5, label=f"p99 {p99:,.2f} {unit}")
    if limit:
        ax.axvline(limit, color="tab:red", linestyle="--", linewidth=1.5, label=f"limit (p99) {limit:,.0f} {unit}")
    ax.set_ylim(bottom=0), ax.set_xlabel(unit + (" (log scale)" if log else "")), ax.set_ylabel("requests")
    ax.set_title(name), ax.legend(loc="upper right", fontsize="small")


def summary_text(report: dict, report_dir: Path) -> str:
    p, a = report["performance"], report["accuracy"]
    return "\n".join([
        "",
        f"perfdag FullRun: {report['model']}, {p['scenario']}",
        f"  result     {'VALID' if p['valid'] else 'INVALID'}" + (f" ({p['invalid_reason']})" if p.get("invalid_reason") else ""),
        f"  throughput {_fmt(p['samples_per_second'], '.2f')} samples/s, {_fmt(p['tokens_per_second'], '.1f')} tokens/s",
        f"  in flight  limit {_fmt(p.get('max_in_flight'), 'd')}, peak {_fmt(p.get('peak_in_flight'), 'd')}",
        *([f"  WARNING    client-bound: {p['client_bound_reason']}"] if p.get("client_bound") else []),
        f"  TTFT ms    p50 {_fmt(p['ttft_ms']['p50'], '.2f')}  p90 {_fmt(p['ttft_ms']['p90'], '.2f')}  p99 {_fmt(p['ttft_ms']['p99'], '.2f')}",
        f"  TPOT ms    p50 {_fmt(p['tpot_ms']['p50'], '.2f')}  p90 {_fmt(p['tpot_ms']['p90'], '.2f')}  p99 {_fmt(p['tpot_ms']['p99'], '.2f')}",
        f"  accuracy   {'PASS' if a['passed'] else 'FAIL'}: {_accuracy_line(a)} (target {a['target']})",
        f"  report     {report_dir / 'report.md'}",
        "",
    ])


def write_report(out_dir: Path, report: dict, requests: list[dict]) -> list[str]:
    plots = plot(requests, out_dir, f"{report['model']} {report['performance']['scenario']}", report["performance"])
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out_dir / "report.md").write_text(render_markdown(report, plots))
    return plots
