"""Per-token timing of streamed responses, kept compactly, and the inter-token latency read from it.

A *chunk* is one streamed response that carries tokens, as the client read it. The client keeps its
arrival and token count (appended to two lists, packed once per request); the driver turns them into
two numbers per chunk, 6 bytes: the gap since the same request's previous chunk (microseconds; 0 for
the first chunk, whose arrival is the TTFT in requests.csv) and its token count, and writes every
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

from array import array
from pathlib import Path
from typing import Sequence

import numpy as np

CHUNK = np.dtype([("gap_us", "<u4"), ("tokens", "<u2")])
RAW_ITEMSIZE = 10  # a chunk as the client packs it: int64 arrival ns + uint16 tokens
CHUNKS_FILE = "chunks.npz"
#: The percentiles reported for each distribution (p1 .. p99.9).
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)


def pack_chunks(chunks: tuple[list[int], list[int]] | None) -> bytes:
    """([arrival ns], [tokens]) of one request, packed as they are (int64 times, then uint16 counts):
    cheap in the client's hot path; `concat` turns every request's into gaps at once."""
    if not chunks or not chunks[0] or not any(chunks[1]):
        return b""
    try:
        counts = array("H", chunks[1])
    except OverflowError:  # a chunk of more than 65535 tokens: counted as that many
        counts = array("H", [min(k, 65535) for k in chunks[1]])
    return array("q", chunks[0]).tobytes() + counts.tobytes()


def concat(per_request: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Every request's packed chunks as (offsets, chunks): row i's are chunks[offsets[i]:offsets[i + 1]],
    each with its gap since the request's previous chunk (0 for the first); chunks with no token are
    left out (their wait counts in the next chunk's gap)."""
    lengths = np.array([len(b) // RAW_ITEMSIZE for b in per_request], dtype=np.int64)
    times = np.empty(int(lengths.sum()), dtype=np.int64)
    tokens = np.empty(times.size, dtype=np.uint16)
    at = 0
    for b, n in zip(per_request, lengths):
        if n:
            times[at:at + n] = np.frombuffer(b, dtype="<i8", count=n)
            tokens[at:at + n] = np.frombuffer(b, dtype="<u2", offset=8 * n, count=n)
            at += n
    row = np.repeat(np.arange(lengths.size), lengths)
    keep = tokens > 0
    times, tokens, row = times[keep], tokens[keep], row[keep]
    gaps = np.diff(times, prepend=times[:1])
    gaps[np.r_[True, row[1:] != row[:-1]][:gaps.size]] = 0  # each request's first chunk
    out = np.empty(times.size, CHUNK)
    out["gap_us"] = np.clip(gaps // 1000, 0, np.iinfo(np.uint32).max)
    out["tokens"] = tokens
    offsets = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=lengths.size))]).astype(np.int64)
    return offsets, out


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
