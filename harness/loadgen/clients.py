"""result.json's `clients`: where the measuring clients ran, node by node.

For each node that ran LoadGen's driver or frontends: its frontends, the CPU its client processes
used over the timed run (the driver's too, on its node), the busiest frontend's load, the responses
its frontends received in the timed run, how they reached the driver (the driver's own node: pipes;
another node: a TCP link, links.py), and for another node the clock offset its times were moved by,
with its uncertainty and how much it had moved by the end of the run.
"""
from __future__ import annotations


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 4)


def _clock(reports: dict) -> dict | None:
    start, end = reports.get("start"), reports.get("end")
    if not start:
        return None
    out = {"offset_ms": _ms(start["offset_ns"]), "uncertainty_ms": _ms(start["rtt_ns"] // 2)}
    if end:
        # what the offset moved by over the run (drift), within both measurements' uncertainties
        out.update(end_offset_ms=_ms(end["offset_ns"]), drift_ms=_ms(end["offset_ns"] - start["offset_ns"]),
                   end_uncertainty_ms=_ms(end["rtt_ns"] // 2))
    return out


def clients_by_node(driver_node: str, client_cpu: dict, ready: dict[int, dict], stopped: dict[int, dict],
                    clocks: dict[str, dict]) -> dict:
    """`client_cpu`: client_usage()'s per-process rows; `ready` / `stopped`: each frontend's Ready info
    and Stopped counts; `clocks`: per other node, its host's clock reports (remote.py)."""
    rows = {f["frontend"]: f for f in client_cpu.get("frontends", [])}
    nodes: dict[str, dict] = {}

    def node(name: str) -> dict:
        if name not in nodes:
            nodes[name] = {"node": name, "driver": name == driver_node, "frontends": [],
                           "link": "pipes" if name == driver_node else "tcp", "cpu_s": 0.0, "frontends_cpu_s": 0.0,
                           "busy_max": None, "responses": 0, "clock": _clock(clocks.get(name, {}))}
        return nodes[name]

    drv = node(driver_node)
    drv["cpu_s"] += client_cpu.get("driver", {}).get("cpu_s") or 0.0
    for fe in sorted(ready):
        n = node(ready[fe].get("node") or driver_node)
        n["frontends"].append(fe)
        row = rows.get(fe, {})
        n["frontends_cpu_s"] += row.get("cpu_s") or 0.0
        if row.get("busy") is not None:
            n["busy_max"] = max(n["busy_max"] or 0.0, row["busy"])
        done = sum(c.get("completed", 0) for c in stopped.get(fe, {}).get("clients", {}).values())
        n["responses"] += done - ready[fe].get("warmup_requests", 0)  # the timed run's, warm-up left out
    for n in nodes.values():
        n["cpu_s"] = round(n["cpu_s"] + n["frontends_cpu_s"], 4)
        n["frontends_cpu_s"] = round(n["frontends_cpu_s"], 4)
    return {"driver_node": driver_node, "nodes": sorted(nodes.values(), key=lambda n: (not n["driver"], n["node"]))}
