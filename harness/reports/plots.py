"""FullRun's per-request plots and statistics (no luigi), from requests.csv.

One source per number: percentiles LoadGen defines (TTFT, TPOT, latency p50/p90/p99) are
LoadGen's, and the plots draw LoadGen's p99 and the scenario's limit. The per-request timings
are the client's own clock (issue to first chunk / to the last), so they are labelled
client-side wherever they appear, and the report gives the offset between the client's p99 and
LoadGen's. TPOT is per request ((completion - first token) / (tokens - 1)), i.e. its mean
inter-token latency; streamed runs also keep every chunk's arrival and token count (chunks.npz,
harness/loadgen/chunks.py), from which itl.png shows the per-token ITL and the inter-chunk gaps.
A limit far above the data (OFF_SCALE) is written on the plot, not drawn to scale.
"""
from __future__ import annotations

import itertools
import json
import os
import traceback
from pathlib import Path

import numpy as np

from harness.loadgen.chunks import itl_values, later_chunks
from harness.loadgen.results import latency_start_ms

STATS = ("min", "mean", "std", "p50", "p90", "p99", "max")
#: A limit more than this many times the largest value is annotated instead of drawn: scaled to it, the
#: data would be a flat smear at the bottom.
OFF_SCALE = 5.0
STREAMING = ("Server", "Interactive")
#: Draw every other figure in a forked child where the host has a second CPU (_render); a test that spies on
#: what is drawn in its own process turns it off.
FORK = True


def _stats(values) -> dict | None:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return None
    out = {"min": v.min(), "mean": v.mean(), "std": v.std(), "p50": np.percentile(v, 50),
           "p90": np.percentile(v, 90), "p99": np.percentile(v, 99), "max": v.max()}
    return {k: round(float(x), 3) for k, x in out.items()} | {"n": int(v.size)}


def decode_tps(r: dict) -> float | None:
    """A streamed request's own generation speed after its first token (tokens/s)."""
    if r.get("tpot_ms"):
        return 1000.0 / r["tpot_ms"]
    return None


#: (key, label, unit, how a request gives it)
MEASURES = [
    ("ttft_ms", "TTFT", "ms", lambda r: r.get("ttft_ms")),
    ("tpot_ms", "TPOT (per request)", "ms", lambda r: r.get("tpot_ms")),
    ("latency_ms", "request latency", "ms", lambda r: r.get("latency_ms")),
    ("input_tokens", "input length", "tokens", lambda r: r.get("input_tokens")),
    ("output_tokens", "output length", "tokens", lambda r: r.get("n_tokens")),
    ("request_tokens_per_s", "per-request decode speed", "tokens/s", decode_tps),
]


def request_stats(requests: list[dict]) -> dict:
    """min/mean/std/p50/p90/p99/max of each per-request measure (client-side timings)."""
    return {key: s for key, _, _, get in MEASURES if (s := _stats(get(r) for r in requests))}


def offsets(performance: dict, stats: dict) -> dict:
    """Client-side p99 against LoadGen's for what both measure from the same start: how far the client's
    clock reads off. Not a number that is the client's own on both sides (LoadGen measured no TTFT in a
    streamed closed loop: the report's is the client's), nor Offline's latency, which LoadGen takes from
    its one issue of every sample and the client from its own send."""
    out = {}
    said = performance.get("sources") or {}
    for key in ("ttft_ms", "tpot_ms", "latency_ms"):
        if said.get(key, "LoadGen") != "LoadGen" or (key == "latency_ms" and said.get("latency_from") == "send"):
            continue
        lg, cl = (performance.get(key) or {}).get("p99"), (stats.get(key) or {}).get("p99")
        if lg is not None and cl is not None:
            out[key] = {"loadgen_p99": lg, "client_p99": cl, "client_minus_loadgen": round(cl - lg, 3)}
    return out


# --- plots --------------------------------------------------------------------------------------

_NICE_BINS = (0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600)


