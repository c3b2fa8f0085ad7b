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

from harness.reports.sweep import fmt

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
            "accuracy_passed": None, "fullrun_key": key}


def frontier_rows(rows: list[dict], engine_keys: list[str], gpus: int,
                  level_key: str = "harness.max_in_flight") -> list[dict[str, Any]]:
    """One row per point: its engine, concurrency (the `level_key` it set) and what the frontier draws;
    `on_front` marks the VALID points no other VALID point beats on both per-user and per-GPU
    (per-system) throughput."""
    out = []
    for r in rows:
        tpot50 = r.get("tpot_p50_ms")
        per_user = round(1000.0 / tpot50, 3) if tpot50 else None
        tps = r.get("tokens_per_s")
        out.append({"engine": engine_label(r, engine_keys), "concurrency": r.get(level_key),
                    "tokens_per_s": tps, "tokens_per_s_per_gpu": round(tps / gpus, 3) if gpus and tps else None,
                    "tokens_per_s_per_user": per_user,
                    "ttft_p50_ms": r.get("ttft_p50_ms"), "ttft_p99_ms": r.get("ttft_p99_ms"),
                    "tpot_p50_ms": tpot50, "tpot_p99_ms": r.get("tpot_p99_ms"),
                    "goodput_share": r.get("goodput_share"), "valid": bool(r.get("valid")),
                    "accuracy_passed": r.get("accuracy_passed"), "fullrun_key": r.get("fullrun_key")})
    y = "tokens_per_s_per_gpu" if gpus else "tokens_per_s"
    pts = [(i, f["tokens_per_s_per_user"], f[y]) for i, f in enumerate(out)
           if f["valid"] and f["tokens_per_s_per_user"] is not None and f[y] is not None]
    for i, xi, yi in pts:
        out[i]["on_front"] = not any(xj >= xi and yj >= yi and (xj > xi or yj > yi) for _, xj, yj in pts)
    for f in out:
        f.setdefault("on_front", False)
    return out


def write_frontier(out_dir: Path, name: str, engine_keys: list[str], gpus: int, rows: list[dict]) -> list[str]:
    """frontier.json, frontier.md (the table, front points starred) and frontier.png; returns the files."""
    per = "GPU" if gpus else "system"
    (out_dir / "frontier.json").write_text(json.dumps({"name": name, "engines": engine_keys, "gpus": gpus,
                                                       "y": f"tokens/s per {per}", "rows": rows}, indent=2))
    y_key = "tokens_per_s_per_gpu" if gpus else "tokens_per_s"
    header = ["engine", "concurrency", "tokens/s/user", f"tokens/s/{per}", "TTFT p50 ms", "TTFT p99 ms",
              "TPOT p50 ms", "TPOT p99 ms", "goodput", "result", "front"]
    md = [f"# frontier {name}", "",
          f"Tokens/s per user (1000 / TPOT p50) against tokens/s per {per}"
          + (f" ({gpus} GPUs serving)" if gpus else " (no GPU serves: per system)")
          + ". `*`: on the Pareto front of the VALID points.", "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in sorted(rows, key=lambda r: (r["engine"], r["concurrency"] or 0)):
        share = r["goodput_share"]
        md.append("| " + " | ".join([r["engine"], fmt(r["concurrency"]), fmt(r["tokens_per_s_per_user"]),
                                     fmt(r[y_key]), fmt(r["ttft_p50_ms"]), fmt(r["ttft_p99_ms"]),
                                     fmt(r["tpot_p50_ms"]), fmt(r["tpot_p99_ms"]),
                                     "-" if share is None else f"{100 * share:.1f}%",
                                     "VALID" if r["valid"] else "INVALID", "*" if r["on_front"] else ""]) + " |")
    _plot(out_dir / "frontier.png", name, rows, y_key, per)
    md += ["", "![frontier](frontier.png)"]
    (out_dir / "frontier.md").write_text("\n".join(md) + "\n")
    return ["frontier.md", "frontier.json", "frontier.png"]


def text_table(rows: list[dict], gpus: int) -> str:
    """The terminal's view: one line per point, the front starred."""
    y_key, per = ("tokens_per_s_per_gpu", "GPU") if gpus else ("tokens_per_s", "system")
    lines = [f"  {'engine':<28} {'conc':>5} {'tok/s/user':>11} {'tok/s/' + per:>14} {'TTFT p99':>9} "
             f"{'TPOT p99':>9}  result"]
    for r in sorted(rows, key=lambda r: (r["engine"], r["concurrency"] or 0)):
        lines.append(f"  {r['engine'][:28]:<28} {fmt(r['concurrency']):>5} {fmt(r['tokens_per_s_per_user']):>11} "
                     f"{fmt(r[y_key]):>14} {fmt(r['ttft_p99_ms']):>9} {fmt(r['tpot_p99_ms']):>9}  "
                     f"{'VALID' if r['valid'] else 'INVALID'}{' *' if r['on_front'] else ''}")
    return "\n".join(lines)


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
        for r in pts:
            ax.annotate(f"c={fmt(r['concurrency'])}", (r["tokens_per_s_per_user"], r[y_key]),
                        textcoords="offset points", xytext=(4, 4), fontsize="small", color=color)
    front = sorted((r["tokens_per_s_per_user"], r[y_key]) for r in drawn if r["on_front"])
    if front:
        ax.plot(*zip(*front), "--", color="k", alpha=0.7, label="Pareto front (VALID points)")
    top_x = max((r["tokens_per_s_per_user"] for r in drawn), default=1)
    top_y = max((r[y_key] for r in drawn), default=1)
    ax.set_xlim(0, 1.12 * top_x), ax.set_ylim(0, 1.12 * top_y)  # room for the labels
    ax.set_xlabel("tokens/s per user (1000 / TPOT p50)"), ax.set_ylabel(f"tokens/s per {per}")
    ax.set_title(f"frontier {name}")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    fig.tight_layout(), fig.savefig(path, dpi=100), plt.close(fig)
