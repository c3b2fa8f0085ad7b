"""In-flight (continuous) batching greedy decoder over a torch causal LM, and engine loading.
Over 400 lines because the scheduler, the KV-cache merging and the loader share one batch state; split, each piece would reach into the others.

The Triton model (triton_model/model.py) hands requests to `InflightBatcher`, whose background
thread runs one scheduling iteration per step: admit queued requests (FIFO) while the batch has
room (`max_batch_size`) and the step's token budget (`max_num_tokens`: one per running sequence,
prompt length + 1 per admitted one) allows, prefill the admitted requests together (one
left-padded forward; `batched_prefill=false` prefills them one by one), merge their KV caches into
the running left-padded batch cache, then decode every running sequence in one batched forward.
Finished sequences leave the batch between steps, so new requests never wait for a whole batch.
Greedy outputs are token-identical to single-request `generate` (fp32; tests/test_serving.py):
padding is masked out of attention and position ids count real tokens only.

Semantics (as TRT-LLM's executor): generation stops after `request_output_len` tokens, at
`end_id` (the end token itself is not returned) or when the sequence reaches `max_seq_len`.
Usable without Triton, which is how its exactness is unit-tested. One module over 400 lines:
the scheduler's state (batch cache, mask, positions) is shared by all its steps.
"""
from __future__ import annotations

import inspect
import json
import os
import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# --------------------------------------------------------------------------------------
# Engine loading
# --------------------------------------------------------------------------------------

def load_engine(engine_dir: str | os.PathLike, device: str = "cpu",
                max_batch_size: int | None = None) -> tuple[Any, dict]:
    """Load ``(model, engine_config)`` from ``engine_dir``.

    A perfdag torch engine (``config.json`` with a ``"backend"`` key) goes through
    ``harness.backends.torch.engine.load_torch_engine``; a plain Hugging Face checkpoint directory is
    loaded with ``AutoModelForCausalLM`` and gets limits derived from its config.
    """
    import torch

    engine_dir = Path(engine_dir)
    cfg_path = engine_dir / "config.json"
    if not engine_dir.is_dir():
        raise FileNotFoundError(f"engine directory {engine_dir} does not exist")
    if not cfg_path.is_file():
        raise FileNotFoundError(f"engine directory {engine_dir} has no config.json (not an engine or HF checkpoint)")
    cfg = json.loads(cfg_path.read_text())
    if "backend" in cfg:
        from harness.backends.torch.engine import load_torch_engine

        model, engine_config = load_torch_engine(str(engine_dir), device=device)
        engine_config = dict(engine_config or {})
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(engine_dir))
        model.to(device)
        mpe = getattr(model.config, "max_position_embeddings", None) or 2048
        engine_config = {
            "max_batch_size": max_batch_size or 64,
            "max_num_tokens": 8192,
            "max_seq_len": int(mpe),
        }
    model.eval()
    torch.set_grad_enabled(False)
    return model, engine_config


# --------------------------------------------------------------------------------------
# In-flight batching scheduler (pure torch)
# --------------------------------------------------------------------------------------

@dataclass
class GenRequest:
    """One generation request handed to :class:`InflightBatcher`.

    ``on_tokens(new_tokens, final)`` is called from the scheduler thread with each step's
    new tokens (a list, possibly empty when the request ends on ``end_id``); ``final`` is
    True exactly once.  ``on_error(message)`` replaces the final ``on_tokens`` call when
    the request is rejected or the engine fails.
    """

    input_ids: list[int]
    max_new_tokens: int
    on_tokens: Callable[[list[int], bool], None]
    on_error: Callable[[str], None]
    end_id: int | None = None
    is_cancelled: Callable[[], bool] | None = None
    tag: Any = None
    # scheduler state
    generated: list[int] = field(default_factory=list)
    arrival_s: float = field(default_factory=time.monotonic)
    limit: int = 0


