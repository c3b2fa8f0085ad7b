"""A sweep's results (no luigi): one row per point, the table (text, CSV, JSON), the Pareto front and
the plots. Sweep files themselves are harness/config/sweeps.py."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from harness.loadgen.verdict import error_count, invalid_reason, is_valid
from harness.reports.spread import FRONT, error_bar, front_marks
from harness.stats import noise


def point_id(row: dict[str, Any], varied: list[str]) -> str:
    """Identifies a point across nights by its varied values."""
    return json.dumps({k: row.get(k) for k in varied}, sort_keys=True)


def row(point: dict[str, Any], report: dict, resolved: dict[str, Any] | None = None) -> dict[str, Any]:
    """One point's results. `resolved`: the values its parameters resolved to, so a point that
    leaves a varied parameter at its default shows that default, not None."""
    p, a = report["performance"], report["accuracy"]
    return {**point, **(resolved or {}), "scenario": p["scenario"],
            "tokens_per_s": p["tokens_per_second"], "samples_per_s": p["samples_per_second"],
            "ttft_p99_ms": p["ttft_ms"]["p99"], "tpot_p99_ms": p["tpot_ms"]["p99"], "valid": is_valid(p),
            "ttft_p50_ms": p["ttft_ms"]["p50"], "tpot_p50_ms": p["tpot_ms"]["p50"],
            "goodput_share": (p.get("goodput") or {}).get("share"),
            "goodput_samples_per_s": (p.get("goodput") or {}).get("samples_per_s"),
            "latency_p90_ms": (p.get("single_stream") or {}).get("p90_latency_ms"),
            "ttft_limit_ms": p.get("ttft_limit_ms"), "tpot_limit_ms": p.get("tpot_limit_ms"),
            "invalid_reason": invalid_reason(p), "loadgen_errors": error_count(p),
            "relaunches": len(p.get("relaunches") or ()),
            "relaunch_why": "; ".join(r.get("why") or "" for r in p.get("relaunches") or ()) or None,
            "accuracy_passed": None if a is None else a["passed"], "target_qps": p.get("target_qps"),  # None: no run
            "fullrun_key": report["stages"][own_stage(report)][:16],  # a Bench's (--url) or PerformanceRun's too
            # compare takes KEY@OBSERVATION; a Bench report names its own (one before 2026-12 named it FullRun)
            "observation": own_observation(report),
            # whose TTFT and TPOT they are: LoadGen's, or the client's where LoadGen measured none
            "sources": {k: (p.get("sources") or {}).get(k) or "LoadGen" for k in ("ttft_ms", "tpot_ms")}}


#: the stages whose report.json a sweep point is, each report's own stage among its stages
POINT_STAGES = ("FullRun", "PerformanceRun", "Bench")


def own_stage(report: dict) -> str:
    """Which of POINT_STAGES made this report (a PerformanceRun's or a Bench's has no FullRun stage)."""
    return next(s for s in POINT_STAGES if s in report["stages"])


def own_observation(report: dict) -> str | None:
    """The observation a report is (a Bench report before 2026-12 named its own under FullRun)."""
    said = report.get("observations") or {}
    return said.get(own_stage(report)) or said.get("FullRun")


def cell(r: dict, k: str) -> str:
    """A row's measured value: median [interval of the median] where it has repeats."""
    sp = noise.from_dict((r.get("spread") or {}).get(k))
    return noise.fmt_spread(sp, fmt) if sp is not None else fmt(r.get(k))


def search_row(point: dict[str, Any], search: dict, report: dict | None,
               resolved: dict[str, Any] | None = None) -> dict[str, Any]:
    """A point that is a search (FindMaxLoad's search.json): the load it found and confirmed
    (`max_load`, None when nothing passed or the confirmation failed), and what the confirming
    FullRun measured at that load (its report; None when the search confirmed nothing)."""
    if report is not None:
        base = row(point, report, resolved)
    else:
        c = search.get("confirmation") or {}
        base = {**point, **(resolved or {}), "scenario": search["scenario"], "valid": search["result"] is not None,
                "invalid_reason": None if search["result"] is not None else (c.get("reason") or search["stopped"]),
                "accuracy_passed": c.get("accuracy_passed"), "fullrun_key": (c.get("key") or "")[:16] or None}
    return {**base, "search_axis": search["axis"], "max_load": search["result"], "found": search["found"],
            "bracket": [search["low"], search["high"]], "probes": len(search["probes"]),
            "tried": tried_loads(search["probes"])}


def tried_loads(probes: list[dict]) -> list[list]:
    """[[load, runs that passed, runs], ...] of a search's probes, by load: its evidence per load."""
    out: dict[float, list[int]] = {}
    for p in probes:
        acc = out.setdefault(p["value"], [0, 0])
        acc[0] += bool(p["passed"])
        acc[1] += 1
    return [[v, n, t] for v, (n, t) in sorted(out.items())]


