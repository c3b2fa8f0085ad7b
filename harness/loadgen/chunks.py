"""Per-token timing of streamed responses, kept compactly, and the inter-token latency read from it.

A *chunk* is one streamed response that carries tokens, as the client read it. Per chunk the client
keeps two numbers, 6 bytes: the gap since the same request's previous chunk (microseconds; 0 for the
first chunk, whose arrival is the TTFT in requests.csv) and its token count. The driver writes every
request's chunks to `chunks.npz` beside requests.csv (`offsets[i]:offsets[i + 1]` are row i's).

What is read from them:
- ITL (inter-token latency), one value per token after the first chunk: a chunk of k tokens that
  came g after the previous one gives its k tokens g/k each. Every token counts once, the values of
  a request sum to its last chunk minus its first, and their mean is its TPOT; a burst shows as
  several short latencies beside one long gap, not as one fast token.
- The inter-chunk gap, one value per chunk after the first: what the client waited between reads.
- Tokens per chunk: how often a chunk carried several tokens (a server's stream interval, or
  responses that queued up before the client read them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

CHUNK = np.dtype([("gap_us", "<u4"), ("tokens", "<u2")])
CHUNKS_FILE = "chunks.npz"
#: The percentiles reported for each distribution (p1 .. p99.9).
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)


def pack_chunks(chunks: tuple[list[int], list[int]] | None) -> bytes:
    """([arrival ns], [tokens]) of one request -> packed chunks; chunks with no token are left out
    (their wait counts in the next chunk's gap)."""
    if not chunks or not chunks[0]:
        return b""
    t = np.asarray(chunks[0], dtype=np.int64)
    n = np.asarray(chunks[1], dtype=np.int64)
    keep = n > 0
    t, n = t[keep], n[keep]
    if not t.size:
        return b""
    out = np.empty(t.size, CHUNK)
    out["gap_us"] = np.clip(np.diff(t, prepend=t[0]) // 1000, 0, np.iinfo(np.uint32).max)
    out["tokens"] = np.clip(n, 0, np.iinfo(np.uint16).max)
    return out.tobytes()


def concat(per_request: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Every request's packed chunks as (offsets, chunks): row i's are chunks[offsets[i]:offsets[i + 1]]."""
    lengths = np.array([len(b) // CHUNK.itemsize for b in per_request], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return offsets, np.frombuffer(b"".join(per_request), dtype=CHUNK)


def write_chunks(path: Path, per_request: Sequence[bytes]) -> None:
    """Every request's packed chunks (in requests.csv's row order) as one npz."""
    offsets, flat = concat(per_request)
    with open(path, "wb") as f:
        np.savez(f, offsets=offsets, chunks=flat)


def read_chunks(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets, chunks) from chunks.npz; None when there is none."""
    path = Path(path)
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as z:
        offsets, chunks = z["offsets"], z["chunks"]
    if chunks.dtype != CHUNK or offsets.ndim != 1 or (offsets.size and offsets[-1] != chunks.size):
        raise ValueError(f"{path}: not a perfdag chunks file (offsets and chunks disagree)")
    return offsets, chunks


def later_chunks(offsets: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """The chunks after each request's first."""
    first = np.zeros(chunks.size, dtype=bool)
    starts = offsets[:-1][offsets[:-1] < offsets[1:]]
    first[starts] = True
    return chunks[~first]


def itl_values(offsets: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """Inter-token latency of every token after its request's first chunk, ms (module docstring)."""
    later = later_chunks(offsets, chunks)
    k = later["tokens"].astype(np.int64)
    return np.repeat(later["gap_us"] / 1000.0 / k, k)


def distribution(values: np.ndarray) -> dict | None:
    """n, mean, min, max and PERCENTILES (keys p1 .. p99_9), ms or tokens as given."""
    v = np.asarray(values, dtype=np.float64)
    if not v.size:
        return None
    ps = np.percentile(v, PERCENTILES)
    out = {"n": int(v.size), "mean": round(float(v.mean()), 4), "min": round(float(v.min()), 4),
           "max": round(float(v.max()), 4)}
    out.update({pct_key(p): round(float(x), 4) for p, x in zip(PERCENTILES, ps)})
    return out


def pct_key(p: float) -> str:
    return "p" + f"{p:g}".replace(".", "_")


def chunk_stats(offsets: np.ndarray, chunks: np.ndarray) -> dict:
    """ITL, inter-chunk gap and tokens-per-chunk distributions of a run (empty when nothing streamed)."""
    if not chunks.size:
        return {}
    later = later_chunks(offsets, chunks)
    tokens = chunks["tokens"].astype(np.int64)
    multi = tokens > 1
    return {
        "itl_ms": distribution(itl_values(offsets, chunks)),
        "chunk_gap_ms": distribution(later["gap_us"] / 1000.0),
        "tokens_per_chunk": {"chunks": int(tokens.size), "mean": round(float(tokens.mean()), 4),
                             "max": int(tokens.max()),
                             # how much arrived in bursts: chunks of several tokens, and their tokens' share
                             "multi_token_chunks": int(multi.sum()),
                             "multi_token_share": round(float(tokens[multi].sum() / tokens.sum()), 4)},
    }
