"""A frontend process: `clients_per_frontend` cores, fed by the driver, reporting to the driver.

It dies with the driver whatever happens to it: PR_SET_PDEATHSIG on Linux, and a parent check
that does not depend on its pipe being idle.
"""
from __future__ import annotations

import os
import signal
import threading
import time
import traceback

from harness.loadgen.cores import core_class
from harness.loadgen.cores.aioloop import BatchSink, FrontendLoop, PipeOut
from harness.loadgen.cores.base import Prompts
from harness.loadgen.links import ShiftedOut
from harness.loadgen.messages import ISSUE, Failed, Ready, Stopped
from harness.loadgen.timings import stamp_messages
from harness.loadgen.usage import Usage
from harness.serving.processes import pdeathsig_setter
from harness.serving.spec import this_node


def _watch_parent(parent_pid: int) -> None:
    """Exit at once when the driver is gone (its pipe may never wake us)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(3)


def frontend_main(fe_idx: int, specs: list[dict], cfg: dict, prompts: Prompts, in_conn, out_q, parent_pid: int,
                  clock_offset_ns: int = 0) -> None:
    """`in_conn`: the read end of the driver's issue pipe (messages.ISSUE records; empty: stop), or on
    another node a link to the driver (links.py) that is both `in_conn` and `out_q`, whose clock is
    `clock_offset_ns` ahead of this node's (what is sent is moved onto it)."""
    setter = pdeathsig_setter(signal.SIGKILL)
    if setter is not None:
        setter()
    if os.getppid() != parent_pid:  # the driver died before the death signal was armed
        os._exit(3)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="parent-watch").start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller handles Ctrl-C by killing the group
    Core = core_class(cfg["protocol"])
    out = PipeOut(out_q)
    sink = BatchSink(ShiftedOut(out, clock_offset_ns) if clock_offset_ns else out, FrontendLoop.get().loop)
    in_flight = [0, 0]
    cores = {}
    timed = None  # Usage from the first timed query to the stop
    usage = {}
    try:
        for spec in specs:
            c = Core(spec, cfg, prompts, sink, fe_idx)
            c.frontend_in_flight = in_flight
            try:
                c.connect()
            except Exception as exc:
                sink.put(Failed(fe_idx, spec["g"], spec["url"], spec["model"],
                                f"cannot connect: {type(exc).__name__}: {exc}"))
                return
            cores[spec["g"]] = c
        # warm-up: warmup_queries spread over all clients, at least one per client
        n_clients = len(cfg["clients"])
        total = cfg["warmup_queries"]
        t0 = time.monotonic()
        for g, c in cores.items():
            c.warmup(0 if total == 0 else max(1, total // n_clients + (1 if g < total % n_clients else 0)))
        deadline = time.monotonic() + cfg["request_timeout_s"]
        for c in cores.values():
            if not c.warm_done.wait(max(0.0, deadline - time.monotonic())):
                sink.put(Failed(fe_idx, c.g, c.url, c.model,
                                f"warm-up requests got no final response within {cfg['request_timeout_s']:.0f}s"))
                return
            if c.failed:
                return
        in_flight[1] = 0  # the peak of the timed run only
        sink.put(Ready(fe_idx, {"warmup_s": time.monotonic() - t0,
                                "warmup_requests": sum(c.completed for c in cores.values()),
                                "clients": {c.g: c.info for c in cores.values()}, "node": this_node()}))
        while True:
            if not in_conn.poll(1.0):
                continue
            try:
                data = in_conn.recv_bytes()
            except EOFError:  # the driver is gone; _watch_parent ends this process
                data = b""
            if not data:
                usage = timed.stop() if timed is not None else {}
                break
            if timed is None:
                timed = Usage()
            per_core: dict[int, list] = {}
            for qid, sample, g in ISSUE.iter_unpack(data):
                per_core.setdefault(g, []).append((qid, sample))
            for g, batch in per_core.items():
                cores[g].enqueue_many(batch)
    except Exception as exc:
        sink.put(Failed(fe_idx, -1, "", "", f"frontend {fe_idx} crashed: {type(exc).__name__}: {exc}\n"
                                            f"{traceback.format_exc()}"))
    finally:
        for c in cores.values():
            c.close()
        for c in cores.values():  # HTTP cores' per-request moments, once, before Stopped (requests.jsonl)
            if hasattr(c, "stamp_qids"):
                for m in stamp_messages(fe_idx, c.stamp_qids, c.stamp_times):
                    sink.put(m)
        counts = {g: {"sent": c.sent, "completed": c.completed, "peak_in_flight": c.peak, "empty": c.empty,
                      "finish": dict(c.finish_reasons)} for g, c in cores.items()}
        sink.put(Stopped(fe_idx, {"clients": counts, "peak_in_flight": in_flight[1], **usage}))
        sink.flush_now()
