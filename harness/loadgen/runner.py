"""The caller side of a LoadGen run: `run_loadgen` validates, starts the driver process, shows
progress, and turns the driver's outcome into result.json or a LoadgenError naming the server.
Over 400 lines because validation, progress and the outcome of one run share the caller's one state machine.

Process layout of one run::

    caller (run_loadgen)          JSON events on a pipe; kills the driver's group on any failure
      -> driver (driver.py)       LoadGen, scheduler, completer; its own session; dies with us
        -> frontends x clients    frontend.py + one core per client (cores/); die with the driver

Why a separate driver process: LoadGen cannot be aborted, so a dead server would otherwise leave
it issuing queries until min_duration ends or hang forever; its built-in mlperf.conf only
applies on the first FromConfig of a process; and a LoadGen crash cannot take the caller down.
Streams and connections are closed before this returns, i.e. before anyone stops a server.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from harness import CHECKOUT
from harness.config.slo import mlperf_limits
from harness.errors import MeasurementError
from harness.loadgen import semaphores
from harness.loadgen.cores.base import Prompts, output_lengths
from harness.loadgen.chunks import CHUNKS_FILE
from harness.loadgen.goodput import goodput
from harness.loadgen.results import json_default, merge_measured, parse_summary, read_requests_csv
from harness.loadgen.settings import MODES, SCENARIOS, SETTINGS_KEYS
from harness.loadgen.timings import REQUESTS_JSONL
import harness.serving.server_metrics as server_side

REPO_ROOT = CHECKOUT
LOADGEN_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json",
                 "mlperf_log_trace.json")
HEARTBEAT_TIMEOUT_S = 60.0
DEFAULT_IN_FLIGHT_PER_SERVER = 64


class LoadgenError(MeasurementError):
    """A LoadGen run failed: a server died or errored, a request stalled, a frontend or the
    driver crashed.  ``server`` is the failing endpoint when one is to blame."""

    def __init__(self, message: str, *, server: str | None = None, stats: dict | None = None):
        super().__init__(message)
        self.server = server
        self.stats = stats or {}


# ======================================================================================
# Caller side
# ======================================================================================

def run_loadgen(
    endpoints: Sequence[str],
    model_names: str | Sequence[str],
    samples: Sequence,
    settings: Mapping[str, Any],
    out_dir: str | os.PathLike,
    *,
    scenario: str = "Offline",
    mode: str = "PerformanceOnly",
    frontends: int = 1,
    clients_per_frontend: int = 4,
    warmup_queries: int = 8,
    end_id: int | None = None,
    max_new_tokens: int = 32,
    request_timeout_s: float = 300.0,
    progress: bool | Callable[[dict], None] | None = None,
    streaming: bool | None = None,
    pad_id: int | None = None,
    startup_timeout_s: float = 180.0,
    protocol: str = "triton-grpc",
    prompt_texts: Sequence[str] | None = None,
    api: Mapping[str, Any] | None = None,
    max_in_flight: int | None = None,
    notes: Mapping[str, Any] | None = None,
    limits: Mapping[str, int] | None = None,
    remote: Sequence[Mapping[str, Any]] | None = None,
    listen: str | None = None,
    server_metrics: Sequence[Mapping[str, Any]] | None = None,
) -> dict:
    """Run one LoadGen test against ``endpoints`` speaking ``protocol`` (a client core: Triton gRPC
    or OpenAI HTTP) and return ``result.json``'s content plus ``requests`` (per-request latencies).

    ``samples``: :class:`harness.model.datasets.Sample` list (or lists of input ids); the QSL index
    is the position.  ``model_names``: one name for all endpoints or one per endpoint.
    ``settings``: LoadGen settings (keys :data:`SETTINGS_KEYS`; ``None`` values are skipped):
    built-in mlperf.conf values of ``mlperf_model`` (default llama2-70b; Interactive reads
    ``<model>-interactive``) first, then ``user_conf`` (a LoadGen user.conf path), then the
    explicit keys.  ``seed`` 0 keeps MLPerf's official RNG seeds.  ``streaming`` defaults to
    True for Server/Interactive, False for Offline (a non-decoupled model never streams).
    ``progress``: True for a live ``\\r`` line on stderr, False for none, a callable to get
    the progress dicts, None for auto (live line on a terminal, a line per 10 s otherwise).
    ``remote``: frontends that run on other nodes, ``[{"node": name, "frontends": [indexes], "argv":
    [a command that starts a process there]}]`` (client_nodes.py builds them under Slurm); they
    connect back to the driver at ``listen``, this node's address as they reach it (remote.py).
    ``server_metrics``: the servers whose own metrics are scraped right before and after LoadGen's test
    (serving/server_metrics.py `targets`); result.json's ``server_metrics`` has their differences.

    Writes into ``out_dir``: LoadGen's files under their own names, ``user.conf``,
    ``harness.log``, ``requests.csv``, ``requests.jsonl`` (per-request timings, timings.py) and ``result.json``
    (with ``notes`` added).  Raises :class:`LoadgenError`
    (naming the server) when anything fails; gRPC streams are closed when this returns.
    """
    cfg = _make_config(endpoints, model_names, samples, settings, scenario=scenario, mode=mode,
                       frontends=frontends, clients_per_frontend=clients_per_frontend,
                       warmup_queries=warmup_queries, end_id=end_id, pad_id=pad_id,
                       max_new_tokens=max_new_tokens, request_timeout_s=request_timeout_s,
                       streaming=streaming, startup_timeout_s=startup_timeout_s, protocol=protocol,
                       prompt_texts=prompt_texts, api=api, max_in_flight=max_in_flight, remote=remote,
                       listen=listen)
    cfg["server_metrics"] = [dict(t) for t in server_metrics or ()]
    cfg["limits"] = dict(limits or {})  # how much of one answer a core holds (harness.max_response_bytes...)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in (*LOADGEN_FILES, "result.json", "requests.csv", REQUESTS_JSONL, CHUNKS_FILE):
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()
    cfg["out_dir"] = str(out)
    # token ids matter only where LoadGen logs them: accuracy runs, and TEST06 (audit.config) or a
    # user.conf that may ask for accuracy-log sampling in a performance run
    cfg["keep_tokens"] = (mode == "AccuracyOnly" or bool(cfg["settings"].get("user_conf"))
                          or (out / "audit.config").exists())
    # The driver's input lives in the output directory (a stage's temp dir: swept if we are killed).
    cfg_path = out / f".driver-{os.getpid()}.pkl"
    try:
        with open(cfg_path, "wb") as f:
            pickle.dump(cfg, f, protocol=pickle.HIGHEST_PROTOCOL)
        stats = _run_driver(cfg, cfg_path, out, progress)
    finally:
        with contextlib.suppress(OSError):
            cfg_path.unlink()
    result = parse_summary(out)
    result["loadgen_scenario"] = result["scenario"]
    result["scenario"] = cfg["scenario"]  # Interactive runs as LoadGen's Server scenario
    result.update(merge_measured(result, stats, cfg))
    if server_side.KEY in stats:  # the servers' own metrics over the test (server_metrics.summary)
        result[server_side.KEY] = stats[server_side.KEY]
    requests = read_requests_csv(out / "requests.csv")
    result["goodput"] = goodput(requests, mlperf_limits(result.get("ttft_constraint_ms"), result.get("tpot_constraint_ms")))
    result.update(notes or {})  # what the caller knows of the run (the serving layout)
    (out / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True, default=json_default) + "\n")
    result["requests"] = requests
    return result


def _samples_to_arrays(samples: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """The samples' input ids as one INT32 array and the offsets of each sample in it. One pass of
    numpy over all ids (a sample's own checks cost more than its conversion); anything it cannot
    take (a nested or ragged sample) goes through `_sample_array`, which names the sample."""
    seqs = []
    for pos, s in enumerate(samples):
        if hasattr(s, "input_ids"):
            idx = getattr(s, "index", pos)
            if idx != pos:
                raise ValueError(f"samples[{pos}].index is {idx}: the QSL index must be the position in the list")
            s = s.input_ids
        seqs.append(s if hasattr(s, "__len__") else list(s))
    if not seqs:
        raise ValueError("no samples: LoadGen's QSL needs at least one")
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    try:
        flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(offsets[-1]))
    except (TypeError, ValueError):
        flat = None
    if flat is None or not lengths.all() or (flat.size and (flat.min() < 0 or flat.max() > 2**31 - 1)):
        flat = np.concatenate([_sample_array(pos, ids) for pos, ids in enumerate(seqs)])  # names a bad sample
    return flat.astype(np.int32), offsets


def _sample_array(pos: int, ids) -> np.ndarray:
    a = np.asarray(list(ids), dtype=np.int64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"samples[{pos}] has no input ids")
    if a.min() < 0 or a.max() > 2**31 - 1:
        raise ValueError(f"samples[{pos}] has token ids outside INT32")
    return a


def _normalise_endpoint(url: str) -> str:
    url = str(url).strip()
    for prefix in ("grpc://", "http://", "https://"):
        if url.startswith(prefix):
            url = url[len(prefix):]
    if not url or ":" not in url:
        raise ValueError(f"endpoint {url!r} is not host:port")
    return url.rstrip("/")


def _make_config(endpoints, model_names, samples, settings, *, scenario, mode, frontends, clients_per_frontend,
                 warmup_queries, end_id, pad_id, max_new_tokens, request_timeout_s, streaming,
                 startup_timeout_s, protocol="triton-grpc", prompt_texts=None, api=None, max_in_flight=None,
                 remote=None, listen=None) -> dict:
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    eps = [_normalise_endpoint(e) for e in (endpoints or [])]
    if not eps:
        raise ValueError("no endpoints to send queries to")
    if isinstance(model_names, str):
        models = [model_names] * len(eps)
    else:
        models = list(model_names)
        if len(models) == 1:
            models = models * len(eps)
        if len(models) != len(eps):
            raise ValueError(f"{len(models)} model names for {len(eps)} endpoints")
    if not samples:
        raise ValueError("no samples")
    frontends, clients_per_frontend = int(frontends), int(clients_per_frontend)
    if frontends < 1 or clients_per_frontend < 1:
        raise ValueError("frontends and clients_per_frontend must be >= 1")
    if frontends * clients_per_frontend < len(eps):
        raise ValueError(f"frontends x clients_per_frontend = {frontends * clients_per_frontend} < {len(eps)} "
                         "endpoints: every server needs at least one client")
    if int(max_new_tokens) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    settings = {k: v for k, v in dict(settings or {}).items() if v is not None}
    unknown = sorted(set(settings) - SETTINGS_KEYS)
    if unknown:
        raise ValueError(f"unknown LoadGen setting(s) {unknown}; known: {sorted(SETTINGS_KEYS)}")
    if "scenario" in settings and settings["scenario"] != scenario:
        raise ValueError(f"settings.scenario {settings['scenario']!r} contradicts scenario={scenario!r}")
    if "mode" in settings and settings["mode"] != mode:
        raise ValueError(f"settings.mode {settings['mode']!r} contradicts mode={mode!r}")
    if settings.get("user_conf") and not Path(settings["user_conf"]).is_file():
        raise ValueError(f"settings.user_conf {settings['user_conf']!r} is not a file")
    flat, offsets = _samples_to_arrays(samples)
    n_clients = frontends * clients_per_frontend
    # client g -> server g % S (so round-robin over clients alternates servers), frontend g // C
    max_in_flight = DEFAULT_IN_FLIGHT_PER_SERVER * len(eps) if max_in_flight is None else int(max_in_flight)
    if max_in_flight < n_clients:
        raise ValueError(f"max_in_flight {max_in_flight} < {n_clients} clients (frontends x clients_per_frontend): "
                         "every client needs at least one request in flight")
    clients = [{"g": g, "frontend": g // clients_per_frontend, "server": g % len(eps),
                "url": eps[g % len(eps)], "model": models[g % len(eps)],
                "cap": max_in_flight // n_clients + (1 if g < max_in_flight % n_clients else 0)}
               for g in range(n_clients)]
    if streaming is None:
        streaming = scenario != "Offline"
    remote = _remote_nodes(remote, frontends, listen)
    return {
        "endpoints": eps, "models": models, "scenario": scenario, "mode": mode, "settings": settings,
        "frontends": frontends, "clients_per_frontend": clients_per_frontend, "clients": clients,
        "warmup_queries": max(0, int(warmup_queries)), "end_id": end_id, "pad_id": pad_id,
        "max_new_tokens": int(max_new_tokens), "request_timeout_s": float(request_timeout_s),
        "streaming": bool(streaming), "startup_timeout_s": float(startup_timeout_s),
        "openai": dict(api or {}), "max_in_flight": max_in_flight,
        "prompts": Prompts(flat, offsets, list(prompt_texts) if prompt_texts is not None else None,
                           output_lengths(samples, int(max_new_tokens))),
        "n_samples": len(offsets) - 1, "protocol": protocol,
        **({"remote": remote, "listen": listen} if remote else {}),
    }


def _remote_nodes(remote, frontends: int, listen: str | None) -> list[dict]:
    """The frontends on other nodes, checked: each on one node, each node with at least one, a
    command to start it, and an address to call back to."""
    out, seen = [], set()
    for n in remote or ():
        fes = [int(f) for f in n["frontends"]]
        if not fes or not n.get("argv"):
            raise ValueError(f"remote node {n.get('node')!r}: no frontends, or no command to start them")
        bad = [f for f in fes if not 0 <= f < frontends or f in seen]
        if bad:
            raise ValueError(f"remote node {n.get('node')!r}: frontends {bad} are out of range (0..{frontends - 1}) "
                             "or placed twice")
        seen.update(fes)
        out.append({"node": str(n["node"]), "frontends": fes, "argv": [str(a) for a in n["argv"]]})
    if out and not listen:
        raise ValueError("frontends on other nodes need `listen`: this node's address as they reach it")
    return out


class _Progress:
    def __init__(self, progress, label: str):
        self.cb = progress if callable(progress) else None
        if progress is None:
            progress = "live" if sys.stderr.isatty() else "periodic"
        elif progress is True:
            progress = "live"
        self.kind = "callback" if self.cb else (progress or "off")
        self.label = label
        self.last_print = 0.0
        self.dirty = False

    def update(self, p: dict) -> None:
        if self.kind == "callback":
            self.cb(p)
            return
        if self.kind == "off":
            return
        line = _progress_line(self.label, p)
        if self.kind == "live":
            sys.stderr.write("\r" + line[:200].ljust(100))
            sys.stderr.flush()
            self.dirty = True
        elif time.monotonic() - self.last_print >= 10.0:
            self.last_print = time.monotonic()
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def close(self, final: dict | None = None) -> None:
        if self.kind == "live" and self.dirty:
            if final:
                sys.stderr.write("\r" + _progress_line(self.label, final)[:200].ljust(100))
            sys.stderr.write("\n")
            sys.stderr.flush()
        elif self.kind == "periodic" and final:
            sys.stderr.write(_progress_line(self.label, final) + "\n")
            sys.stderr.flush()


def _progress_line(label: str, p: dict) -> str:
    if p.get("phase") in ("warmup", "ready"):
        return f"[{label}] connecting clients and warming up ({p.get('elapsed_setup_s', 0):.0f}s)"
    lat = p.get("p99_ttft_ms")
    lat_s = f"p99 TTFT {lat:.0f} ms" if lat is not None else (
        f"p99 latency {p['p99_latency_ms']:.0f} ms" if p.get("p99_latency_ms") is not None else "p99 TTFT -")
    steady = p.get("steady_tokens_per_s")
    now = f" (now {steady:.0f})" if steady is not None else ""
    return (f"[{label}] {p.get('completed', 0)}/{p.get('issued', 0)} samples done | "
            f"{p.get('samples_per_s', 0):.1f} samples/s | {p.get('tokens_per_s', 0):.0f} tok/s{now} | {lat_s} | "
            f"outstanding {p.get('outstanding', 0)} | {p.get('elapsed_s', 0):.0f}s")


def _kill_group(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM then SIGKILL the driver's process group (driver + its frontends only: it was
    started with start_new_session=True, so the group id is its pid)."""
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                break
            proc.poll()
            time.sleep(0.05)
        else:
            continue
        break
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)