def arrival_bins(requests: list[dict], target_bins: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """(bin edges s, tokens/s per bin), tokens counted when they arrived. A streamed request's first
    token arrives at its TTFT and the rest evenly until completion (its TPOT). A non-streamed
    request's tokens all arrive at its completion; those runs get bins wide enough to hold about
    8 completion batches (requests finishing within a few ms of each other), so a bin is not a staircase of whole batches (spreading them over the
    request's lifetime would credit tokens to the time it waited in the server's queue)."""
    starts, ends, firsts, counts = [], [], [], []
    for r in requests:
        t0 = latency_start_ms(r) / 1000  # where its TTFT and latency start (the send, in a closed loop)
        starts.append(t0)
        ends.append(t0 + r["latency_ms"] / 1000)
        firsts.append(t0 + r["ttft_ms"] / 1000 if r.get("ttft_ms") is not None else None)
        counts.append(r["n_tokens"])
    span = max(max(ends), 1e-3)
    if all(f is None for f in firsts):  # completions come in batches: ~8 batches a bin
        gaps = np.diff(np.sort(ends)) * 1000
        batches = 1 + int((gaps > max(5.0, 20 * float(np.median(gaps)) if gaps.size else 5.0)).sum())
        target_bins = max(1, min(target_bins, batches // 8))
    w = next((b for b in _NICE_BINS if span / b <= target_bins), _NICE_BINS[-1])
    edges = np.arange(0, span + w, w)
    if edges[-1] < span:
        edges = np.append(edges, edges[-1] + w)
    tokens = np.zeros(len(edges) - 1)
    for s, e, f, n in zip(starts, ends, firsts, counts):
        if f is None or e <= (f or s):  # not streamed: every token arrives at completion
            tokens[_bin(edges, e, len(tokens))] += n
            continue
        tokens[_bin(edges, f, len(tokens))] += 1  # the first token at TTFT, the others over [first, end]
        s, n = f, n - 1
        if n <= 0:
            continue
        # the share of [s, e] in each bin
        lo, hi = np.clip(edges[:-1], s, e), np.clip(edges[1:], s, e)
        tokens += n * (hi - lo) / (e - s)
    # The last bin ends at the last completion, not a full width later (a short tail is no collapse).
    widths = np.diff(edges)
    widths[-1] = max(span - edges[-2], 1e-9)
    edges[-1] = span
    if len(widths) > 1 and widths[-1] < w / 2:  # merge a short tail into the bin before
        tokens[-2] += tokens[-1]
        widths[-2] += widths[-1]
        tokens, widths, edges = tokens[:-1], widths[:-1], np.delete(edges, -2)
    return edges, tokens / widths


def _bin(edges: np.ndarray, t: float, n: int) -> int:
    return min(max(int(np.searchsorted(edges, t, side="right")) - 1, 0), n - 1)  # no float floor-division slips


def plot_all(requests: list[dict], out_dir: Path, title: str, perf: dict, chunks=None) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not requests:
        return []
    out_dir = Path(out_dir)
    streaming = any(r.get("ttft_ms") is not None for r in requests)
    jobs = [lambda: _throughput(plt, requests, out_dir, title, perf)]
    if streaming:
        jobs.append(lambda: _over_time(plt, requests, out_dir, title, perf))
        jobs.append(lambda: _distributions(plt, requests, out_dir, title, perf))
    if chunks is not None and chunks[1].size:
        jobs.append(lambda: _itl(plt, chunks, out_dir, title))
    jobs.append(lambda: _lengths(plt, requests, out_dir, title))
    return _render(jobs)


def _render(jobs: list) -> list[str]:
    """Each job draws and saves one figure and returns its file's name. Where the host has a second CPU, a
    forked child draws every other figure meanwhile (drawing is CPU-bound and holds the GIL; the figures
    share nothing): the report costs about half its plots' time. The child's failure is raised here."""
    if not FORK or len(jobs) < 2 or (os.cpu_count() or 1) < 2 or not hasattr(os, "fork"):
        return [job() for job in jobs]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its half, its names (or its traceback) on the pipe, and out without cleanup
        os.close(r)
        try:
            said, code = json.dumps([job() for job in jobs[1::2]]).encode(), 0
        except BaseException:
            said, code = traceback.format_exc()[-8000:].encode(), 1
        os.write(w, said)
        os._exit(code)
    os.close(w)
    try:
        mine = [job() for job in jobs[0::2]]
    finally:  # the child is reaped whatever happened here
        with os.fdopen(r, "rb") as f:
            said = f.read()
        _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"drawing plots in a child process failed (wait status {status}):\n"
                           f"{said.decode(errors='replace')}")
    theirs = json.loads(said)
    return [name for pair in itertools.zip_longest(mine, theirs) for name in pair if name is not None]


def _save(plt, fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def _legend_outside(ax) -> None:
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)


def _throughput(plt, requests, out_dir: Path, title: str, perf: dict) -> str:
    edges, rates = arrival_bins(requests)
    streamed = any(r.get("ttft_ms") is not None for r in requests)
    fig, ax = plt.subplots(figsize=(9, 4))
    how = "as streamed" if streamed else "at completion\n(not streamed)"
    ax.stairs(rates, edges, fill=True, alpha=0.5, color="tab:blue",
              label=f"client-side tokens/s\nby arrival, {how},\n{edges[1] - edges[0]:g} s bins")
    tps = perf.get("tokens_per_second")
    if tps:
        ax.axhline(tps, color="k", linestyle="--", linewidth=1, label=f"LoadGen: {tps:,.0f} tokens/s")
    ax.set_xlim(0, edges[-1]), ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since the first query"), ax.set_ylabel("generated tokens/s")
    ax.set_title(f"{title}: throughput over time")
    _legend_outside(ax)
    return _save(plt, fig, out_dir / "throughput.png")


def _over_time(plt, requests, out_dir: Path, title: str, perf: dict) -> str:
    """TTFT and request latency of every request against when it was issued: when the server fell behind."""
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    t = np.array([r["issue_ms"] / 1000 for r in requests])
    for ax, key, name, limit_key in ((axes[0], "ttft_ms", "TTFT", "ttft_limit_ms"),
                                     (axes[1], "latency_ms", "request latency", None)):
        v = np.array([r.get(key) if r.get(key) is not None else np.nan for r in requests], dtype=float)
        ax.scatter(t, v, s=6, alpha=0.5, color="tab:blue", label=f"client-side {name}, per request")
        lg = (perf.get(key) or {}).get("p99")
        if lg is not None:
            ax.axhline(lg, color="tab:orange", linewidth=1.5, label=f"{_source(perf, key)} p99 {lg:,.1f} ms")
        limit = perf.get(limit_key) if limit_key else None
        if limit and off_scale(limit, v):
            _note_off_scale(ax, limit, "ms", vertical=False)
        elif limit:
            ax.axhline(limit, color="tab:red", linestyle="--", linewidth=1.5, label=f"limit (p99) {limit:,.0f} ms")
        if np.nanmax(v) / max(np.nanmin(v[v > 0]) if (v > 0).any() else 1, 1e-3) > 50:
            ax.set_yscale("log")
        ax.set_ylabel(f"{name} (ms)")
        _legend_outside(ax)
    axes[1].set_xlabel("issue time (seconds since the first query)")
    axes[0].set_title(f"{title}: latency over time")
    return _save(plt, fig, out_dir / "latency_over_time.png")


def _source(perf: dict, key: str) -> str:
    """Whose p99 a line draws: LoadGen's, or the client's where LoadGen measured none."""
    return (perf.get("sources") or {}).get(key) or "LoadGen"


def _hist(ax, values, name: str, unit: str, p99=None, p99_label="", limit=None, per="request") -> None:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        ax.set_visible(False)
        return
    lo = max(float(v[v > 0].min()) if (v > 0).any() else 1e-3, 1e-3)
    far = bool(limit) and off_scale(limit, v)
    hi = max(float(v.max()), 0 if far else limit or 0)
    log = hi / lo > 50
    ax.hist(np.clip(v, lo, None) if log else v, bins=np.geomspace(lo, hi * 1.05, 40) if log else 40,
            color="tab:blue", alpha=0.7, label=f"{name} (client-side, per {per})")
    if log:
        ax.set_xscale("log")
    if p99 is not None:
        ax.axvline(p99, color="tab:orange", linewidth=1.5, label=f"{p99_label} p99 {p99:,.2f} {unit}")
    if far:
        _note_off_scale(ax, limit, unit, vertical=True)
    elif limit:
        ax.axvline(limit, color="tab:red", linestyle="--", linewidth=1.5, label=f"limit (p99) {limit:,.0f} {unit}")
    ax.set_ylim(bottom=0), ax.set_xlabel(f"{unit}" + (" (log scale)" if log else "")), ax.set_ylabel(f"{per}s")
    ax.set_title(name)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(0, -0.22), borderaxespad=0, ncol=1)


def off_scale(limit: float, values) -> bool:
    """Whether a limit lies so far above the data that drawing it would squash the data (OFF_SCALE)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size) and limit > OFF_SCALE * float(v.max())


def _note_off_scale(ax, limit: float, unit: str, vertical: bool) -> None:
    """The limit written at the edge it lies beyond, with an arrow pointing there."""
    text = f"limit (p99) {limit:,.0f} {unit}: off scale"
    if vertical:  # a histogram: the limit lies to the right
        ax.annotate(text + " →", xy=(0.99, 0.97), xycoords="axes fraction", ha="right", va="top",
                    color="tab:red", fontsize="small")
    else:  # over time: the limit lies above
        ax.annotate(text + " ↑", xy=(0.99, 0.97), xycoords="axes fraction", ha="right", va="top",
                    color="tab:red", fontsize="small")


def _itl(plt, chunks, out_dir: Path, title: str) -> str:
    """Per-token inter-token latency, the gaps between chunks, and how many tokens a chunk carried."""
    offsets, arr = chunks
    itl = itl_values(offsets, arr)
    gaps = later_chunks(offsets, arr)["gap_us"] / 1000.0
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    for ax, v, name, per in ((axes[0], itl, "ITL (a chunk's gap shared by its tokens)", "token"),
                             (axes[1], gaps, "inter-chunk gap", "chunk")):
        if not v.size:
            ax.set_visible(False)
            continue
        _hist(ax, v, name, "ms", per=per)
        for q, color in ((50, "tab:green"), (99, "tab:orange")):
            x = float(np.percentile(v, q))
            ax.axvline(x, color=color, linewidth=1.2, label=f"p{q} {x:,.2f} ms")
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(0, -0.22), borderaxespad=0)
    k = arr["tokens"].astype(int)
    counts = np.bincount(k)
    sizes = np.nonzero(counts)[0]
    axes[2].bar(sizes, counts[sizes] * sizes, color="tab:blue", alpha=0.7)
    axes[2].set_xlabel("tokens in the chunk"), axes[2].set_ylabel("tokens that arrived so")
    axes[2].set_title(f"tokens per chunk: {float((k > 1).sum()) / k.size:.0%} of chunks carry several")
    fig.suptitle(f"{title}: inter-token latency (client-side)")
    return _save(plt, fig, out_dir / "itl.png")


def _distributions(plt, requests, out_dir: Path, title: str, perf: dict) -> str:
    """TTFT, TPOT (per request: its mean inter-token gap) and per-request decode speed."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    _hist(axes[0], [r.get("ttft_ms") for r in requests], "TTFT", "ms", (perf.get("ttft_ms") or {}).get("p99"),
          _source(perf, "ttft_ms"), perf.get("ttft_limit_ms"))
    _hist(axes[1], [r.get("tpot_ms") for r in requests], "TPOT (mean inter-token gap)", "ms",
          (perf.get("tpot_ms") or {}).get("p99"), _source(perf, "tpot_ms"), perf.get("tpot_limit_ms"))
    tps = [decode_tps(r) for r in requests]
    _hist(axes[2], tps, "per-request decode speed", "tokens/s")
    fig.suptitle(f"{title}: per-request distributions")
    return _save(plt, fig, out_dir / "distributions.png")


