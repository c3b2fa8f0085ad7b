"""The latency-throughput frontier of one or more engines (no luigi): from a concurrency sweep's rows,
tokens/s per user against tokens/s per GPU (per system where no GPU serves), the Pareto front over
the VALID points, a table and a plot. The flow is pipeline/frontier.py.

Per user is 1000 / TPOT p50 (ms): the rate one user sees tokens arrive once its first token came,
as the field's frontier charts draw it. Per GPU is the system's tokens/s over the GPUs serving.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from harness.reports.spread import ALIKE, FRONT, error_bar, front_marks
from harness.reports.sweep import cell, fmt, whose
from harness.stats import noise

#: The low-latency region every frontier measures (MLPerf's endpoints track: 1 to 32 users).
LOW_LATENCY = (1, 2, 4, 8, 16, 32)


def levels(declared_max: int) -> list[int]:
    """Concurrency levels: the low-latency region up to the declared maximum, then doubling, and last
    1.1x the declared maximum (the endpoints track's regions)."""
    if declared_max < 1:
        raise ValueError(f"the declared maximum concurrency must be at least 1, not {declared_max}")
    top = math.ceil(round(1.1 * declared_max, 6)) if declared_max > 1 else 1  # 1.1 x 100 is 110.00000000000001
    out = [c for c in LOW_LATENCY if c <= declared_max]
    c = out[-1] * 2
    while c < top:
        out.append(c)
        c *= 2
    return out + ([top] if top > out[-1] else [])


def parse_levels(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]: whole numbers >= 1, each once, in order."""
    try:
        got = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        got = []
    if not got or got[0] < 1:
        raise ValueError(f"--levels {text!r}: give concurrency levels as whole numbers >= 1, e.g. 1,2,4,8")
    return got


def engine_label(r: dict, engine_keys: list[str]) -> str:
    return ", ".join(f"{k}={fmt(r.get(k))}" for k in engine_keys) or "engine"


def session_row(point: dict, result: dict, key: str) -> dict[str, Any]:
    """A replay's RunSessions result.json as a frontier point: the performance window's tokens/s and its
    turns' TTFT and TPOT. A replay has no LoadGen verdict: its own (perfdag's) is INVALID when a
    conversation failed or its output lengths missed their band."""
    m = result["metrics"]
    ttft, tpot = m.get("ttft_ms") or {}, m.get("tpot_ms") or {}
    return {**point, "tokens_per_s": m["window"]["tokens_per_s"], "ttft_p50_ms": ttft.get("p50"),
            "ttft_p99_ms": ttft.get("p99"), "tpot_p50_ms": tpot.get("p50"), "tpot_p99_ms": tpot.get("p99"),
            "goodput_share": None,
            "valid": result.get("valid", True) and (result.get("osl") or {}).get("ok") is not False,
            "accuracy_passed": None, "fullrun_key": key,
            "sources": {"ttft_ms": "client", "tpot_ms": "client"}}  # perfdag's scheduler: no LoadGen


def _derived(r: dict, source: str, fn) -> tuple[float | None, list | None]:
    """A frontier value from a row's field (its median, and each repeat's where it has repeats)."""
    v = r.get(source)
    values = (r.get("values") or {}).get(source)
    return (fn(v) if v else None), ([fn(x) if x else None for x in values] if values else None)


def frontier_rows(rows: list[dict], engine_keys: list[str], gpus: int,
                  level_key: str = "harness.max_in_flight") -> list[dict[str, Any]]:
    """One row per point: its engine, concurrency (the `level_key` it set) and what the frontier draws;
    `on_front` marks the VALID points no other VALID point beats on both per-user and per-GPU
    (per-system) throughput, by median, and `front` says FRONT, ALIKE (beaten only within the noise of
    the points' repeats) or BEATEN. A point measured several times carries `spread` and `values`."""
    out = []
    y = "tokens_per_s_per_gpu" if gpus else "tokens_per_s"
    for r in rows:
        per_user, user_values = _derived(r, "tpot_p50_ms", lambda t: round(1000.0 / t, 3))
        per_gpu, gpu_values = _derived(r, "tokens_per_s", lambda t: round(t / gpus, 3)) if gpus else (None, None)
        f = {"engine": engine_label(r, engine_keys), "concurrency": r.get(level_key),
             "tokens_per_s": r.get("tokens_per_s"), "tokens_per_s_per_gpu": per_gpu, "tokens_per_s_per_user": per_user,
             "ttft_p50_ms": r.get("ttft_p50_ms"), "ttft_p99_ms": r.get("ttft_p99_ms"),
             "tpot_p50_ms": r.get("tpot_p50_ms"), "tpot_p99_ms": r.get("tpot_p99_ms"),
             "goodput_share": r.get("goodput_share"), "valid": bool(r.get("valid")),
             "accuracy_passed": r.get("accuracy_passed"), "fullrun_key": r.get("fullrun_key"),
             "sources": r.get("sources") or {"ttft_ms": "client", "tpot_ms": "client"}}
        values = {k: v for k, v in (r.get("values") or {}).items()}
        if user_values:
            values["tokens_per_s_per_user"] = user_values
        if gpu_values:
            values["tokens_per_s_per_gpu"] = gpu_values
        if values:
            f["values"] = values
            f["spread"] = {k: sp.as_dict() for k, v in values.items() if (sp := noise.spread(v)) is not None}
            f["repeats"] = r.get("repeats")
            f["valid_repeats"] = r.get("valid_repeats")
        out.append(f)
    valid = [i for i, f in enumerate(out) if f["valid"]]
    marks = front_marks([out[i] for i in valid], "tokens_per_s_per_user", y, x_higher=True, y_higher=True)
    for f in out:
        f["front"] = None
    for i, m in zip(valid, marks):
        out[i]["front"] = m
    for f in out:
        f["on_front"] = f["front"] == FRONT
    return out


def _mark(r: dict) -> str:
    return {FRONT: "*", ALIKE: "~"}.get(r.get("front"), "")


def front_note(rows: list[dict]) -> str:
    """What the front column's marks mean, and what a table without repeats cannot say."""
    said = "`*`: on the Pareto front of the VALID points (by median)"
    if any(r.get("spread") for r in rows):
        n = sorted({r["repeats"] for r in rows if r.get("repeats")})
        confs = sorted({sp["confidence"] for r in rows for sp in (r.get("spread") or {}).values() if sp.get("confidence")})
        return (f"{said}; `~`: beaten only by points the noise cannot tell it from (Mann-Whitney over the repeats, "
                f"p > {noise.ALPHA:g}, on both axes). Each point measured {', '.join(map(str, n))} times: median "
                f"[interval of the median, {' / '.join(f'{c:.0%}' for c in confs)} confidence].")
    return (f"{said}. One observation per point: the noise is not measured, so a point beaten by a little may "
            f"be beaten by noise (`--repeat {noise.MIN_REPEATS}` tells).")


def write_frontier(out_dir: Path, name: str, engine_keys: list[str], gpus: int, rows: list[dict]) -> list[str]:
    """frontier.json, frontier.md (the table, front points starred) and frontier.png; returns the files."""
    per = "GPU" if gpus else "system"
    (out_dir / "frontier.json").write_text(json.dumps({"name": name, "engines": engine_keys, "gpus": gpus,
                                                       "y": f"tokens/s per {per}", "rows": rows}, indent=2))
    y_key = "tokens_per_s_per_gpu" if gpus else "tokens_per_s"
    ttft, tpot = whose(rows, "ttft_ms"), whose(rows, "tpot_ms")
    header = ["engine", "concurrency", "tokens/s/user", f"tokens/s/{per}", f"TTFT p50 ms ({ttft})",
              f"TTFT p99 ms ({ttft})", f"TPOT p50 ms ({tpot})", f"TPOT p99 ms ({tpot})", "goodput", "result", "front"]
    md = [f"# frontier {name}", "",
          f"Tokens/s per user (1000 / TPOT p50) against tokens/s per {per}"
          + (f" ({gpus} GPUs serving)" if gpus else " (no GPU serves: per system)") + ". " + front_note(rows), "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in sorted(rows, key=lambda r: (r["engine"], r["concurrency"] or 0)):
        share = r["goodput_share"]
        md.append("| " + " | ".join([r["engine"], fmt(r["concurrency"]), cell(r, "tokens_per_s_per_user"),
                                     cell(r, y_key), cell(r, "ttft_p50_ms"), cell(r, "ttft_p99_ms"),
                                     cell(r, "tpot_p50_ms"), cell(r, "tpot_p99_ms"),
                                     "-" if share is None else f"{100 * share:.1f}%",
                                     ("VALID" if r["valid"] else "INVALID") + (f" {r['valid_repeats']}"
                                                                               if r.get("valid_repeats") else ""),
                                     _mark(r)]) + " |")
    _plot(out_dir / "frontier.png", name, rows, y_key, per)
    md += ["", "![frontier](frontier.png)"]
    (out_dir / "frontier.md").write_text("\n".join(md) + "\n")
    return ["frontier.md", "frontier.json", "frontier.png"]


def text_table(rows: list[dict], gpus: int) -> str:
    """The terminal's view: one line per point, the front starred."""
    y_key, per = ("tokens_per_s_per_gpu", "GPU") if gpus else ("tokens_per_s", "system")
    cells = [[r["engine"][:28], fmt(r["concurrency"]), cell(r, "tokens_per_s_per_user"), cell(r, y_key),
              cell(r, "ttft_p99_ms"), cell(r, "tpot_p99_ms"),
              ("VALID" if r["valid"] else "INVALID") + (f" {r['valid_repeats']}" if r.get("valid_repeats") else "")
              + (f" {_mark(r)}" if _mark(r) else "")]
             for r in sorted(rows, key=lambda r: (r["engine"], r["concurrency"] or 0))]
    header = ["engine", "conc", "tok/s/user", f"tok/s/{per}", f"TTFT p99 ({whose(rows, 'ttft_ms')})",
              f"TPOT p99 ({whose(rows, 'tpot_ms')})", "result"]
    widths = [max(len(c[i]) for c in cells + [header]) for i in range(len(header))]
    return "\n".join("  " + " ".join(c.ljust(w) if i in (0, 6) else c.rjust(w) for i, (c, w) in
                                     enumerate(zip(line, widths))).rstrip() for line in [header] + cells)


def _plot(path: Path, name: str, rows: list[dict], y_key: str, per: str) -> None:
    """One series per engine (its levels joined in order, each point labelled with its concurrency),
    INVALID points crossed, and the Pareto front of the VALID points drawn over all engines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5))
    colors = iter(("tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"))
    drawn = [r for r in rows if r["tokens_per_s_per_user"] is not None and r[y_key] is not None]
    for engine in dict.fromkeys(r["engine"] for r in drawn):
        pts = sorted((r for r in drawn if r["engine"] == engine), key=lambda r: r["concurrency"] or 0)
        color = next(colors, "tab:gray")
        ax.plot([r["tokens_per_s_per_user"] for r in pts], [r[y_key] for r in pts], "-", color=color, alpha=0.5)
        for valid, marker in ((True, "o"), (False, "x")):
            sel = [r for r in pts if r["valid"] == valid]
            if sel:
                ax.scatter([r["tokens_per_s_per_user"] for r in sel], [r[y_key] for r in sel], marker=marker,
                           s=50, color=color if valid else "tab:red", zorder=3,
                           label=engine if valid else f"{engine}: INVALID")
                xerr, yerr = error_bar(sel, "tokens_per_s_per_user"), error_bar(sel, y_key)
                if xerr or yerr:  # repeats: each median's interval, on both axes
                    ax.errorbar([r["tokens_per_s_per_user"] for r in sel], [r[y_key] for r in sel], xerr=xerr,
                                yerr=yerr, fmt="none", ecolor=color if valid else "tab:red", alpha=0.6, capsize=3)
        for r in pts:
            ax.annotate(f"c={fmt(r['concurrency'])}" + (" ~" if r.get("front") == ALIKE else ""),
                        (r["tokens_per_s_per_user"], r[y_key]),
                        textcoords="offset points", xytext=(4, 4), fontsize="small", color=color)
    front = sorted((r["tokens_per_s_per_user"], r[y_key]) for r in drawn if r["on_front"])
    if front:
        ax.plot(*zip(*front), "--", color="k", alpha=0.7, label="Pareto front (VALID points)")
    top_x = max((r["tokens_per_s_per_user"] for r in drawn), default=1)
    top_y = max((r[y_key] for r in drawn), default=1)
    ax.set_xlim(0, 1.12 * top_x), ax.set_ylim(0, 1.12 * top_y)  # room for the labels
    ax.set_xlabel(f"tokens/s per user (1000 / TPOT p50, {whose(rows, 'tpot_ms')})"), ax.set_ylabel(f"tokens/s per {per}")
    ax.set_title(f"frontier {name}" + (" (bars: interval of the median; ~: within the noise of the front)"
                                        if any(r.get("spread") for r in rows) else ""), fontsize="medium")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    fig.tight_layout(), fig.savefig(path, dpi=100), plt.close(fig)