class InflightBatcher:
    """Continuous-batching greedy decoder over an HF causal LM.

    Running sequences share one left-padded KV cache (``DynamicCache`` layers of shape
    ``[B, H, T, D]``) plus a ``[B, T]`` validity mask and per-sequence positions.  New
    sequences are prefilled alone (bit-identical to ``generate``'s prefill) and merged by
    left-padding; finished ones are dropped and all-padding leading columns trimmed.
    """

    def __init__(self, model, *, max_batch_size: int, max_num_tokens: int, max_seq_len: int,
                 max_input_len: int | None = None, device: str = "cpu",
                 cancellation_check_period_ms: float = 100.0,
                 batched_prefill: bool = True):
        import torch

        self.torch = torch
        self.model = model
        self.device = torch.device(device)
        self.max_batch_size = int(max_batch_size)
        self.max_num_tokens = int(max_num_tokens)
        self.max_seq_len = int(max_seq_len)
        self.max_input_len = int(max_input_len) if max_input_len else self.max_seq_len - 1
        # is_cancelled() is an IPC round trip per request inside Triton: poll on a timer, not per step
        self.cancel_period_s = max(0.0, float(cancellation_check_period_ms)) / 1000.0
        self._next_cancel_check = 0.0
        self.batched_prefill = bool(batched_prefill)
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):  # pragma: no cover
            params = {}
        self._logits_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self._queue: "queue.SimpleQueue[GenRequest | None]" = queue.SimpleQueue()
        self._waiting: list[GenRequest] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # batch state
        self._seqs: list[GenRequest] = []
        self._cache = None
        self._mask = None  # bool [B, T]
        self._pos = None  # long [B] position of the token fed next
        self._last = None  # long [B] token fed next
        self.stats = {"steps": 0, "prefills": 0, "tokens": 0, "max_batch": 0, "cancelled": 0,
                      "emit_s": 0.0, "step_s": 0.0}

    # ---- public API -------------------------------------------------------------------
    def submit(self, req: GenRequest) -> None:
        """Queue a request (thread-safe). Invalid requests are rejected via ``on_error``."""
        problem = self._validate(req)
        if problem:
            _safe_call(req.on_error, problem)
            return
        self._queue.put(req)
        self._wake.set()

    def start(self) -> "InflightBatcher":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="inflight-batcher", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._fail_all("server is shutting down")

    @property
    def idle(self) -> bool:
        return not self._seqs and not self._waiting and self._queue.empty()

    def run_until_idle(self) -> None:
        """Drive the scheduler synchronously (tests / offline use, no thread)."""
        while not self.idle:
            self.step()

    # ---- scheduling -------------------------------------------------------------------
    def _validate(self, req: GenRequest) -> str | None:
        n = len(req.input_ids)
        if n == 0:
            return "input_ids is empty"
        if n > self.max_num_tokens:
            return (f"prompt of {n} tokens exceeds max_num_tokens={self.max_num_tokens} "
                    "(no chunked context)")
        if n > self.max_input_len:
            return f"prompt of {n} tokens exceeds max_input_len={self.max_input_len}"
        if n >= self.max_seq_len:
            return f"prompt of {n} tokens leaves no room under max_seq_len={self.max_seq_len}"
        if req.max_new_tokens < 0:
            return f"request_output_len must be >= 0, got {req.max_new_tokens}"
        req.limit = min(int(req.max_new_tokens), self.max_seq_len - n)
        return None

    def _loop(self) -> None:
        torch = self.torch
        with torch.inference_mode():
            while not self._stop.is_set():
                if self.idle:
                    self._wake.wait(0.5)
                    self._wake.clear()
                    continue
                try:
                    self.step()
                except Exception:  # engine failure: fail everything in flight, keep serving
                    msg = "engine step failed:\n" + traceback.format_exc()
                    sys.stderr.write(msg)
                    self._fail_all(msg)

    def _drain_queue(self) -> None:
        while True:
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                return
            if req is not None:
                self._waiting.append(req)

    def step(self) -> None:
        """One iteration: admit + prefill new requests, then one batched decode step."""
        t0 = time.perf_counter()
        try:
            self._step()
        finally:
            self.stats["step_s"] += time.perf_counter() - t0

    def _step(self) -> None:
        torch = self.torch
        self._drain_queue()
        now = time.monotonic()
        if now >= self._next_cancel_check:
            self._next_cancel_check = now + self.cancel_period_s
            self._drop_cancelled()

        # -- admission (FIFO, no overtaking) --
        budget = self.max_num_tokens - len(self._seqs)
        admitted: list[GenRequest] = []
        while self._waiting and len(self._seqs) + len(admitted) < self.max_batch_size:
            req = self._waiting[0]
            cost = len(req.input_ids) + 1
            if cost > budget and (self._seqs or admitted):
                break
            self._waiting.pop(0)
            budget -= cost
            if req.limit == 0:
                _safe_call(req.on_tokens, [], True)
                continue
            admitted.append(req)

        with torch.inference_mode():
            if admitted:
                if self.batched_prefill:
                    self._prefill(admitted)
                else:
                    for req in admitted:
                        self._prefill([req])
            if self._seqs:
                self._decode()

    def _prefill(self, reqs: list[GenRequest]) -> None:
        """Prefill ``reqs`` in one left-padded forward and merge the survivors into the batch."""
        torch = self.torch
        from transformers import DynamicCache

        k = len(reqs)
        lens = [len(r.input_ids) for r in reqs]
        L = max(lens)
        ids = torch.zeros((k, L), dtype=torch.long)
        mask = torch.zeros((k, L), dtype=torch.bool)
        for i, r in enumerate(reqs):
            ids[i, L - lens[i]:] = torch.tensor(r.input_ids, dtype=torch.long)
            mask[i, L - lens[i]:] = True
        ids, mask = ids.to(self.device), mask.to(self.device)
        kw = dict(input_ids=ids, attention_mask=mask.long(), past_key_values=DynamicCache(config=self.model.config),
                  use_cache=True, **self._logits_kw)
        if k > 1 and min(lens) != L:
            # padded rows: positions count real tokens only (as generate does for left padding)
            kw["position_ids"] = (mask.long().cumsum(-1) - 1).clamp_(min=0)
        out = self.model(**kw)
        toks = out.logits[:, -1].float().argmax(-1).tolist()
        self.stats["prefills"] += k
        cache = out.past_key_values
        if k > 1 and min(lens) != L:
            # keep padded K/V finite (fully masked query rows may produce NaN in some kernels)
            pad = ~mask[:, None, :, None]
            for layer in cache.layers:
                layer.keys = layer.keys.masked_fill(pad, 0)
                layer.values = layer.values.masked_fill(pad, 0)
        keep = [i for i, (r, t) in enumerate(zip(reqs, toks)) if not self._accept(r, t)]
        if not keep:
            return
        pos = torch.tensor(lens, dtype=torch.long, device=self.device)
        last = torch.tensor(toks, dtype=torch.long, device=self.device)
        if len(keep) != k:
            idx = torch.tensor(keep, dtype=torch.long, device=self.device)
            mask, pos, last = mask.index_select(0, idx), pos.index_select(0, idx), last.index_select(0, idx)
            for layer in cache.layers:
                layer.keys = layer.keys.index_select(0, idx)
                layer.values = layer.values.index_select(0, idx)
            start = int(mask.any(0).nonzero()[0])
            if start:
                mask = mask[:, start:]
                for layer in cache.layers:
                    layer.keys = layer.keys[:, :, start:]
                    layer.values = layer.values[:, :, start:]
        self._merge([reqs[i] for i in keep], cache, mask, pos, last)

    def _merge(self, reqs: list[GenRequest], cache, mask, pos, last) -> None:
        torch = self.torch
        if not self._seqs:
            self._seqs, self._cache, self._mask, self._pos, self._last = list(reqs), cache, mask, pos, last
            return
        T, n = self._mask.shape[1], mask.shape[1]
        Tn = max(T, n)
        F = torch.nn.functional
        for mine, theirs in zip(self._cache.layers, cache.layers):
            mine.keys = torch.cat([F.pad(mine.keys, (0, 0, Tn - T, 0)),
                                   F.pad(theirs.keys, (0, 0, Tn - n, 0))], 0)
            mine.values = torch.cat([F.pad(mine.values, (0, 0, Tn - T, 0)),
                                     F.pad(theirs.values, (0, 0, Tn - n, 0))], 0)
        self._mask = torch.cat([F.pad(self._mask, (Tn - T, 0)), F.pad(mask, (Tn - n, 0))], 0)
        self._pos = torch.cat([self._pos, pos])
        self._last = torch.cat([self._last, last])
        self._seqs.extend(reqs)

    def _decode(self) -> None:
        torch = self.torch
        B = len(self._seqs)
        self.stats["max_batch"] = max(self.stats["max_batch"], B)
        mask = torch.cat([self._mask, torch.ones((B, 1), dtype=torch.bool, device=self.device)], 1)
        out = self.model(input_ids=self._last.view(B, 1), attention_mask=mask.long(),
                         position_ids=self._pos.view(B, 1), past_key_values=self._cache,
                         use_cache=True, **self._logits_kw)
        self._cache = out.past_key_values
        nxt = out.logits[:, -1].float().argmax(-1)
        self._mask = mask
        self._pos = self._pos + 1
        self._last = nxt
        self.stats["steps"] += 1
        keep = [i for i, (req, tok) in enumerate(zip(self._seqs, nxt.tolist()))
                if not self._accept(req, tok)]
        if len(keep) != B:
            self._select(keep)

    def _accept(self, req: GenRequest, tok: int) -> bool:
        """Record a generated token, emit it; return True when the request finished."""
        if req.end_id is not None and tok == req.end_id:
            _safe_call(req.on_tokens, [], True)
            return True
        req.generated.append(tok)
        self.stats["tokens"] += 1
        final = len(req.generated) >= req.limit
        t0 = time.perf_counter()
        _safe_call(req.on_tokens, [tok], final)
        self.stats["emit_s"] += time.perf_counter() - t0
        return final

    def _select(self, keep: list[int]) -> None:
        torch = self.torch
        if not keep:
            self._seqs, self._cache, self._mask, self._pos, self._last = [], None, None, None, None
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        mask = self._mask.index_select(0, idx)
        cols = mask.any(0).nonzero()
        start = int(cols[0]) if cols.numel() else 0
        for layer in self._cache.layers:
            layer.keys = layer.keys.index_select(0, idx)[:, :, start:]
            layer.values = layer.values.index_select(0, idx)[:, :, start:]
        self._mask = mask[:, start:]
        self._pos = self._pos.index_select(0, idx)
        self._last = self._last.index_select(0, idx)
        self._seqs = [self._seqs[i] for i in keep]

    def _drop_cancelled(self) -> None:
        def cancelled(r: GenRequest) -> bool:
            try:
                return bool(r.is_cancelled and r.is_cancelled())
            except Exception:
                return False

        waiting = []
        for r in self._waiting:
            if cancelled(r):
                _safe_call(r.on_error, "request cancelled")
            else:
                waiting.append(r)
        self._waiting = waiting
        keep = []
        for i, r in enumerate(self._seqs):
            if cancelled(r):
                self.stats["cancelled"] += 1
                _safe_call(r.on_error, "request cancelled")
            else:
                keep.append(i)
        if len(keep) != len(self._seqs):
            self._select(keep)

    def _fail_all(self, msg: str) -> None:
        self._drain_queue()
        for r in self._seqs + self._waiting:
            _safe_call(r.on_error, msg)
        self._seqs, self._waiting = [], []
        self._cache = self._mask = self._pos = self._last = None


def _safe_call(fn, *args):
    try:
        fn(*args)
    except Exception:  # a broken client callback must not kill the scheduler
        sys.stderr.write("callback failed:\n" + traceback.format_exc())
    return None
