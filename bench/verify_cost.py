"""What launch-time verification costs against what a server spends loading the same weights.

    .venv/bin/python bench/verify_cost.py [--gib 1,10] [--dir DIR] [--out bench/results]

For each size a real safetensors file (float32 tensors of 256 MiB, random bytes) is written once in
DIR (default: a temp dir), then timed with the page cache cold (the file's pages dropped with
posix_fadvise DONTNEED, no root needed) and warm:
- verify: harness.cache.integrity.file_digest, the BLAKE3 digest a launch recomputes for every file its
  servers load (LaunchServers.served_problems);
- read: the bytes read in 8 MiB blocks and discarded (the floor of any load);
- load: safetensors.torch.load_file and a copy of every tensor, how the torch engine and transformers
  load weights into a model (torch imported beforehand; skipped when MemAvailable is under the file).
Prints a table and writes the raw figures to --out/verify_cost-<utc>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.cache.integrity import file_digest  # noqa: E402 - after the path fix

TENSOR_BYTES = 256 << 20


def write_safetensors(path: Path, size: int) -> None:
    """A safetensors file of `size` bytes of float32 tensors, written header first then raw blocks
    (no tensor is held in memory: 10 GB are written with 8 MiB of buffer)."""
    n, rest = divmod(size, TENSOR_BYTES)
    shapes = [TENSOR_BYTES // 4] * n + ([rest // 4] if rest // 4 else [])
    header, offset = {}, 0
    for i, elems in enumerate(shapes):
        header[f"w{i}"] = {"dtype": "F32", "shape": [elems], "data_offsets": [offset, offset + elems * 4]}
        offset += elems * 4
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    block = os.urandom(8 << 20)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        left = offset
        while left:
            f.write(block[:min(left, len(block))])
            left -= min(left, len(block))
        f.flush()
        os.fsync(f.fileno())


def drop_cache(path: Path) -> None:
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def read_all(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass


def load(path: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(path))  # may map the file: the copies below read every byte, as a model's
    for name in list(tensors):      # load_state_dict does (one tensor at a time: memory stays bounded)
        tensors.pop(name).clone()


def timed(fn, path: Path, cold: bool) -> float:
    if cold:
        drop_cache(path)
    else:
        read_all(path)  # warm: every page in the cache
    t0 = time.perf_counter()
    fn(path)
    return round(time.perf_counter() - t0, 3)


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", default="1,10", help="comma-separated file sizes in GiB (default 1,10)")
    ap.add_argument("--dir", default=None, help="where to write the files (default: a temp dir)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    import torch  # noqa: F401 - imported before timing: a server has it loaded when it reads weights
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="perfdag_verify_") as d:
        for gib in (float(g) for g in args.gib.split(",")):
            size = int(gib * (1 << 30))
            path = Path(d) / "weights.safetensors"
            t0 = time.perf_counter()
            write_safetensors(path, size)
            row = {"gib": gib, "bytes": path.stat().st_size, "write_s": round(time.perf_counter() - t0, 1)}
            for name, fn in (("verify", file_digest), ("read", read_all), ("load", load)):
                if name == "load" and mem_available() < size:
                    row[name] = {"skipped": f"MemAvailable {mem_available() >> 30} GiB < the file"}
                    continue
                row[name] = {"cold_s": timed(fn, path, cold=True), "warm_s": timed(fn, path, cold=False)}
            rows.append(row)
            path.unlink()
            print(json.dumps(row), flush=True)
    doc = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
           "cpus": len(os.sched_getaffinity(0)), "python": platform.python_version(),
           "loadavg": os.getloadavg(), "dir": args.dir or tempfile.gettempdir(), "rows": rows}
    out = Path(args.out) / f"verify_cost-{datetime.now(timezone.utc):%Y-%m-%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{'size':>7} {'verify cold/warm s':>20} {'read cold/warm s':>18} {'load cold/warm s':>18}")
    for r in rows:
        cells = [f"{r[k]['cold_s']:.2f} / {r[k]['warm_s']:.2f}" if "cold_s" in r[k] else "skipped"
                 for k in ("verify", "read", "load")]
        print(f"{r['gib']:>5g} G {cells[0]:>20} {cells[1]:>18} {cells[2]:>18}")
    print(f"raw: {out}")


if __name__ == "__main__":
    main()
