"""The host's state during a measurement: result.json's `host` section, defined here once.

The same load measured twice on one host moved TTFT p50 from 26 to 117 ms while the host's load went
from 8 to 13: a number means little without what else ran. So every measuring stage records, around
its measurement (`begin` before, `end` after):

- `load_before`, `load_after`: the load average (1, 5, 15 minutes);
- `client_cpu_s`: CPU-seconds of perfdag's own process and the children it waited for (the LoadGen
  driver and its frontends), and `client_cpus`: the CPUs it may run on (its affinity);
- `servers`: each server's CPU-seconds, from its pid (the process and its children: Triton's Python
  stubs) where it runs on this host, else from its own `/metrics` (`process_cpu_seconds_total`,
  which vLLM and SGLang export) where it has one, else none, with why;
- `others`: the processes that used the most CPU meanwhile (neither perfdag's nor its servers'),
  `others_cpu_s` their total and `others_cpus` that over the wall time;
- `busy` and `busy_reasons`: whether the measurement shared the host (BUSY_OTHERS_CPUS or more of
  other work on average, or a load average over the CPUs before it began).
"""
from __future__ import annotations

import json
import os
import resource
import socket
import time
from pathlib import Path
from typing import Sequence

from harness.cpus import available_cpus
from harness.serving.processes import is_same_process
from harness.serving.spec import on_this_host, url_of

KEY = "host"  # result.json's and report.json's key
TOP = 5  # how many other processes are named
#: Other work that makes a host busy: this many CPUs on average, or a quarter of the usable ones.
BUSY_OTHERS_CPUS = 0.5
LOCAL = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def _cpu_of(p) -> float:
    """CPU-seconds of a psutil process, with those of the children it reaped."""
    t = p.cpu_times()
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


def _tree(pid: int) -> tuple[float | None, set[int]]:
    """CPU-seconds of a process and its live descendants, and their pids (None: gone)."""
    import psutil  # psutil reads /proc: kept off the no-op path

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None, set()
    total, pids = 0.0, set()
    for p in procs:
        try:
            total += _cpu_of(p)
            pids.add(p.pid)
        except psutil.Error:
            continue
    return total, pids


def _listening_pid(port: int) -> int | None:
    """The local process listening on `port` (one this user may see), for a server perfdag did not start."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return c.pid
    return None


def _metrics_cpu(rec: dict, timeout_s: float = 2.0) -> float | None:
    """process_cpu_seconds_total from the server's own Prometheus /metrics (vLLM, SGLang), or None."""
    import httpx

    try:
        r = httpx.get(f"http://{url_of(rec)}/metrics", timeout=timeout_s)
    except (httpx.HTTPError, ValueError):
        return None
    if r.status_code != 200:
        return None
    for row in r.text.splitlines():  # Prometheus text: "process_cpu_seconds_total 1234.5" (no labels)
        name, _, value = row.partition(" ")
        if name == "process_cpu_seconds_total":
            try:
                return float(value.split()[0])
            except (ValueError, IndexError):
                return None
    return None


def _server_sources(servers: Sequence[dict]) -> list[dict]:
    """How each server's CPU is read: its pid tree (ours, or a local process found by its port), its
    metrics, or not at all (on another node)."""
    out = []
    for rec in servers:
        url = url_of(rec)
        entry = {"server": url, "pid": None, "from": None, "why": None}
        if not rec.get("external") and on_this_host(rec) and \
                is_same_process(rec.get("pid"), rec.get("create_time")):  # its CPU is only read, never signalled
            entry.update(pid=rec["pid"], **{"from": "pid"})
        elif rec.get("external") and rec.get("host") in LOCAL + (socket.gethostname(),) \
                and (pid := _listening_pid(int(rec.get("port") or rec.get("grpc_port") or 0))):
            entry.update(pid=pid, **{"from": "pid (found by its port)"})
        elif not on_this_host(rec):
            entry["why"] = f"on node {rec.get('node')}, not this host"
        out.append(entry)
    return out