def _lengths(plt, requests, out_dir: Path, title: str) -> str:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, name in ((axes[0], "input_tokens", "input length"), (axes[1], "n_tokens", "output length")):
        v = [r[key] for r in requests if r.get(key) is not None]
        if not v:
            ax.text(0.5, 0.5, f"{name}: not recorded", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        lo, hi = min(v), max(v)
        ax.hist(v, bins=np.arange(lo, hi + 2) - 0.5 if hi - lo < 60 else 40, color="tab:blue", alpha=0.7)
        ax.set_xlabel(f"{name} (tokens)"), ax.set_ylabel("requests"), ax.set_ylim(bottom=0)
        ax.set_title(f"{name}: mean {np.mean(v):,.1f}, min {lo:,}, max {hi:,}")
    fig.suptitle(f"{title}: request lengths")
    return _save(plt, fig, out_dir / "lengths.png")


def stats_markdown(stats: dict, offs: dict, said: dict | None = None) -> list[str]:
    """The stats table and the client-vs-LoadGen offsets, as report.md lines (`said`: the report's
    `sources`, whose each percentile above is and where the client's latencies start)."""
    if not stats:
        return []
    said = said or {}
    start = "the client's send" if said.get("latency_from") == "send" else "LoadGen's issue"
    own = [k.removesuffix("_ms").upper() for k in ("ttft_ms", "tpot_ms") if said.get(k) == "client"]
    whose = ("the percentiles above are LoadGen's" + (f", but {' and '.join(own)}, which LoadGen did not measure: "
                                                      "those are the client's, these" if own else ""))
    lines = ["", "## Per-request statistics", "",
             f"Client-side: the harness's own clock per request (from {start} to the first token / to completion); "
             f"{whose}. TPOT is per request (its mean inter-token gap).", "",
             "| measure | unit | n | " + " | ".join(STATS) + " |", "|---|---|---|" + "---|" * len(STATS)]
    for key, label, unit, _ in MEASURES:
        if key in stats:
            s = stats[key]
            lines.append(f"| {label} | {unit} | {s['n']:,} | " + " | ".join(_num(s[k]) for k in STATS) + " |")
    if offs:
        lines += ["", "Client-side p99 against LoadGen's: " + "; ".join(
            f"{k.removesuffix('_ms').upper()} {_num(o['client_p99'])} vs {_num(o['loadgen_p99'])} ms "
            f"({o['client_minus_loadgen']:+.2f} ms)" for k, o in offs.items())]
    return lines


def _num(v: float) -> str:
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
