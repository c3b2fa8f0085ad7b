"""A scripted stand-in for nvidia-ml-py's `pynvml`, for harness/serving/gpu_telemetry.py on a host without
GPUs: the functions and result fields perfdag reads, with pynvml's names and signatures (nvmlInit,
nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetName, nvmlDeviceGetUUID,
nvmlDeviceGetUtilizationRates -> .gpu/.memory, nvmlDeviceGetMemoryInfo -> .total/.free/.used in bytes,
nvmlDeviceGetPowerUsage -> milliwatts, NVMLError). Its readings are scripted here (SCRIPT), not
recorded from a GPU (none was available); each device cycles through its own, and every reading it
hands out is logged (READ), so a test can compute what perfdag should report. Tests put its folder
first on the path (or in sys.modules) as `pynvml`."""
from __future__ import annotations

from types import SimpleNamespace

GIB = 2**30
# per device: (gpu %, memory %, used GiB, milliwatts) readings, cycled
SCRIPT = {
    0: [(90, 40, 60, 650_000), (95, 45, 61, 690_000), (85, 35, 62, 610_000)],
    1: [(80, 30, 50, 500_000), (70, 20, 51, 450_000)],
    2: [(10, 5, 20, 150_000), (20, 10, 21, 170_000), (30, 15, 22, 190_000), (40, 20, 23, 210_000)],
    3: [(0, 0, 5, 90_000)],
}
TOTAL = 141 * GIB  # an H200's memory
READ: dict[int, list[tuple]] = {}
STATE = {"init": 0, "fail_index": None}


class NVMLError(Exception):
    pass


class NVMLError_InvalidArgument(NVMLError):
    pass


def nvmlInit():
    STATE["init"] += 1


def nvmlShutdown():
    STATE["init"] -= 1


def nvmlDeviceGetCount():
    return len(SCRIPT)


def nvmlDeviceGetHandleByIndex(index):
    if index not in SCRIPT:
        raise NVMLError_InvalidArgument("Invalid Argument")
    return SimpleNamespace(index=index, calls=0)


def nvmlDeviceGetName(handle):
    return "NVIDIA H200 (scripted)"


def nvmlDeviceGetUUID(handle):
    return f"GPU-fake-{handle.index}"


def _reading(handle):
    rows = SCRIPT[handle.index]
    return rows[handle.calls % len(rows)]


def nvmlDeviceGetUtilizationRates(handle):
    g, m, _, _ = _reading(handle)
    return SimpleNamespace(gpu=g, memory=m)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    used = _reading(handle)[2] * GIB
    return SimpleNamespace(total=TOTAL, used=used, free=TOTAL - used)


def nvmlDeviceGetPowerUsage(handle):
    r = _reading(handle)
    READ.setdefault(handle.index, []).append(r)  # the last call of a reading: the next one starts
    handle.calls += 1
    return r[3]
