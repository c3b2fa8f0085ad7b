"""The session replay's report: report.md and its plots, from result.json and turns.jsonl.

Plots: TTFT against turn index and against input length (turns inside the performance window
and after it apart), and a timeline of turns in flight with the window's end marked. It says
that perfdag's own scheduler produced the numbers: LoadGen does not model sessions.
"""
from __future__ import annotations

import json
from pathlib import Path

import harness.host.state as host_state
from harness.sessions.metrics import derived


def _fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def _p(d: dict | None, key: str) -> str:
    return _fmt(d.get(key) if d else None)


def markdown(result: dict, plots: list[str]) -> str:
    m, w, acc, osl = result["metrics"], result["metrics"]["window"], result["inline_accuracy"], result["osl"]
    plan = result["plan"]
    failed = result.get("failed_conversations") or []
    verdict = "VALID" if result.get("valid", True) else "INVALID: " + "; ".join(result.get("invalid_reasons") or [])
    lines = [
        "# Session replay", "",
        f"Scheduler: {result['scheduler']}.", "",
        f"Result (perfdag's replay): {verdict}.", "",
        f"{plan['users']} users, {result['trajectories']['started']} trajectories started "
        f"({result['trajectories']['conversations']} conversations in the file), salting "
        f"{'on' if plan['salt'] else 'off'}, tool delays {'on' if plan['tool_delays'] else 'off'}, "
        f"drain {'on' if plan['drain'] else 'off'}.", "",
        "## Performance window", "",
        f"- ends at {_fmt(w['end_s'], '.3f')} s (the first user's completion); turns sent in it are measured to their "
        f"end ({_fmt(w['measured_until_s'], '.3f')} s)",
        f"- {w['turns']} turns measured, {w['turns_after']} sent after the window (not measured)",
        f"- {_fmt(w['tokens_per_s'])} output tokens/s, {_fmt(w['turns_per_s'], '.2f')} turns/s, "
        f"concurrency mean {_fmt(w['mean_concurrency'], '.2f')}, max {w['max_concurrency']}",
        f"- TTFT p50/p90/p99 {_p(m['ttft_ms'], 'p50')}/{_p(m['ttft_ms'], 'p90')}/{_p(m['ttft_ms'], 'p99')} ms, "
        f"TPOT p50 {_p(m['tpot_ms'], 'p50')} ms, latency p50 {_p(m['latency_ms'], 'p50')} ms",
        f"- cached tokens: {m['cached_tokens']['total'] if m['cached_tokens']['reported'] else 'not reported'}"
        + (f" ({m['cached_tokens']['of_input']:.1%} of input)" if m["cached_tokens"]["of_input"] is not None else ""),
        "", "## Per turn index (turns in the window)", "",
        "| turn | n | TTFT p50 ms | TPOT p50 ms | latency p50 ms | input tokens | output tokens | cached tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in m["by_turn_index"]:
        lines.append(f"| {b['index']} | {b['turns']} | {_p(b['ttft_ms'], 'p50')} | {_p(b['tpot_ms'], 'p50')} | "
                     f"{_p(b['latency_ms'], 'p50')} | {_fmt(b['input_tokens'])} | {_fmt(b['output_tokens'])} | "
                     f"{_fmt(b['cached_tokens'])} |")
    if failed:
        lines += ["", "## Failed conversations", "",
                  "A failed turn fails its conversation (as MLCommons' client does): its later turns are not sent "
                  "and its scorable turns score 0.", "",
                  "| conversation | turn | server | turns not sent | error |", "|---|---|---|---|---|"]
        lines += [f"| {f['conversation_id']} | {f['turn']} | {f['server']} | {f['turns_not_sent']} | "
                  f"{str(f['error']).replace('|', '/')[:200]} |" for f in failed]
    if result.get("context_warnings"):
        lines += ["", "## Turns past the model's context (warned before sending)", ""]
        lines += [f"- {w}" for w in result["context_warnings"]]
    lines += ["", "## Inline accuracy", "",
              f"- score {_fmt(acc['score'], '.4f')} over {acc['turns']['scored']} scored turns "
              f"({acc['turns']['missing']} without a reply)",
              f"- output length per turn: mean {_fmt(osl['mean_tokens'])} tokens"
              + (f", band {osl['band']}: {'in' if osl['ok'] else 'OUT OF'} band" if osl["band"] else ", no band set"),
              ""]
    if host := host_state.markdown(result.get(host_state.KEY)):
        lines += host[1:] + [""]
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], result: dict, out_dir: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [(r, derived(r)) for r in rows if r["error"] is None]
    names = []
    for name, xkey, xlabel in (("ttft_by_turn.png", "index", "turn index (client turns of the conversation)"),
                               ("ttft_by_input.png", "input_tokens", "input length (tokens, as the server counts)")):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for inside, colour, label in ((True, "tab:blue", "in the window"), (False, "tab:grey", "after the window")):
            pts = [(r[xkey], d["ttft_ms"]) for r, d in done if r["in_window"] == inside
                   and r[xkey] is not None and d["ttft_ms"] is not None]
            if pts:
                ax.scatter(*zip(*pts), s=10, alpha=0.6, color=colour, label=label)
        if xkey == "index":
            means = [(b["index"], b["ttft_ms"]["mean"]) for b in result["metrics"]["by_turn_index"] if b["ttft_ms"]]
            if means:
                ax.plot(*zip(*means), color="tab:red", label="mean (window)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("TTFT (ms, client-side)")
        ax.legend()
        names.append(_save(plt, fig, out_dir / name))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    series = result.get("concurrency") or []
    if series:
        ax.step([t for t, _ in series], [n for _, n in series], where="post", label="turns in flight")
    end = result["metrics"]["window"]["end_s"]
    if end is not None:
        ax.axvline(end, color="tab:red", linestyle="--", label="window ends (first user done)")
        ax.axvspan(0, end, color="tab:green", alpha=0.08, label="performance window")
    ax.set_xlabel("time since the replay started (s)")
    ax.set_ylabel("turns in flight")
    ax.legend()
    names.append(_save(plt, fig, out_dir / "timeline.png"))
    return names


def _save(plt, fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def write_report(out_dir: Path, result: dict, rows: list[dict], observation: str | None = None) -> list[str]:
    """report.md, its PNGs and report.json in `out_dir`; the PNG names."""
    plots = plot(rows, result, out_dir)
    (out_dir / "report.md").write_text(markdown(result, plots))
    (out_dir / "report.json").write_text(json.dumps(report_doc(result, observation), indent=1))
    return plots


def report_doc(result: dict, observation: str | None) -> dict:
    """The replay as `history` and `compare` read a FullRun's report.json: its performance part under their
    names (the window's tokens/s, its turns/s as samples/s, its turns' TTFT, TPOT and latency), each the
    client's (perfdag's scheduler: LoadGen has no sessions); the inline accuracy as a score (it has no pass
    mark, so no accuracy verdict); the host's state; which observation this is."""
    m, w = result["metrics"], result["metrics"]["window"]
    perf = {"scenario": "Sessions", "valid": bool(result.get("valid")),
            "invalid_reasons": result.get("invalid_reasons") or [],
            "tokens_per_second": w.get("tokens_per_s"), "samples_per_second": w.get("turns_per_s"),
            "ttft_ms": m.get("ttft_ms") or {}, "tpot_ms": m.get("tpot_ms") or {}, "latency_ms": m.get("latency_ms") or {},
            "turns": m.get("turns"), "window_turns": w.get("turns"),
            "failed_conversations": len(result.get("failed_conversations") or []),
            "inline_accuracy": (result.get("inline_accuracy") or {}).get("score"),
            "sources": {"ttft_ms": "client", "tpot_ms": "client", "latency_ms": "client"}}
    return {"performance": perf, "accuracy": None, "host": result.get("host"),
            "observations": {"RunSessions": observation}}