def _others(skip: set[int]) -> dict[int, tuple[str, float, float]]:
    """pid -> (name, CPU-seconds, start time) of every process but `skip`."""
    import psutil

    out = {}
    for p in psutil.process_iter(["name", "cpu_times", "create_time"]):
        if p.pid in skip:
            continue
        info = p.info
        t = info.get("cpu_times")
        if t is None:
            continue
        out[p.pid] = (info.get("name") or "?", t.user + t.system, info.get("create_time") or 0.0)
    return out


def _own_pids() -> set[int]:
    import psutil

    try:
        me = psutil.Process()
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    except psutil.Error:
        return {os.getpid()}


def _client_cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def begin(servers: Sequence[dict]) -> dict:
    """What `end` subtracts from: taken just before a measurement starts."""
    sources = _server_sources(servers)
    server_cpu, server_pids = [], set()
    for s in sources:
        cpu = None
        if s["pid"] is not None:
            cpu, pids = _tree(s["pid"])
            server_pids |= pids
        elif s["why"] is None:
            cpu = _metrics_cpu(next(r for r in servers if url_of(r) == s["server"]))
        server_cpu.append(cpu)
    return {"t": time.monotonic(), "wall": time.time(), "load": list(os.getloadavg()), "client": _client_cpu(),
            "sources": sources, "server_cpu": server_cpu, "server_pids": server_pids,
            "others": _others(_own_pids() | server_pids)}


def end(start: dict, servers: Sequence[dict]) -> dict:
    """result.json's `host` section for the measurement that began at `start`."""
    wall_s = max(time.monotonic() - start["t"], 1e-9)
    load_after = list(os.getloadavg())
    client = _client_cpu() - start["client"]
    rows, server_pids = [], set(start["server_pids"])
    for s, before in zip(start["sources"], start["server_cpu"]):
        after, why = None, s["why"]
        if s["pid"] is not None:
            after, pids = _tree(s["pid"])
            server_pids |= pids
            why = why or (None if after is not None else "the process is gone")
        elif why is None:
            rec = next((r for r in servers if url_of(r) == s["server"]), None)
            after = _metrics_cpu(rec) if rec else None
            why = None if after is not None else ("not on this host's pids and no process_cpu_seconds_total "
                                                  "in its /metrics")
            s = {**s, "from": "metrics" if after is not None else None}
        cpu = None if before is None or after is None else round(max(0.0, after - before), 3)
        rows.append({"server": s["server"], "pid": s["pid"], "cpu_s": cpu,
                     "from": s["from"] if cpu is not None else None,
                     "why": None if cpu is not None else why or "not measured"})
    now = _others(_own_pids() | server_pids)
    used = []
    for pid, (name, cpu, started) in now.items():
        was = start["others"].get(pid)
        if was is not None and abs(was[2] - started) < 1.0:
            d = cpu - was[1]
        elif started >= start["wall"] - 1.0:
            d = cpu  # started during the measurement
        else:
            continue
        if d > 0:
            used.append((d, pid, name))
    used.sort(reverse=True)
    others_cpu = sum(d for d, _, _ in used)
    usable = available_cpus()
    doc = {"hostname": socket.gethostname(), "cpus": os.cpu_count(), "usable_cpus": usable,
           "client_cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
           "wall_s": round(wall_s, 3), "load_before": [round(x, 2) for x in start["load"]],
           "load_after": [round(x, 2) for x in load_after], "client_cpu_s": round(client, 3), "servers": rows,
           "others": [{"pid": pid, "name": name, "cpu_s": round(d, 3)} for d, pid, name in used[:TOP]],
           "others_cpu_s": round(others_cpu, 3), "others_cpus": round(others_cpu / wall_s, 3)}
    doc["busy_reasons"] = busy_reasons(doc)
    doc["busy"] = bool(doc["busy_reasons"])
    return doc


