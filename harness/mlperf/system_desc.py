"""systems/<system>.json of an MLPerf submission: the fields the user writes in a small YAML, the
ones perfdag can read from this machine, and every field MLCommons' checker requires, checked
before anything runs.

Why: the checker refuses a tree whose system description lacks a required field, leaves a
"meaningful" one empty, or uses a value it does not know (status, system_type); a CPU-only system
must say accelerators_per_node "0" (a string: 0 reads as empty, "N/A" is not a number). Machine
facts are a starting point; whatever the YAML says wins. No luigi.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.untrusted import yamlio

#: Every field MLCommons' checker requires in systems/<system>.json (v6.x, non-power results).
REQUIRED = (
    "division", "submitter", "status", "system_name", "number_of_nodes", "host_processor_model_name",
    "host_processors_per_node", "host_processor_core_count", "host_memory_capacity", "host_storage_capacity",
    "host_storage_type", "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "framework", "operating_system", "system_type", "other_software_stack", "host_processor_frequency",
    "host_processor_caches", "host_memory_configuration", "host_processor_interconnect", "host_networking",
    "host_networking_topology", "accelerator_frequency", "accelerator_host_interconnect",
    "accelerator_interconnect", "accelerator_interconnect_topology", "accelerator_memory_configuration",
    "accelerator_on-chip_memories", "cooling", "hw_notes", "sw_notes", "host_network_card_count",
    "system_type_detail",
)
#: Required fields that may be an empty string; every other required field needs a value.
MAY_BE_EMPTY = frozenset({"host_processor_frequency", "host_processor_caches", "host_processor_interconnect",
                          "accelerator_frequency", "accelerator_interconnect_topology",
                          "accelerator_on-chip_memories", "hw_notes", "sw_notes", "system_type_detail"})
STATUSES = ("available", "preview", "rdi")
SYSTEM_TYPES = ("datacenter", "edge", "datacenter,edge", "edge,datacenter")
#: The measurements.json fields of each scenario directory (all need a value).
MEASUREMENT_FIELDS = ("input_data_types", "retraining", "starting_weights_filename", "weight_data_types",
                      "weight_transformations")
#: What nobody can read from a machine; the YAML must say it (shown in the error when missing).
USER_FIELDS = {"status": "available", "system_type": "datacenter", "cooling": "air",
               "host_storage_type": "SSD", "host_memory_configuration": "e.g. 8x 32GB DDR5",
               "host_networking": "e.g. Ethernet 10G, or N/A", "host_networking_topology": "e.g. N/A",
               "host_network_card_count": "e.g. 1"}


def _cpuinfo() -> list[dict[str, str]]:
    procs, cur = [], {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if not line.strip():
            if cur:
                procs.append(cur)
            cur = {}
            continue
        k, _, v = line.partition(":")
        cur[k.strip()] = v.strip()
    if cur:
        procs.append(cur)
    return procs


def _gpus() -> list[tuple[str, str]]:
    """(name, memory) per NVIDIA GPU, from nvidia-smi; none where it is absent or fails."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [tuple(x.strip() for x in line.split(",", 1)) for line in out.stdout.splitlines() if "," in line]
    return [r for r in rows if len(r) == 2] if out.returncode == 0 else []


def git_output(repo: str | os.PathLike, *args: str) -> str | None:
    """`git -C repo args...`'s stripped stdout; None when git is missing, fails or hangs."""
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _os_name() -> str:
    try:
        m = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', Path("/etc/os-release").read_text(), re.M)
    except OSError:
        m = None
    return f"{m.group(1) if m else platform.system()} (kernel {platform.release()})"