def whose(rows: list[dict], key: str) -> str:
    """Whose `key` ("ttft_ms", "tpot_ms") the rows' numbers are: LoadGen's, the client's, or either (a
    table of both: each row's `sources` says)."""
    said = {(r.get("sources") or {}).get(key) or "LoadGen" for r in rows}
    return said.pop() if len(said) == 1 else "LoadGen or client, by row"


def searched(r: dict) -> bool:
    """A row of a point that is a search (search_row), not of one FullRun."""
    return "max_load" in r


def winner(rows: list[dict]) -> dict | None:
    """The searched point with the highest confirmed load (None: no point is a search, or none passed)."""
    found = [r for r in rows if r.get("max_load") is not None]
    return max(found, key=lambda r: r["max_load"]) if found else None


def winner_line(varied: list[str], rows: list[dict]) -> str | None:
    best = winner(rows)
    if best is None:
        return "best: none; no point's search confirmed a load" if any(map(searched, rows)) else None
    name = ", ".join(f"{k}={fmt(best.get(k))}" for k in varied if applies(k, best)) or "the point"
    return f"best: {name}, {best['search_axis']}={fmt(best['max_load'])}"


def lookup(doc: dict, dotted: str) -> Any:
    """A dotted key's value in a resolved params document (None where it does not exist)."""
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def pareto_front(rows: list[dict], x: str, y: str) -> list[int]:
    """Indices of rows not dominated: lower x (latency) and higher y (throughput) are better."""
    return [i for i, m in enumerate(front_marks(rows, x, y, x_higher=False, y_higher=True)) if m == FRONT]


#: Parameters that mean something only in some scenarios: shown as "-" (and left out of plots) elsewhere.
STREAMING = ("Server", "Interactive")
APPLIES = {"loadgen.server_target_qps": STREAMING, "loadgen.offline_expected_qps": ("Offline",),
           "loadgen.ttft_latency_ms": STREAMING, "loadgen.tpot_latency_ms": STREAMING}


def applies(key: str, r: dict) -> bool:
    scenarios = APPLIES.get(key)
    return scenarios is None or r.get("scenario") in scenarios


def fmt(v: Any) -> str:
    """A value per its type: 300 not 300.00, 3,123 tokens/s, 2.71 ms; '-' for nothing."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return str(v)


def table(varied: list[str], rows: list[dict]) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, cells, notes): the varied parameters ('-' where one does not apply to the row's
    scenario), then what was measured; an INVALID row's reason and a server relaunch go to numbered
    notes."""
    streaming = any(r.get("scenario") in STREAMING for r in rows)
    axes = sorted({r["search_axis"] for r in rows if searched(r)})
    metrics = [(f"max {' / '.join(axes)}", "max_load")] if axes else []
    metrics += [("tokens/s", "tokens_per_s"), ("samples/s", "samples_per_s")]
    metrics += [(f"TTFT p99 ms ({whose(rows, 'ttft_ms')})", "ttft_p99_ms"),
                (f"TPOT p99 ms ({whose(rows, 'tpot_ms')})", "tpot_p99_ms")] if streaming else []
    metrics += [("latency p90 ms", "latency_p90_ms")] if any(r.get("scenario") == "SingleStream" for r in rows) else []
    scenario_varied = "loadgen.scenario" in varied or len({r.get("scenario") for r in rows}) > 1
    params = [k for k in varied if k != "loadgen.scenario"]
    header = (["scenario"] if scenario_varied else []) + params + [m for m, _ in metrics] + ["result", "accuracy"]
    cells, notes = [], []
    for r in rows:
        result = "VALID" if r.get("valid") else "INVALID"
        if not r.get("valid") and r.get("invalid_reason"):
            notes.append(r["invalid_reason"])
            result += f" [{len(notes)}]"
        if r.get("relaunches"):  # a whole measurement on relaunched servers: valid, and worth knowing
            notes.append(f"server relaunched {r['relaunches']} time(s) mid-measurement: {r.get('relaunch_why') or '?'}")
            result += f" [{len(notes)}]"
        if r.get("valid_repeats"):
            result += f" {r['valid_repeats']}"
        cells.append(([fmt(r.get("scenario"))] if scenario_varied else [])
                     + [fmt(r.get(k)) if applies(k, r) else "-" for k in params]
                     + [cell(r, k) for _, k in metrics]
                     + [result, {True: "PASS", False: "FAIL"}.get(r.get("accuracy_passed"), "-")])
    return header, cells, notes