def busy_reasons(h: dict) -> list[str]:
    """Why a host was busy during the measurement (empty: it was not, as far as this host can tell)."""
    usable = h.get("usable_cpus") or h.get("cpus") or 1
    out = []
    threshold = max(BUSY_OTHERS_CPUS, usable / 4)
    if (h.get("others_cpus") or 0) >= threshold:
        top = ", ".join(f"{o['name']} (pid {o['pid']}) {o['cpu_s']:.1f}" for o in (h.get("others") or [])[:3])
        out.append(f"other processes used {h['others_cpus']:.2f} of {usable} CPUs on average "
                   f"({h['others_cpu_s']:.1f} CPU-s; most: {top})")
    load = (h.get("load_before") or [0])[0]
    if load > usable:
        out.append(f"the load average was {load:.1f} on {usable} CPUs when it began")
    return out


def line(h: dict | None) -> str | None:
    """One line for a summary: load before -> after, the client's and servers' CPU, the others'."""
    if not h:
        return None
    servers = [s["cpu_s"] for s in h.get("servers") or []]
    served = ("servers " + " + ".join("?" if c is None else f"{c:.1f}" for c in servers) + " CPU-s, "
              if servers else "")
    return (f"{h['hostname']}, {h.get('usable_cpus')} CPUs: load {h['load_before'][0]:.1f} -> "
            f"{h['load_after'][0]:.1f}; "
            f"client {h['client_cpu_s']:.1f} CPU-s, {served}others {h['others_cpus']:.2f} CPUs "
            f"over {h['wall_s']:.1f} s")


def markdown(h: dict | None) -> list[str]:
    """report.md's section on the host."""
    if not h:
        return []
    lines = ["", "## Host", "", line(h), ""]
    if h.get("busy"):
        lines += [f"> **Busy host**: {'; '.join(h['busy_reasons'])}", ""]
    lines += ["| process | pid | CPU-s | from |", "|---|---|---|---|",
              f"| perfdag's client (its process, the LoadGen driver and frontends), on CPUs "
              f"{_cpus(h.get('client_cpus'))} | - | {h['client_cpu_s']:.2f} | rusage |"]
    for s in h.get("servers") or []:
        lines.append(f"| server {s['server']} | {s['pid'] or '-'} | "
                     f"{'-' if s['cpu_s'] is None else format(s['cpu_s'], '.2f')} | {s['from'] or s['why']} |")
    for o in h.get("others") or []:
        lines.append(f"| other: {o['name']} | {o['pid']} | {o['cpu_s']:.2f} | /proc |")
    return lines


def _cpus(cpus) -> str:
    if not cpus:
        return "?"
    runs, start = [], cpus[0]
    for a, b in zip(cpus, cpus[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ",".join(runs)


def record(out_dir: Path, doc: dict, host: dict) -> None:
    """Adds the host section to the run's result.json (where the stage wrote one) and to its output
    document `doc` (its `result` where it has one)."""
    path = Path(out_dir) / "result.json"
    if path.is_file():
        result = json.loads(path.read_text())
        result[KEY] = host
        path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    target = doc.get("result") if isinstance(doc.get("result"), dict) else None
    if target is not None:
        target[KEY] = host


def differences(a: dict | None, b: dict | None) -> list[str]:
    """How two measurements' hosts differed, in words (empty: alike as far as they say)."""
    if not a or not b:
        return [] if a is b else ["one measurement recorded no host state (measured before perfdag kept it)"]
    out = []
    if a.get("hostname") != b.get("hostname"):
        out.append(f"measured on different hosts ({a.get('hostname')} and {b.get('hostname')})")
    if a.get("usable_cpus") != b.get("usable_cpus"):
        out.append(f"with {a.get('usable_cpus')} and {b.get('usable_cpus')} usable CPUs")
    if bool(a.get("busy")) != bool(b.get("busy")):
        busy, which = (a, "A") if a.get("busy") else (b, "B")
        out.append(f"{which}'s host was busy ({'; '.join(busy.get('busy_reasons') or [])}), the other's not")
    elif abs((a.get("others_cpus") or 0) - (b.get("others_cpus") or 0)) >= BUSY_OTHERS_CPUS:
        out.append(f"other work used {a.get('others_cpus', 0):.2f} CPUs during A and {b.get('others_cpus', 0):.2f} "
                   "during B")
    return out
