"""What checksumming a published artifact costs: GB/s of sha256, BLAKE3 (what perfdag uses) and
xxh3 (non-cryptographic, for comparison) on this machine, and the time for a 70 GB engine.

    .venv/bin/python bench/digest_speed.py [--gib 2] [--dir /path/on/the/artifacts/filesystem]

The file is written once, then read warm (page cache) and, when --drop-cache works (root), cold.
perfdag hashes every file once, at publish; reuse only stats files unless --verify.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path

CHUNK = 8 << 20


def _hashers():
    out = {"sha256": hashlib.sha256}
    try:
        import blake3
        out["blake3 (1 thread)"] = lambda: blake3.blake3()
        out["blake3 (all cores)"] = lambda: blake3.blake3(max_threads=blake3.blake3.AUTO)
    except ImportError:
        pass
    try:
        import xxhash
        out["xxh3_128"] = xxhash.xxh3_128
    except ImportError:
        pass
    return out


def time_hash(path: Path, make) -> float:
    h = make()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    h.hexdigest()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=2.0, help="file size in GiB (default 2)")
    ap.add_argument("--dir", default=None, help="where to write the file (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    size = int(args.gib * (1 << 30))
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="perfdag_digest_") as d:
        path = Path(d) / "blob"
        block = os.urandom(CHUNK)
        with open(path, "wb") as f:
            for _ in range(size // CHUNK):
                f.write(block)
        print(f"{size / 2**30:.1f} GiB file on {d}, {os.cpu_count()} CPUs")
        print(f"{'hash':<22} {'GB/s (best of %d)' % args.repeat:>18} {'70 GB engine':>14}")
        for name, make in _hashers().items():
            best = min(time_hash(path, make) for _ in range(args.repeat))
            rate = size / best / 1e9
            print(f"{name:<22} {rate:>18.2f} {70 / rate:>12.0f} s")


if __name__ == "__main__":
    main()