def _run_driver(cfg: dict, cfg_path: Path, out: Path, progress) -> dict:
    label = f"{cfg['scenario']} {cfg['mode'].replace('Only', '')}"
    prog = _Progress(progress, label)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    log_path = out / "harness.log"
    log_f = open(log_path, "ab", buffering=0)
    cmd = [sys.executable, "-m", "harness.loadgen.driver", "--driver", str(cfg_path), str(os.getpid())]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_f, stdin=subprocess.DEVNULL, env=env,
                            cwd=str(out), start_new_session=True)
    try:
        return _follow_driver(proc, prog, log_f, log_path, out)
    finally:  # every way out: the driver is gone by now, and a killed one cannot remove its semaphores
        if proc.poll() is not None:
            semaphores.remove_left_by(proc.pid)


def _follow_driver(proc: subprocess.Popen, prog: "_Progress", log_f, log_path: Path, out: Path) -> dict:
    """Reads the driver's events until it is done or failed; the driver's group is gone on return."""
    events: "queue.Queue[dict | None]" = queue.Queue()

    def reader():
        try:
            for raw in proc.stdout:
                try:
                    events.put(json.loads(raw))
                except json.JSONDecodeError:
                    events.put({"event": "log", "line": raw.decode("utf-8", "replace").rstrip()})
        finally:
            events.put(None)

    t = threading.Thread(target=reader, name="loadgen-driver-reader", daemon=True)
    t.start()
    last_progress: dict = {}
    done: dict | None = None
    fatal: dict | None = None
    last_event = time.monotonic()
    eof = False
    try:
        while True:
            try:
                ev = events.get(timeout=1.0)
            except queue.Empty:
                ev = "timeout"
            if ev is None:
                eof = True
                break
            if ev == "timeout":
                if time.monotonic() - last_event > HEARTBEAT_TIMEOUT_S:
                    fatal = {"message": f"the LoadGen driver (pid {proc.pid}) sent nothing for "
                                        f"{HEARTBEAT_TIMEOUT_S:.0f}s; it is hung"}
                    break
                continue
            last_event = time.monotonic()
            kind = ev.get("event")
            if kind == "progress":
                last_progress = ev
                prog.update(ev)
            elif kind == "fatal":
                fatal = ev
                break
            elif kind == "done":
                done = ev
            elif kind == "log":
                pass
    except BaseException as exc:
        # Interrupted: the run is discarded, so no grace beyond a second (Ctrl-C ends within seconds).
        _kill_group(proc, 1.0 if isinstance(exc, KeyboardInterrupt) else 3.0)
        prog.close()
        log_f.close()
        raise
    if fatal is not None or done is None:
        if proc.poll() is None:
            # give a fatal driver a moment to exit on its own, then make sure
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        _kill_group(proc)
    else:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
    prog.close(done.get("final_progress") if done else None)
    log_f.close()
    rc = proc.returncode
    if fatal is not None:
        stats = fatal.get("stats") or {}
        msg = fatal.get("message", "LoadGen run failed")
        counts = ""
        if stats:
            counts = (f" ({stats.get('completed', 0)} samples completed, {stats.get('outstanding', 0)} outstanding, "
                      f"{stats.get('request_errors', 0)} request error(s))")
        raise LoadgenError(f"LoadGen run aborted: {msg}{counts}; LoadGen logs (incomplete) and harness.log in {out}",
                           server=fatal.get("server"), stats=stats)
    if done is None or rc != 0:
        how = f"was killed by signal {-rc}" if rc is not None and rc < 0 else f"exited with code {rc}"
        from_log = _tail(log_path, 30)
        raise LoadgenError(f"the LoadGen driver {how} without finishing the run"
                           f"{' (eof on its event pipe)' if eof else ''}; last lines of {log_path}:\n{from_log}",
                           stats=last_progress)
    return done.get("stats", {})


def _tail(path: Path, n: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as exc:
        return f"<{exc}>"