def repeats_note(rows: list[dict]) -> str | None:
    """What a table's bracketed values are, where points were measured several times."""
    confs = sorted({sp["confidence"] for r in rows for sp in (r.get("spread") or {}).values() if sp.get("confidence")})
    if not confs:
        return None
    n = sorted({r.get("repeats") for r in rows if r.get("repeats")})
    return (f"each point measured {', '.join(map(str, n))} times: median [interval of the median, "
            f"{' / '.join(f'{c:.0%}' for c in confs)} confidence]; result: VALID repeats / repeats")


def text_table(varied: list[str], rows: list[dict]) -> str:
    """The sweep's table for the terminal (aligned columns)."""
    header, cells, notes = table(varied, rows)
    widths = [max(len(x) for x in col) for col in zip(header, *cells)]
    line = lambda xs: "  ".join(x.rjust(w) if i < len(xs) - 2 else x.ljust(w)  # noqa: E731
                                for i, (x, w) in enumerate(zip(xs, widths))).rstrip()
    out = [line(header)] + [line(c) for c in cells]
    out += [f"  {note}"] if (note := repeats_note(rows)) else []
    best = winner_line(varied, rows)
    return "\n".join(out + [f"  [{i}] {n}" for i, n in enumerate(notes, 1)] + ([f"  {best}"] if best else []))


def write_results(out_dir: Path, name: str, varied: list[str], rows: list[dict]) -> list[str]:
    flat = [_csv_row(r) for r in rows]
    cols = list(dict.fromkeys([*varied, *(k for r in flat for k in r)]))
    with open(out_dir / "sweep.csv", "w", newline="") as f:  # every field, for tools
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(flat)
    (out_dir / "sweep.json").write_text(json.dumps({"name": name, "varied": varied, "rows": rows}, indent=2))
    header, cells, notes = table(varied, rows)
    scenarios = sorted({str(r.get("scenario")) for r in rows})
    md = [f"# sweep {name}", "", f"varied: {', '.join(f'`{k}`' for k in varied)}"
          + ("" if "scenario" in header else f"; scenario: {scenarios[0]}"), ""]
    md += [repeats_note(rows), ""] if repeats_note(rows) else []
    md += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(c) + " |" for c in cells]
    md += [""] + [f"[{i}] {n}  " for i, n in enumerate(notes, 1)] if notes else []
    if best := winner_line(varied, rows):
        md += ["", best[0].upper() + best[1:]]
    plots = _plots(out_dir, varied, rows)
    md += [""] + [f"![{Path(p).stem}]({p})" for p in plots]
    (out_dir / "sweep.md").write_text("\n".join(md) + "\n")
    return plots


def _csv_row(r: dict) -> dict:
    """A row for sweep.csv: each spread as its field's _low, _high and _n columns (each repeat's values
    are in sweep.json)."""
    out = {k: v for k, v in r.items() if k not in ("spread", "values")}
    for k, sp in (r.get("spread") or {}).items():
        out.update({f"{k}_low": sp["low"], f"{k}_high": sp["high"], f"{k}_n": sp["n"]})
    return out


#: How a point is drawn: valid with accuracy passed, INVALID, accuracy failed.
_STYLE = {"ok": dict(marker="o", color="tab:blue", label="VALID, accuracy PASS or not run"),
          "invalid": dict(marker="x", color="tab:red", label="INVALID"),
          "failed": dict(marker="^", color="tab:orange", label="accuracy FAIL")}


def point_kind(r: dict) -> str:
    return "invalid" if not r.get("valid") else "failed" if r.get("accuracy_passed") is False else "ok"


def _numeric(xs: list) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)


