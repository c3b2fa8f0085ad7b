"""Each serving role's GPUs sampled over a measurement: utilisation, memory, power (NVML).

Which GPUs: every instance whose record sets CUDA_VISIBLE_DEVICES (as perfdag placed it), on the node
this process runs on; an index is read through this process' own CUDA_VISIBLE_DEVICES when that lists
indexes (inside a Slurm step: the job's GPUs on the node, in NVML's numbering), else taken as NVML's.
Instances on other nodes are listed as not sampled: NVML reads only its own host's GPUs.

Where NVML answers (nvidia-ml-py's `pynvml` and a driver), a thread reads every such GPU every
`interval_s` from `start()` to `stop()`: utilisation (GPU and memory, %), memory used, power. `stop()`
gives each role's GPUs with mean and max, the role's mean utilisation and mean total power. Where it
does not (no library, no driver: this CPU host), nothing is sampled and the result says why. Servers
without GPUs get no telemetry at all (and pynvml is never imported).
"""
from __future__ import annotations

import os
import threading
import time

from harness.serving.spec import this_node

INTERVAL_S = 0.5


def _indexes(value: str | None) -> list[int]:
    parts = [x.strip() for x in (value or "").split(",") if x.strip()]
    return [int(x) for x in parts] if parts and all(x.isdigit() for x in parts) else []


def placed_gpus(records: list[dict], here: str | None = None) -> tuple[dict[int, tuple[str, str]], list[str]]:
    """NVML index -> (role, instance) for the GPUs of instances on this node, and what is not sampled."""
    here = here or this_node()
    own = _indexes(os.environ.get("CUDA_VISIBLE_DEVICES"))
    count: dict[str, int] = {}
    local: dict[int, tuple[str, str]] = {}
    elsewhere = []
    for rec in records:
        role = rec.get("role") or "server"
        name = f"{role} {count.get(role, 0)}"
        count[role] = count.get(role, 0) + 1
        gpus = _indexes((rec.get("env") or {}).get("CUDA_VISIBLE_DEVICES"))
        if not gpus:
            continue
        nodes = [n for n in str(rec.get("instance_node") or rec.get("node") or "").split(",") if n]
        if nodes and here not in nodes:
            elsewhere.append(f"{name} on {nodes[0]}: another node")
            continue
        if len(nodes) > 1:
            elsewhere.append(f"{name}: its GPUs on {', '.join(n for n in nodes if n != here)}")
        for g in gpus:
            local[own[g] if g < len(own) else g] = (role, name)
    return local, elsewhere


def _stats(values: list[float], digits: int = 1) -> dict | None:
    return {"mean": round(sum(values) / len(values), digits), "max": round(max(values), digits)} if values else None


class GpuTelemetry:
    def __init__(self, gpus: dict[int, tuple[str, str]], elsewhere: list[str], interval_s: float = INTERVAL_S,
                 nvml=None):
        self.gpus, self.elsewhere, self.interval_s, self.nvml = gpus, elsewhere, interval_s, nvml
        self.samples: dict[int, list[tuple]] = {g: [] for g in gpus}
        self.errors = 0
        self.why: str | None = None
        self.stop_ev = threading.Event()
        self.thread: threading.Thread | None = None
        self.info: dict[int, dict] = {}

    @classmethod
    def for_servers(cls, records: list[dict], **kw) -> "GpuTelemetry | None":
        """None where no instance has GPUs."""
        gpus, elsewhere = placed_gpus(records)
        return cls(gpus, elsewhere, **kw) if gpus or elsewhere else None

    def start(self) -> None:
        if not self.gpus:
            self.why = f"no instance with GPUs runs on {this_node()}, where this measurement runs"
            return
        try:
            if self.nvml is None:
                import pynvml  # nvidia-ml-py: only where there are GPUs to read

                self.nvml = pynvml
            self.nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, a driver mismatch
            self.why = f"NVML is not available here: {type(exc).__name__}: {exc}"
            return
        nv = self.nvml
        self.handles = {}
        for g in self.gpus:
            try:
                h = self.handles[g] = nv.nvmlDeviceGetHandleByIndex(g)
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
        """result.json's `gpu_telemetry`."""
        self.stop_ev.set()
        if self.thread is not None:
            self.thread.join(10.0)
            self.thread = None
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - nothing left to read
                pass
        out: dict = {"source": None if self.why else "nvml", "node": this_node(),
                     "interval_s": self.interval_s, "not_sampled": self.elsewhere}
        if self.why:
            return {**out, "why": self.why}
        roles: dict[str, dict] = {}
        for g, (role, inst) in sorted(self.gpus.items()):
            rows = self.samples[g]
            gpu = {"index": g, "instance": inst, **self.info.get(g, {}), "samples": len(rows),
                   "util_pct": _stats([r[0] for r in rows]), "memory_util_pct": _stats([r[1] for r in rows]),
                   "memory_used_mib": _stats([r[2] for r in rows], 0), "power_w": _stats([r[3] for r in rows])}
            roles.setdefault(role, {"gpus": []})["gpus"].append(gpu)
        for r in roles.values():
            utils = [g["util_pct"]["mean"] for g in r["gpus"] if g["util_pct"]]
            powers = [g["power_w"]["mean"] for g in r["gpus"] if g["power_w"]]
            r["util_pct_mean"] = round(sum(utils) / len(utils), 1) if utils else None
            r["power_w_total_mean"] = round(sum(powers), 1) if powers else None
        return {**out, "roles": roles, "read_errors": self.errors}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
