"""The LoadGen driver process: LoadGen itself, the query scheduler, and the completer thread.
Over 400 lines because LoadGen's callbacks, the scheduler and the completer share the driver's one process state.

    python -m harness.loadgen.driver --driver cfg.pkl     (started by runner.run_loadgen)

- LoadGen runs StartTestWithLogSettings on the main thread; `issue_queries` picks a client
  (least-outstanding server for Server/Interactive, round-robin for Offline) and writes the
  query to that client's frontend pipe (messages.ISSUE), from LoadGen's issue thread.
- The completer thread lives for the whole test and is the only caller of FirstTokenComplete /
  QuerySamplesComplete (LoadGen's logger segfaults on calls from threads that exit mid-test),
  holding each response buffer until the call returns (else the accuracy log holds garbage).
  Every completion reports `n_tokens` (else tokens/s reads 0); streamed runs report the first
  token (else TTFT/TPOT read 0 and the latency constraints pass silently).
- The watchdog thread emits progress, notices dead frontends and stalled servers.
On any request error, dead frontend or stalled server the driver reports and exits at once
(LoadGen cannot be aborted). It dies with its caller (PR_SET_PDEATHSIG), and its frontends die
with it. JSON events go to the caller on fd 1; everything else printed goes to harness.log.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

import numpy as np

from harness.loadgen.chunks import CHUNKS_FILE, write_chunks
from harness.loadgen.clients import clients_by_node
from harness.loadgen.frontend import frontend_main
from harness.loadgen.messages import ISSUE, Alive, Done, Failed, First, Quit, Ready, Stamps, Stopped
from harness.loadgen.progress import Progress
from harness.loadgen.remote import NodeProcess, RemoteError, RemoteFrontends
from harness.loadgen.results import answers, client_usage, json_default, measured_stats, write_requests_csv
from harness.loadgen.semaphores import name_semaphores_as_perfdag
from harness.loadgen.settings import SettingsError, build_test_settings
from harness.loadgen.timings import REQUESTS_JSONL, write_requests_jsonl
from harness.loadgen.usage import Usage
import harness.serving.server_metrics as server_metrics
from harness.serving.processes import pdeathsig_setter
from harness.serving.spec import this_node


def _methods(clients: dict) -> dict:
    """How prompts went out and output tokens came back, as the clients settled it (and, for gRPC,
    which RPC carried them)."""
    out = {}
    for key in ("prompt", "output_tokens", "rpc"):
        seen = sorted({str(c.get(key)) for c in clients.values() if c.get(key)})
        if seen or key != "rpc":
            out[key] = seen[0] if len(seen) == 1 else (seen or None)
    return out


class _Fatal(Exception):
    pass


def _flat(m) -> list:
    return m if isinstance(m, list) else [m]


class _Driver(Progress):
    def __init__(self, cfg: dict, emit: Callable[[dict], None]):
        self.cfg = cfg
        self.emit = emit
        self.scenario = cfg["scenario"]
        self.clients = cfg["clients"]
        self.n_servers = len(cfg["endpoints"])
        self.lock = threading.Lock()
        self.fatal_lock = threading.Lock()
        self.inflight: dict[int, list] = {}
        self.client_out = [0] * len(self.clients)
        self.server_out = [0] * self.n_servers
        self.server_busy_since = [0] * self.n_servers
        self.server_last = [0] * self.n_servers
        self.server_done = [0] * self.n_servers
        self.clients_of = [[c["g"] for c in self.clients if c["server"] == s] for s in range(self.n_servers)]
        self.server_of = [c["server"] for c in self.clients]      # by global client number
        self.frontend_of = [c["frontend"] for c in self.clients]
        self.rr = itertools.count()
        self.rr_server = itertools.count()
        self.issued = 0
        self.completed = 0
        self.tokens = 0
        self.t0 = 0
        self.records: list[tuple] = []
        self.chunks: list[bytes] = []  # each record's streamed chunks, packed (chunks.py)
        self.stamps: list[Stamps] = []  # the HTTP frontends' per-request moments (timings.py)
        # the progress line's p99 over the latest completions (its cost goes with wall time)
        self.ttfts = collections.deque(maxlen=4096)
        self.lats = collections.deque(maxlen=4096)
        self.ready = set()
        self.ready_info: dict = {}
        self.stopped = set()
        self.ready_ev = threading.Event()
        self.stopped_ev = threading.Event()
        self.stopping = False
        self.request_errors = 0
        self.procs: dict = {}       # frontend -> its process (on another node: its node's host command)
        self.to_frontends = []      # the write end of each frontend's issue pipe (or its link)
        self.send_locks = []        # one writer at a time per pipe (a long message is several writes)
        self.remote: RemoteFrontends | None = None
        self.t_setup = time.monotonic()
        self.frontend_usage: dict[int, dict] = {}
        self.rate_history: collections.deque = collections.deque()

    # -- fatal: report and leave at once (LoadGen cannot be aborted) --
    def fatal(self, message: str, server: str | None = None) -> None:
        if not self.fatal_lock.acquire(blocking=False):
            time.sleep(3600)  # another thread is already exiting the process
        try:
            self.emit({"event": "fatal", "message": message, "server": server, "stats": self._stats_brief()})
            sys.stderr.write(f"FATAL: {message}\n")
            sys.stderr.flush()
        finally:
            for p in self.procs.values():
                with contextlib.suppress(Exception):
                    p.kill()
            if self.remote is not None:  # hosts whose frontends had not joined yet
                self.remote.kill()
            os._exit(3)

    def _stats_brief(self) -> dict:
        return {"issued": self.issued, "completed": self.completed, "outstanding": len(self.inflight),
                "tokens": self.tokens, "request_errors": self.request_errors}

    # -- server selection (LoadGen issue thread) --
    def _pick(self) -> int:
        if self.scenario == "Offline":
            return next(self.rr) % len(self.clients)
        if self.n_servers == 1:  # the one server (its rotation has nothing to rotate)
            best_s = 0
        else:
            start = next(self.rr_server) % self.n_servers
            best_s = min(range(self.n_servers), key=lambda s: (self.server_out[s], (s - start) % self.n_servers))
        return min(self.clients_of[best_s], key=self.client_out.__getitem__)

    def issue_queries(self, query_samples) -> None:
        # Per query (Server issues one per call): no dict lookups of client specs, no per-call
        # defaultdict; one list per frontend that has queries
        now = time.monotonic_ns()
        per_fe: dict[int, list] = {}
        server_of, frontend_of, pick, pack = self.server_of, self.frontend_of, self._pick, ISSUE.pack
        client_out, server_out, inflight = self.client_out, self.server_out, self.inflight
        with self.lock:
            if not self.t0:
                self.t0 = now
            for qs in query_samples:
                g = pick()
                s = server_of[g]
                qid, idx = qs.id, qs.index
                inflight[qid] = [idx, g, now]
                client_out[g] += 1
                if server_out[s] == 0:
                    self.server_busy_since[s] = now
                server_out[s] += 1
                fe = frontend_of[g]
                items = per_fe.get(fe)
                if items is None:
                    items = per_fe[fe] = []
                items.append(pack(qid, idx, g))
            self.issued += len(query_samples)
        # A frontend more than a pipe's buffer behind (64 KiB, ~3,000 queries) holds this thread until
        # it reads; such a frontend is saturated, and the run is flagged client-bound either way.
        for fe, items in per_fe.items():
            try:
                with self.send_locks[fe]:
                    self.to_frontends[fe].send_bytes(b"".join(items))
            except OSError:  # that frontend is gone: the watchdog reports it (and ends the run)
                pass

    # -- completer thread: the only caller of FirstTokenComplete / QuerySamplesComplete --
    def completer(self, lg, readers: list) -> None:
        """Reads every frontend's pipe (and the driver's own, which says Quit) until Quit."""
        import select

        # one poll object for the whole run (multiprocessing's wait() builds a selector per call)
        poller = select.poll()
        by_fd = {r.fileno(): r for r in readers}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        try:
            while True:
                msgs = []
                for fd, _ in poller.poll():
                    r = by_fd[fd]
                    try:
                        msgs += _flat(r.recv())  # frontends send lists (one per loop pass)
                    except EOFError:  # that frontend exited; the watchdog judges whether it should have
                        poller.unregister(fd)
                firsts, dones = [], []
                quit_ = False
                for m in msgs:
                    if isinstance(m, First):
                        firsts.append(m)
                    elif isinstance(m, Done):
                        dones.append(m)
                    elif isinstance(m, Alive):
                        s = self.server_of[m.client]
                        self.server_last[s] = max(self.server_last[s], m.t)
                    elif isinstance(m, Ready):
                        self.ready.add(m.frontend)
                        self.ready_info[m.frontend] = m.info
                        if len(self.ready) == self.cfg["frontends"]:
                            self.ready_ev.set()
                    elif isinstance(m, Stamps):
                        self.stamps.append(m)
                    elif isinstance(m, Stopped):
                        self.stopped.add(m.frontend)
                        self.frontend_usage[m.frontend] = m.counts
                        if len(self.stopped) == self.cfg["frontends"]:
                            self.stopped_ev.set()
                    elif isinstance(m, Failed):
                        if self.stopping and "CANCELLED" in m.message:
                            continue
                        self.request_errors += 1
                        where = f"server {m.url} (model {m.model!r})" if m.url else f"frontend {m.frontend}"
                        self.fatal(f"{where}: {m.message.strip()}", server=m.url or None)
                    elif isinstance(m, Quit):
                        quit_ = True
                if firsts:
                    self._complete_first(lg, firsts)
                if dones:
                    self._complete_done(lg, dones)
                if quit_:
                    return
        except Exception as exc:
            self.fatal(f"completer thread crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")

    def _complete_first(self, lg, msgs) -> None:
        keep, resps = [], []
        with self.lock:
            for qid, t, data in msgs:
                st = self.inflight.get(qid)
                if st is None:
                    continue
                s = self.server_of[st[1]]
                self.server_last[s] = max(self.server_last[s], t)
                arr = np.frombuffer(data, dtype=np.int32) if data else np.zeros(1, dtype=np.int32)[:0]
                keep.append(arr)
                resps.append(lg.QuerySampleResponse(qid, arr.ctypes.data, arr.nbytes))
                self.ttfts.append((t - st[2]) / 1e6)
        if resps:
            lg.FirstTokenComplete(resps)
        del keep  # buffers stay referenced until LoadGen copied them

    def _complete_done(self, lg, msgs) -> None:
        keep, resps = [], []
        with self.lock:
            for qid, t_first, t_done, data, n, chunks, t_sent in msgs:
                st = self.inflight.pop(qid, None)
                if st is None:
                    continue
                sidx, g, t_issue = st
                s = self.server_of[g]
                self.client_out[g] -= 1
                self.server_out[s] -= 1
                self.server_done[s] += 1
                self.server_last[s] = max(self.server_last[s], t_done)
                if data:  # bytes LoadGen logs as they are: token ids, or a chat answer's UTF-8 text
                    arr = np.frombuffer(data, dtype=np.uint8)
                    keep.append(arr)
                    resps.append(lg.QuerySampleResponse(qid, arr.ctypes.data, arr.nbytes, int(n)))
                else:  # a performance run: the count only
                    resps.append(lg.QuerySampleResponse(qid, 0, 0, int(n)))
                self.records.append((sidx, s, t_issue, t_first, t_done, int(n), t_sent, qid, g))
                self.chunks.append(chunks)
                self.completed += 1
                self.tokens += int(n)
                self.lats.append((t_done - t_issue) / 1e6)
        if resps:
            lg.QuerySamplesComplete(resps)
        del keep

    # -- watchdog thread --
    def watchdog(self) -> None:
        timeout_ns = int(self.cfg["request_timeout_s"] * 1e9)
        last_emit = 0.0
        while not self.stopped_ev.is_set():
            time.sleep(0.25)
            for i, p in list(self.procs.items()):
                if p.exitcode is not None and i not in self.stopped and not self.stopping:
                    where = f"on node {p.node} (its host command, pid {p.pid})" if isinstance(p, NodeProcess) \
                        else f"(pid {p.pid})"
                    self.fatal(f"frontend process {i} {where} exited with code {p.exitcode} mid-run")
            now = time.monotonic_ns()
            with self.lock:
                for s in range(self.n_servers):
                    if self.server_out[s] > 0:
                        since = max(self.server_busy_since[s], self.server_last[s])
                        if now - since > timeout_ns:
                            url = self.cfg["endpoints"][s]
                            msg = (f"server {url} (model {self.cfg['models'][s]!r}) sent no response for "
                                   f"{self.cfg['request_timeout_s']:.0f}s with {self.server_out[s]} request(s) "
                                   "outstanding (harness.request_timeout_s)")
                            break
                else:
                    msg = None
            if msg:
                self.request_errors += 1
                self.fatal(msg, server=url)
            if time.monotonic() - last_emit >= 0.5:
                last_emit = time.monotonic()
                self.emit(self.progress())

    # -- the run --
    def run(self) -> int:
        import multiprocessing as mp

        import mlperf_loadgen as lg

        cfg = self.cfg
        ctx = mp.get_context("spawn")
        # The driver makes no semaphores (pipes only); any multiprocessing object that would gets
        # perfdag's name, so that whoever outlives a killed driver finds it (semaphores.py).
        name_semaphores_as_perfdag()
        # One pipe per frontend, written in the frontend's loop thread: no feeder thread to wake
        # (and contend for its GIL) per message batch, and no lock shared between processes that a
        # frontend exiting mid-write could leave held.
        n_fe = cfg["frontends"]
        fe_cfg = {k: v for k, v in cfg.items() if k != "prompts"}
        remote = {fe for n in cfg.get("remote") or () for fe in n["frontends"]}
        if remote:  # their hosts start first: a step on another node takes longest
            self.remote = RemoteFrontends(cfg["remote"], cfg["listen"], {"cfg": fe_cfg, "prompts": cfg["prompts"]})
            self.remote.start()
        local = [fe for fe in range(n_fe) if fe not in remote]
        pipes = {fe: ctx.Pipe(duplex=False) for fe in local}
        quit_r, self.quit_w = ctx.Pipe(duplex=False)
        issue_pipes = {fe: ctx.Pipe(duplex=False) for fe in local}
        self.to_frontends = [issue_pipes[fe][1] if fe in issue_pipes else None for fe in range(n_fe)]
        self.send_locks = [threading.Lock() for _ in range(n_fe)]
        for fe in local:
            specs = [c for c in self.clients if c["frontend"] == fe]
            p = ctx.Process(target=frontend_main, name=f"perfdag-frontend-{fe}", daemon=True,
                            args=(fe, specs, fe_cfg, cfg["prompts"], issue_pipes[fe][0], pipes[fe][1], os.getpid()))
            p.start()
            self.procs[fe] = p
        for fe in local:
            pipes[fe][1].close()  # the frontends hold the write ends: a reader sees EOF when its frontend exits
            issue_pipes[fe][0].close()  # and the read ends of their issue pipes
        readers = [pipes[fe][0] for fe in local]
        if self.remote is not None:
            try:
                joined = self.remote.wait_connected(cfg["startup_timeout_s"])
            except RemoteError as exc:
                raise _Fatal(str(exc)) from None
            for fe, link in joined.items():  # a link is both of a frontend's pipes
                self.to_frontends[fe] = link
                self.procs[fe] = self.remote.process_of(fe)
                readers.append(link)
        self.emit({"event": "started", "pid": os.getpid(), "frontend_pids": [p.pid for p in self.procs.values()]})
        comp = threading.Thread(target=self.completer, args=(lg, readers + [quit_r]),
                                name="loadgen-completer", daemon=True)
        comp.start()
        wd = threading.Thread(target=self.watchdog, name="loadgen-watchdog", daemon=True)
        wd.start()
        # LoadGen's settings, SUT and QSL while the frontends connect and warm up, not after
        try:
            settings, self.perf_count = build_test_settings(lg, self.scenario, cfg["mode"], cfg["settings"],
                                                            cfg["n_samples"], Path(cfg["out_dir"]))
        except SettingsError as exc:
            raise _Fatal(str(exc)) from None
        log_settings = lg.LogSettings()
        log_settings.log_output.outdir = cfg["out_dir"]
        log_settings.log_output.copy_summary_to_stdout = False
        log_settings.enable_trace = False
        sut = lg.ConstructSUT(self.issue_queries, lambda: None)  # nothing to flush
        qsl = lg.ConstructQSL(cfg["n_samples"], self.perf_count, lambda s: None, lambda s: None)
        if not self.ready_ev.wait(cfg["startup_timeout_s"]):
            missing = sorted(set(range(n_fe)) - self.ready)
            self.fatal(f"frontend(s) {missing} not ready (connect + warm-up) within {cfg['startup_timeout_s']:.0f}s; "
                       f"servers {cfg['endpoints']}")
        warm_s = max((i.get("warmup_s", 0.0) for i in self.ready_info.values()), default=0.0)
        warm_n = sum(i.get("warmup_requests", 0) for i in self.ready_info.values())
        clients = {}
        for info in self.ready_info.values():
            clients.update(info.get("clients", {}))
        streaming = {g: c.get("streaming") for g, c in clients.items()}
        sys.stderr.write(f"frontends ready: warm-up {warm_n} requests in {warm_s:.2f}s; streaming {streaming}\n")

        # the servers' own metrics around LoadGen's test alone: after the warm-up, before the frontends stop
        scraped = cfg.get("server_metrics") or []
        metrics_before = server_metrics.scrape(scraped) if scraped else None
        usage = Usage()
        lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
        driver_usage = usage.stop()
        test_s = driver_usage["wall_s"]
        final = self.progress()
        # close the gRPC streams (frontends) before anyone stops tritonserver
        self.stopping = True
        for fe, w in enumerate(self.to_frontends):
            with contextlib.suppress(OSError), self.send_locks[fe]:
                w.send_bytes(b"")  # the end
        if not self.stopped_ev.wait(60.0):
            sys.stderr.write("frontends did not stop within 60s; killing them\n")
        if self.remote is not None:  # their hosts measure the clock offset again, then leave
            self.remote.finish()
        for p in self.procs.values():
            p.join(10.0)
            if p.is_alive():
                p.kill()
        # once the frontends stopped: nothing was sent since the test, and a server that counts a request
        # when it lets go of it (just after its last response) has counted each
        server_side = server_metrics.summary(scraped, metrics_before, server_metrics.scrape(scraped, metrics_before)) \
            if scraped else None
        self.quit_w.send([Quit()])
        comp.join(10.0)
        lg.DestroySUT(sut)
        lg.DestroyQSL(qsl)
        # Offline is a closed loop: the client, not LoadGen, decides when a request goes out
        from_send = cfg.get("scenario") == "Offline"
        write_requests_csv(Path(cfg["out_dir"]) / "requests.csv", self.records, self.t0, from_send=from_send)
        write_requests_jsonl(Path(cfg["out_dir"]) / REQUESTS_JSONL, self.records, self.t0, self.stamps)
        if any(self.chunks):
            write_chunks(Path(cfg["out_dir"]) / CHUNKS_FILE, self.chunks)
        per_server = [{"endpoint": cfg["endpoints"][s], "model": cfg["models"][s], "completed": self.server_done[s]}
                      for s in range(self.n_servers)]
        measured = measured_stats(self.records, self.chunks, from_send=from_send,
                                  limits=[cfg["prompts"].max_tokens(r[0], cfg["max_new_tokens"]) for r in self.records])
        if measured:  # what the clients saw of the answers: empty ones, and the server's own finish reasons
            said = answers(self.frontend_usage)
            measured["empty"] = said["empty"]
            if measured.get("finish") is not None and said["server_finish"]:
                measured["finish"]["server"] = said["server_finish"]
        stats = {**self._stats_brief(), "test_s": round(test_s, 3), "warmup_s": round(warm_s, 3),
                 "warmup_requests": warm_n, "streaming": any(streaming.values()) if streaming else None,
                 "per_server": per_server, "measured": measured,
                 "methods": _methods(clients), "max_in_flight": cfg.get("max_in_flight"),
                 **client_usage(driver_usage, self.frontend_usage),
                 **({server_metrics.KEY: server_side} if server_side else {})}
        stats["clients"] = clients_by_node(this_node(), stats["client_cpu"], self.ready_info, self.frontend_usage,
                                           self.remote.clocks if self.remote is not None else {})
        self.emit({"event": "done", "stats": stats, "final_progress": final})
        return 0


def _driver_main(cfg_path: str) -> int:
    # fd 1 carries JSON events to the caller; everything else printed to stdout (LoadGen,
    # libraries) goes to stderr = harness.log.
    event_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    events = os.fdopen(event_fd, "w", buffering=1)
    ev_lock = threading.Lock()

    def emit(obj: dict) -> None:
        line = json.dumps(obj, default=json_default)
        with ev_lock:
            try:
                events.write(line + "\n")
                events.flush()
            except (BrokenPipeError, OSError):
                os._exit(4)  # the caller is gone

    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    setter = pdeathsig_setter(signal.SIGKILL)  # the caller died: so do we (and, by theirs, the frontends)
    if setter is not None:
        setter()
    if len(sys.argv) > 3 and os.getppid() != int(sys.argv[3]):
        os._exit(3)
    with open(cfg_path, "rb") as f:
        cfg = pickle.load(f)
    driver = _Driver(cfg, emit)
    try:
        return driver.run()
    except _Fatal as exc:
        driver.fatal(str(exc))
    except BaseException as exc:
        driver.fatal(f"driver crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    return 2


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--driver":
        sys.exit(_driver_main(sys.argv[2]))
    sys.stderr.write("usage: python -m harness.loadgen.driver --driver CONFIG.pkl [PARENT_PID] (internal)\n")
    sys.exit(2)
