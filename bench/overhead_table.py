"""Summary and tables of bench/harness_overhead.py's raw results (a results file stands alone:
`python bench/harness_overhead.py --table FILE` prints its table).

Per (protocol, mode, server) and round: each client's µs per response (CPU of a large run minus a
small one, over the difference of their responses), and perfdag / the best bare loop of that round.
Over rounds: each client's median with min and max, the ratio's min / median / max, and the load
average recorded before each round.
"""
from __future__ import annotations

import statistics


def per_response_us(runs: list[dict], small: int, large: int) -> float | None:
    by = {r["n"]: r for r in runs}
    if small not in by or large not in by:
        return None
    d_resp = by[large]["responses"] - by[small]["responses"]
    d_cpu = by[large]["cpu_s"] - by[small]["cpu_s"]
    # a large run that cost no more than the small one: noise larger than the work (sizes too small
    # for the machine's load), no figure
    return d_cpu * 1e6 / d_resp if d_resp > 0 and d_cpu > 0 else None


def _spread(values: list[float]) -> dict | None:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)} if values else None


def bare_clients(doc: dict, proto: str) -> list[str]:
    """The bare loops that ran for `proto` (every client but perfdag's)."""
    return sorted({r["client"] for r in doc["runs"] if r["protocol"] == proto and not r["client"].startswith("perfdag")})


def summarise(doc: dict) -> list[dict]:
    """One row per (protocol, mode, server): every client's µs/response over rounds, and the ratio
    perfdag / best bare formed within each round."""
    a = doc["args"]
    rows = []
    for proto in a["protocols"]:
        for mode in a["modes"]:
            for server in a.get("servers", ["burst"]):
                cell = [r for r in doc["runs"] if r["protocol"] == proto and r["mode"] == mode
                        and r.get("server", "burst") == server]
                clients = sorted({r["client"] for r in cell})
                per_round = []
                for rnd in range(a["rounds"]):
                    here = [r for r in cell if r["round"] == rnd]
                    costs = {c: per_response_us([r for r in here if r["client"] == c], a["small"], a["large"])
                             for c in clients}
                    bares = {c: v for c, v in costs.items() if not c.startswith("perfdag") and v}
                    if not costs.get("perfdag") or not bares:
                        continue
                    best = min(bares, key=bares.get)
                    per_round.append({"round": rnd, "costs": costs, "best_bare": best,
                                      "ratio": costs["perfdag"] / bares[best]})
                if not per_round:
                    continue
                us = {c: _spread([p["costs"][c] for p in per_round if p["costs"].get(c)]) for c in clients}
                before = [p["costs"]["perfdag-before"] / p["costs"]["perfdag"] for p in per_round
                          if p["costs"].get("perfdag-before")]
                loads = [r["load1"] for r in cell]
                rows.append({"protocol": proto, "mode": mode, "server": server, "rounds": len(per_round),
                             "us": us, "ratio": _spread([p["ratio"] for p in per_round]),
                             "before_over_now_median": statistics.median(before) if before else None,
                             "load": [min(loads), max(loads)], "per_round": per_round})
    return rows


def _load(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f}"  # files of older versions did not record it


def _us(s: dict | None) -> str:
    return f"{s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f})" if s else "-"


def table(doc: dict) -> str:
    a = doc["args"]
    loads = doc.get("load_before_round") or []
    head = (f"{a['small']} and {a['large']} samples x {a['tokens']} tokens "
            f"({a.get('tokens_per_chunk', 1)} per streamed response), {a['in_flight']} in flight over "
            f"{a['conns']} streams/clients; paced servers {a.get('pace_ms', '-')} ms per token; "
            f"{doc['machine']['cpus']} CPUs; {doc['started']}; load average (1 min) at start "
            f"{_load(doc.get('load_at_start'))}, before rounds {', '.join(f'{x:.2f}' for x in loads) or '?'}")
    lines = [head]
    rows = [] if doc.get("scaling") else summarise(doc)  # recomputed: files of older versions read alike
    if rows:
        lines += ["", "µs of client CPU per response: median (min-max) over rounds; ratio = perfdag / the "
                  "round's best bare loop", "",
                  "| protocol | mode | server | perfdag | bare loops | ratio min / median / max | rounds | load |",
                  "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bares = ", ".join(f"{c} {_us(r['us'].get(c))}" for c in bare_clients(doc, r["protocol"])
                          if r["us"].get(c))
        q = r["ratio"]
        lines.append(f"| {r['protocol']} | {'streaming' if r['mode'] == 'stream' else 'non-streaming'} | "
                     f"{r.get('server', 'burst')} | {_us(r['us'].get('perfdag'))} | {bares} | "
                     f"{q['min']:.2f} / {q['median']:.2f} / {q['max']:.2f} | {r['rounds']} | "
                     f"{r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    if any(r.get("before_over_now_median") for r in rows):
        lines += ["", "| protocol | mode | server | perfdag before µs/resp | now | before / now (median) |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            if r.get("before_over_now_median"):
                lines.append(f"| {r['protocol']} | {r['mode']} | {r.get('server', 'burst')} | "
                             f"{_us(r['us'].get('perfdag-before'))} | {_us(r['us'].get('perfdag'))} | "
                             f"{r['before_over_now_median']:.2f} |")
    if any(r["us"].get("perfdag-tcp") for r in rows):
        lines += ["", "perfdag with its frontend behind a TCP link (harness.client_nodes' path, both ends on this "
                  "host: the client host and link included)", "",
                  "| protocol | mode | server | perfdag µs/resp | perfdag-tcp | tcp / pipes (median) |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            tcp, now = r["us"].get("perfdag-tcp"), r["us"].get("perfdag")
            if tcp and now:
                lines.append(f"| {r['protocol']} | {r['mode']} | {r.get('server', 'burst')} | {_us(now)} | "
                             f"{_us(tcp)} | {tcp['median'] / now['median']:.2f} |")
    if doc.get("scaling"):
        lines += ["", f"{a['large']} samples per run, {a['in_flight']} in flight per frontend; client CPU of the "
                  "whole run (start-up included) per response", "",
                  "| protocol | frontends | responses/s (median) | client CPU µs/resp | client-bound |",
                  "|---|---|---|---|---|"]
        for s in doc["scaling"]:
            lines.append(f"| {s['protocol']} | {s['frontends']} | {s['responses_per_s']:.0f} | "
                         f"{s['cpu_us']:.0f} | {', '.join(s['client_bound'])} |")
    return "\n".join(lines)