def _plots(out_dir: Path, varied: list[str], rows: list[dict]) -> list[str]:
    """tokens/s against each varied parameter, one panel per scenario where it was varied (Offline
    and Server tokens/s measure different things: never one axis; a parameter is drawn only over
    the rows it applies to), one series per combination of the other varied values; and p99 TPOT
    against tokens/s for streaming points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    for key in [k for k in varied if k != "loadgen.scenario"]:
        panels = []
        for sc in dict.fromkeys(r.get("scenario") or "?" for r in rows):
            pts = [r for r in rows if (r.get("scenario") or "?") == sc and applies(key, r)
                   and r.get("tokens_per_s") is not None]
            if len({str(r.get(key)) for r in pts}) >= 2:  # a parameter that did not vary here is no axis
                panels.append((sc, pts))
        if not panels:
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4), squeeze=False)
        for ax, (sc, pts) in zip(axes[0], panels):
            _series_panel(ax, key, [k for k in varied if k not in (key, "loadgen.scenario")], pts)
            ax.set_title(sc + (" (bars: each median's interval over its repeats)" if any(r.get("spread") for r in pts)
                               else "")), ax.set_ylabel(f"tokens/s ({sc})")
        fig.suptitle(f"tokens/s vs {key}")
        fname = f"tokens_per_s_vs_{key.replace('.', '_')}.png"
        fig.tight_layout(), fig.savefig(out_dir / fname, dpi=100), plt.close(fig)
        files.append(fname)
    streaming = [r for r in rows if r.get("tpot_p99_ms") is not None and r.get("tokens_per_s") is not None]
    if streaming:
        fig, ax = plt.subplots(figsize=(8.5, 4))
        colors = iter(("tab:blue", "tab:green", "tab:purple", "tab:brown"))
        for sc in dict.fromkeys(r["scenario"] for r in streaming):
            pts = [r for r in streaming if r["scenario"] == sc]
            color = next(colors, "tab:gray")
            for kind, style in _STYLE.items():
                sel = [r for r in pts if point_kind(r) == kind]
                if sel:
                    ax.scatter([r["tpot_p99_ms"] for r in sel], [r["tokens_per_s"] for r in sel], s=60,
                               marker=style["marker"], color=color if kind == "ok" else style["color"],
                               label=f"{sc}: {style['label']}")
                    xerr, yerr = error_bar(sel, "tpot_p99_ms"), error_bar(sel, "tokens_per_s")
                    if xerr or yerr:  # repeats: each median's interval
                        ax.errorbar([r["tpot_p99_ms"] for r in sel], [r["tokens_per_s"] for r in sel], xerr=xerr,
                                    yerr=yerr, fmt="none", ecolor=color if kind == "ok" else style["color"],
                                    alpha=0.6, capsize=3)
            good = [r for r in pts if point_kind(r) == "ok"]  # an INVALID point is not a trade-off on offer
            front = sorted((good[i]["tpot_p99_ms"], good[i]["tokens_per_s"])
                           for i in pareto_front(good, "tpot_p99_ms", "tokens_per_s"))
            if front:
                ax.plot(*zip(*front), "-", color=color, alpha=0.6, label=f"{sc}: Pareto front (valid points)")
            for r in pts:  # which load each point is: its target QPS (LoadGen's effective one)
                if r.get("target_qps") is not None:
                    ax.annotate(f"{fmt(r['target_qps'])} qps", (r["tpot_p99_ms"], r["tokens_per_s"]),
                                textcoords="offset points", xytext=(5, 5), fontsize="small", color=color)
        ax.set_xlim(left=0), ax.set_ylim(bottom=0)
        ax.set_xlabel(f"p99 TPOT (ms, {whose(streaming, 'tpot_ms')})"), ax.set_ylabel("tokens/s")
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
        ax.set_title("throughput vs p99 TPOT (streaming points)")
        fig.tight_layout(), fig.savefig(out_dir / "pareto_tpot.png", dpi=100), plt.close(fig)
        files.append("pareto_tpot.png")
    return files


def _series_panel(ax, key: str, others: list[str], pts: list[dict]) -> None:
    """One line per combination of the other varied values (those that vary among these points);
    the marker says VALID / INVALID / accuracy FAIL. The legend sits outside the axes."""
    from matplotlib.lines import Line2D

    numeric = _numeric([r.get(key) for r in pts])
    order = None if numeric else sorted({str(r.get(key)) for r in pts})
    split = [k for k in others if len({str(r.get(k)) for r in pts if applies(k, r)}) > 1]
    series: dict[str, list[dict]] = {}
    for r in pts:
        label = ", ".join(f"{k}={fmt(r.get(k))}" for k in split if applies(k, r)) or "all points"
        series.setdefault(label, []).append(r)
    colors = iter(("tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"))
    x_of = (lambda r: r.get(key)) if numeric else (lambda r: order.index(str(r.get(key))))  # noqa: E731
    handles = []
    for label, sel in series.items():
        color = next(colors, "tab:gray")
        sel = sorted(sel, key=x_of)
        ax.plot([x_of(r) for r in sel], [r["tokens_per_s"] for r in sel], "-", color=color, alpha=0.5)
        if yerr := error_bar(sel, "tokens_per_s"):  # repeats: each median's interval
            ax.errorbar([x_of(r) for r in sel], [r["tokens_per_s"] for r in sel], yerr=yerr, fmt="none",
                        ecolor=color, alpha=0.6, capsize=3)
        for kind, style in _STYLE.items():
            k_sel = [r for r in sel if point_kind(r) == kind]
            if k_sel:
                ax.scatter([x_of(r) for r in k_sel], [r["tokens_per_s"] for r in k_sel], s=60, color=color,
                           marker=style["marker"], zorder=3)
        handles.append(Line2D([], [], color=color, marker="o", label=label))
    kinds = {point_kind(r) for r in pts}
    handles += [Line2D([], [], color="k", marker=_STYLE[k]["marker"], linestyle="", label=_STYLE[k]["label"])
                for k in _STYLE if k in kinds and (k != "ok" or len(kinds) > 1)]
    if not numeric:
        ax.set_xticks(range(len(order)), order)
    ax.set_ylim(bottom=0), ax.set_xlabel(key)
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
