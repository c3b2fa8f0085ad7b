"""Each serving role's GPUs sampled over a measurement: utilisation, memory, power (NVML).

Which GPUs: every instance whose record sets CUDA_VISIBLE_DEVICES (as perfdag placed it), on each node
it runs on. NVML reads only its own host's GPUs, so a sampler runs on every such node: a thread here,
and on another node `python -m harness.serving.gpu_telemetry INTERVAL ID,...` started by the caller's
command for that node (an `srun --overlap --nodelist` step), which samples until its stdin closes and
prints its readings as one JSON line. Each sampler reads an instance's GPU ids through its own
CUDA_VISIBLE_DEVICES when that lists indexes (inside a Slurm step: the job's GPUs on the node, in
NVML's numbering), else takes them as NVML's.

Where NVML answers (nvidia-ml-py's `pynvml` and a driver), every GPU is read every `interval_s`:
utilisation (GPU and memory, %), memory used, power. The result gives each role's GPUs (node, index,
mean and max of each reading), the role's mean utilisation and mean total power. Where it does not (no
library, no driver: this CPU host), that node's GPUs are not sampled and the result says why; servers
without GPUs get no telemetry at all (and pynvml is never imported).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from typing import Callable

from harness import CHECKOUT
from harness.serving.spec import this_node

INTERVAL_S = 0.5


def _indexes(value: str | None) -> list[int]:
    parts = [x.strip() for x in (value or "").split(",") if x.strip()]
    return [int(x) for x in parts] if parts and all(x.isdigit() for x in parts) else []


def placed_gpus(records: list[dict]) -> dict[str, dict[int, tuple[str, str]]]:
    """node -> {GPU id as placed: (role, instance)} for every instance with GPUs ("" : no node recorded)."""
    count: dict[str, int] = {}
    out: dict[str, dict[int, tuple[str, str]]] = {}
    for rec in records:
        role = rec.get("role") or "server"
        name = f"{role} {count.get(role, 0)}"
        count[role] = count.get(role, 0) + 1
        gpus = _indexes((rec.get("env") or {}).get("CUDA_VISIBLE_DEVICES"))
        for node in str(rec.get("instance_node") or rec.get("node") or "").split(",") if gpus else ():
            out.setdefault(node, {}).update({g: (role, name) for g in gpus})
    return out


def _stats(values: list[float], digits: int = 1) -> dict | None:
    return {"mean": round(sum(values) / len(values), digits), "max": round(max(values), digits)} if values else None


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Sampler:
    """One node's GPUs, read by a thread from start() to stop()."""

    def __init__(self, gpus: list[int], interval_s: float = INTERVAL_S, nvml=None):
        own = _indexes(os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.nvml_index = {g: own[g] if g < len(own) else g for g in gpus}
        self.interval_s, self.nvml = interval_s, nvml
        self.samples: dict[int, list[tuple]] = {g: [] for g in gpus}
        self.info: dict[int, dict] = {}
        self.handles: dict = {}
        self.errors = 0
        self.why: str | None = None
        self.stop_ev = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            if self.nvml is None:
                import pynvml  # nvidia-ml-py: only where there are GPUs to read

                self.nvml = pynvml
            self.nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, a driver mismatch
            self.why = f"NVML is not available on {this_node()}: {type(exc).__name__}: {exc}"
            return
        nv = self.nvml
        for g, i in self.nvml_index.items():
            try:
                h = self.handles[g] = nv.nvmlDeviceGetHandleByIndex(i)
                self.info[g] = {"name": _text(nv.nvmlDeviceGetName(h)), "uuid": _text(nv.nvmlDeviceGetUUID(h)),
                                "memory_total_mib": round(nv.nvmlDeviceGetMemoryInfo(h).total / 2**20)}
            except Exception as exc:  # noqa: BLE001 - NVMLError: an index NVML does not have
                self.info[g] = {"error": f"{type(exc).__name__}: {exc}"}
                self.handles.pop(g, None)
        self.thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        nv = self.nvml
        while True:
            t = time.monotonic()
            for g, h in self.handles.items():
                try:
                    u, m = nv.nvmlDeviceGetUtilizationRates(h), nv.nvmlDeviceGetMemoryInfo(h)
                    self.samples[g].append((u.gpu, u.memory, m.used / 2**20, nv.nvmlDeviceGetPowerUsage(h) / 1000.0))
                except Exception:  # noqa: BLE001 - one missed reading (counted), not the run
                    self.errors += 1
            if self.stop_ev.wait(max(0.0, self.interval_s - (time.monotonic() - t))):
                return

    def stop(self) -> dict:
        """{"why": ...} where nothing was sampled, else {"gpus": {id: summary}, "read_errors": n}."""
        self.stop_ev.set()
        if self.thread is not None:
            self.thread.join(10.0)
            self.thread = None
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
        if self.why:
            return {"why": self.why}
        gpus = {}
        for g, rows in self.samples.items():
            gpus[g] = {"nvml_index": self.nvml_index[g], **self.info.get(g, {}), "samples": len(rows),
                       "util_pct": _stats([r[0] for r in rows]), "memory_util_pct": _stats([r[1] for r in rows]),
                       "memory_used_mib": _stats([r[2] for r in rows], 0), "power_w": _stats([r[3] for r in rows])}
        return {"gpus": gpus, "read_errors": self.errors}


class GpuTelemetry:
    def __init__(self, by_node: dict[str, dict[int, tuple[str, str]]], interval_s: float = INTERVAL_S,
                 nvml=None, on_node: Callable[[str], list[str]] | None = None):
        """`on_node(node)`: the command that runs a program on that node (None: other nodes are not sampled)."""
        self.here = this_node()
        self.by_node, self.interval_s, self.on_node = by_node, interval_s, on_node
        local = {**by_node.get("", {}), **by_node.get(self.here, {})}
        self.local = Sampler(sorted(local), interval_s, nvml) if local else None
        self.procs: dict[str, subprocess.Popen] = {}
        self.failed: dict[str, str] = {}

    @classmethod
    def for_servers(cls, records: list[dict], **kw) -> "GpuTelemetry | None":
        """None where no instance has GPUs."""
        by_node = placed_gpus(records)
        return cls(by_node, **kw) if by_node else None

    def start(self) -> None:
        if self.local is not None:
            self.local.start()
        for node, gpus in self.by_node.items():
            if node in ("", self.here):
                continue
            if self.on_node is None:
                self.failed[node] = "another node, and this measurement runs in no Slurm job to reach it"
                continue
            path = os.pathsep.join(x for x in (os.environ.get("PYTHONPATH", ""), str(CHECKOUT)) if x)
            argv = [*self.on_node(node), "env", f"PYTHONPATH={path}", sys.executable,
                    "-m", "harness.serving.gpu_telemetry", repr(self.interval_s), ",".join(map(str, sorted(gpus)))]
            try:
                self.procs[node] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, text=True)
            except OSError as exc:
                self.failed[node] = f"its sampler did not start: {exc}"

    def _collect(self, node: str, proc: subprocess.Popen) -> dict:
        try:
            out, err = proc.communicate(timeout=60)  # closes its stdin: the sampler's signal to stop
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        lines = [x for x in out.splitlines() if x.startswith("{")]
        if proc.returncode != 0 or not lines:
            return {"why": f"its sampler exited {proc.returncode}: {(err or out).strip()[-300:]}"}
        doc = json.loads(lines[-1])
        doc["gpus"] = {int(k): v for k, v in doc.get("gpus", {}).items()}
        return doc

    def stop(self) -> dict:
        """result.json's `gpu_telemetry`."""
        per_node = {n: {"why": why} for n, why in self.failed.items()}
        if self.local is not None:
            per_node[self.here] = self.local.stop()
        for node, proc in self.procs.items():
            per_node[node] = self._collect(node, proc)
        roles: dict[str, dict] = {}
        errors = 0
        for node, doc in sorted(per_node.items()):
            placed = {**self.by_node.get(node, {}), **(self.by_node.get("", {}) if node == self.here else {})}
            errors += doc.get("read_errors", 0)
            for g, summary in sorted(doc.get("gpus", {}).items()):
                role, inst = placed[g]
                roles.setdefault(role, {"gpus": []})["gpus"].append({"node": node, "index": g, "instance": inst,
                                                                     **summary})
        for r in roles.values():
            utils = [g["util_pct"]["mean"] for g in r["gpus"] if g.get("util_pct")]
            powers = [g["power_w"]["mean"] for g in r["gpus"] if g.get("power_w")]
            r["util_pct_mean"] = round(sum(utils) / len(utils), 1) if utils else None
            r["power_w_total_mean"] = round(sum(powers), 1) if powers else None
        not_sampled = {n: d["why"] for n, d in sorted(per_node.items()) if "why" in d}
        return {"source": "nvml" if roles else None, "interval_s": self.interval_s, "roles": roles,
                "not_sampled": not_sampled, "read_errors": errors}


def main(argv: list[str]) -> int:
    """On a node: sample these GPU ids until stdin closes, then print the readings as one JSON line."""
    if len(argv) != 2:
        sys.stderr.write("usage: python -m harness.serving.gpu_telemetry INTERVAL_S ID[,ID...] (internal)\n")
        return 2
    sampler = Sampler(_indexes(argv[1]), float(argv[0]))
    sampler.start()
    sys.stdin.read()
    print(json.dumps(sampler.stop()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