def machine_facts(storage_path: str | os.PathLike = ".", software: dict[str, str] | None = None,
                  framework: str = "") -> dict[str, Any]:
    """What this machine says about itself (CPU, memory, OS, GPUs, storage), in checker fields."""
    procs = _cpuinfo()
    first = procs[0] if procs else {}
    sockets = len({p.get("physical id") for p in procs if p.get("physical id") is not None}) or 1
    cores = int(first.get("cpu cores") or 0) or (os.cpu_count() or 1) // sockets
    mem_kb = 0
    try:
        m = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        mem_kb = int(m.group(1)) if m else 0
    except OSError:
        pass
    gpus = _gpus()
    sw = ", ".join(f"{k} {v}" for k, v in (software or {}).items() if v and v != "absent")
    facts = {
        "number_of_nodes": 1,
        "host_processor_model_name": first.get("model name") or platform.processor() or platform.machine(),
        "host_processors_per_node": sockets,
        "host_processor_core_count": cores,
        "host_processor_caches": first.get("cache size", ""),
        "host_memory_capacity": f"{round(mem_kb / 1024 / 1024)} GB" if mem_kb else "",
        "host_storage_capacity": f"{shutil.disk_usage(storage_path).total // 10**9} GB",
        "operating_system": _os_name(),
        "framework": framework,
        "other_software_stack": f"Python {platform.python_version()}" + (f", {sw}" if sw else ""),
        "accelerators_per_node": str(len(gpus)),
        "accelerator_model_name": gpus[0][0] if gpus else "N/A",
        "accelerator_memory_capacity": gpus[0][1] if gpus else "N/A",
        "accelerator_memory_configuration": "N/A" if not gpus else "",
        "accelerator_host_interconnect": "N/A" if not gpus else "",
        "accelerator_interconnect": "N/A" if not gpus else "",
    }
    for k in MAY_BE_EMPTY:
        facts.setdefault(k, "")
    return facts


def load_user_yaml(path: str | os.PathLike | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(system fields, measurements fields) from the user's YAML: system fields at the top level,
    an optional `measurements:` mapping for measurements.json."""
    if not path:
        return {}, {}

    p = Path(path)
    if not p.exists():
        raise InputError(f"--system: {p} not found; write a YAML with at least "
                         + ", ".join(f"{k}: {v}" for k, v in USER_FIELDS.items()))
    doc = yamlio.load_file(p, "--system: system file") or {}  # a FIFO, a device or a huge file: refused by name
    if not isinstance(doc, dict):
        raise InputError(f"--system: {p} must be a mapping of systems/<system>.json fields")
    meas = doc.pop("measurements", None) or {}
    if not isinstance(meas, dict):
        raise InputError(f"--system: {p}: measurements: must be a mapping of measurements.json fields")
    bad = [k for k in doc if not isinstance(k, str)]
    if bad:
        raise InputError(f"--system: {p}: keys must be strings, got {bad}")
    return doc, meas


def system_description(facts: dict, user: dict, *, division: str, submitter: str, system_name: str,
                       source: str = "the system YAML") -> dict[str, Any]:
    """facts < the user's YAML < params (division, submitter, system_name); every problem at once."""
    desc = {**facts, **user, "division": division, "submitter": submitter, "system_name": system_name}
    problems = []
    for k in REQUIRED:
        v = desc.get(k)
        if k not in desc or v is None:
            hint = f" (e.g. {k}: {USER_FIELDS[k]})" if k in USER_FIELDS else ""
            problems.append(f"{k}: missing; add it to {source}{hint}")
        elif k not in MAY_BE_EMPTY and (v == "" or v == 0 or v == []):
            problems.append(f"{k}: empty; the checker needs a value (write N/A where nothing applies)")
    if str(desc.get("status", "")).lower() not in STATUSES and "status" in desc:
        problems.append(f"status: {desc['status']!r} is not one of {', '.join(STATUSES)}")
    if "system_type" in desc and desc["system_type"] not in SYSTEM_TYPES:
        problems.append(f"system_type: {desc['system_type']!r} is not one of {', '.join(SYSTEM_TYPES)}")
    for k in ("number_of_nodes", "accelerators_per_node"):
        if k in desc and not re.fullmatch(r"\d+", str(desc[k]).strip()):
            problems.append(f"{k}: {desc[k]!r} is not a whole number (the checker multiplies it)")
    if problems:
        raise InputError("the system description (systems/<system>.json) is incomplete:", problems)
    # The checker reads an integer 0 as 'empty': counts go in as strings.
    desc["accelerators_per_node"] = str(desc["accelerators_per_node"]).strip()
    return {**{k: desc[k] for k in REQUIRED}, **{k: v for k, v in desc.items() if k not in REQUIRED}}


def measurements(defaults: dict, user: dict, source: str = "the system YAML") -> dict[str, str]:
    out = {**defaults, **user}
    missing = [k for k in MEASUREMENT_FIELDS if not str(out.get(k) or "").strip()]
    if missing:
        raise InputError("measurements.json is incomplete:",
                         [f"measurements.{k}: empty; set it under measurements: in {source}" for k in missing])
    return {k: str(v) for k, v in out.items()}
