"""The driver's live progress line: counts, rates (overall and over the last seconds) and p99s.

A mixin of the driver: it reads the driver's counters under its lock.
"""
from __future__ import annotations

import time

import numpy as np


class Progress:
    STEADY_WINDOW_S = 5.0

    def _steady(self, now: float) -> tuple[float | None, float | None]:
        """samples/s and tokens/s over the last few seconds: the rate now, not since the start
        (which the ramp-up and a slow first request drag down)."""
        hist = self.rate_history
        hist.append((now, self.completed, self.tokens))
        while len(hist) > 2 and now - hist[1][0] >= self.STEADY_WINDOW_S:
            hist.popleft()
        t0, c0, k0 = hist[0]
        span = now - t0
        if span < 1.0:
            return None, None
        return (self.completed - c0) / span, (self.tokens - k0) / span

    def progress(self) -> dict:
        with self.lock:
            elapsed = (time.monotonic_ns() - self.t0) / 1e9 if self.t0 else 0.0
            steady_sps, steady_tps = self._steady(time.monotonic()) if self.t0 else (None, None)
            ttfts = list(self.ttfts)
            lats = list(self.lats)
            p = {"event": "progress", "phase": "run" if self.t0 else ("warmup" if not self.ready_ev.is_set() else "ready"),
                 "issued": self.issued, "completed": self.completed, "outstanding": len(self.inflight),
                 "tokens": self.tokens, "elapsed_s": round(elapsed, 2),
                 "elapsed_setup_s": round(time.monotonic() - self.t_setup, 2),
                 "samples_per_s": round(self.completed / elapsed, 3) if elapsed > 0 else 0.0,
                 "tokens_per_s": round(self.tokens / elapsed, 3) if elapsed > 0 else 0.0,
                 "steady_samples_per_s": None if steady_sps is None else round(steady_sps, 3),
                 "steady_tokens_per_s": None if steady_tps is None else round(steady_tps, 3),
                 "p99_ttft_ms": round(float(np.percentile(ttfts, 99)), 3) if ttfts else None,
                 "p99_latency_ms": round(float(np.percentile(lats, 99)), 3) if lats else None}
        return p

