"""Process-wide setup for a run, done explicitly (importing perfdag changes no global state).

`setup()` runs when luigi first asks a stage whether it is complete or runs one (idempotent):
perfdag's log handler, luigi's INFO lines to the run's luigi.log, perfdag errors shown as messages instead of tracebacks, Ctrl-C as one
line, server leases released at the end, and the exit code of the run's verdict.

Servers and leases: a run that measures holds a lease on its servers (tasks/launch_servers.py).
FullRun and Sweep release theirs at the end; servers nobody else holds and nobody asked to keep
(--keep-servers) are stopped then. Whatever a run still holds when it exits is released too: a run
that failed or was interrupted stops the servers it was the last user of; so does a run that
succeeded, unless its root task (the one named on the command line) asked --keep-servers or is
one of KEEPS_SERVERS (LaunchServers alone: bringing servers up is what it was asked to do), or was
not completed by this process (luigid handed it to another worker, which still needs them).

Exit codes (beyond luigi's own: 30 a stage failed, 40 bad parameters, ...): see EXIT_CODES.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading

from harness.cache import runs as runlog
from harness.errors import PerfdagError
from harness.serving.registry import ServerRegistry
from tasks.settings import artifacts_root

EXIT_INVALID = 10       # a performance run was INVALID
EXIT_ACCURACY = 11      # accuracy FAILed
EXIT_BOTH = 12          # both
EXIT_REGRESSION = 13    # Nightly found a regression
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM
EXIT_CODES = {EXIT_INVALID: "a performance run was INVALID", EXIT_ACCURACY: "accuracy FAILed",
              EXIT_BOTH: "a performance run was INVALID and accuracy FAILed",
              EXIT_REGRESSION: "Nightly found a regression", EXIT_INTERRUPTED: "interrupted"}

_state = {"setup": False, "failed": False, "interrupted": False, "filter": False, "released": False,
          "root": None, "root_id": None, "root_done": False, "keep": False}
KEEPS_SERVERS = ("LaunchServers",)  # run directly, these leave their servers up for the next run
_verdicts: dict[str, dict] = {}   # top-level results noted in this process
_summaries: list[str] = []        # printed at exit (after luigi's own summary)
log = logging.getLogger("perfdag")


class _PerfdagErrorAsMessage(logging.Filter):
    """luigi logs failures with a traceback; an error perfdag raised on purpose is a message."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RuntimeError) and str(exc).startswith("Unfulfilled dependency at run time"):
            # luigi re-checks requirements before a stage runs: servers that died meanwhile
            exc = PerfdagError(f"{exc}: a stage this one needs is no longer complete (servers that stopped "
                               "answering, or an artifact changed under the run); rerun to rebuild it")
        if isinstance(exc, PerfdagError):
            msg = record.getMessage()
            record.msg = str(exc) if msg.startswith("Uncaught exception") else f"{msg}\n{exc}"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


def rerun_hint() -> str:
    """'rerun `<this invocation's command line>`', as a user would type it again; 'rerun the same command'
    when perfdag was not started from luigi's or perfdag's command line."""
    import shlex

    argv = list(sys.argv)
    first = argv[0].replace(os.sep, "/") if argv else ""
    if first.endswith("luigi/__main__.py") or os.path.basename(first) == "luigi":
        return f"rerun `{shlex.join(['luigi', *argv[1:]])}`"
    if first.endswith("pipeline/__main__.py"):
        return f"rerun `{shlex.join(['python', '-m', 'pipeline', *argv[1:]])}`"
    return "rerun the same command"


def errors_as_messages() -> None:
    if _state["filter"]:
        return
    _state["filter"] = True
    luigi_log = logging.getLogger("luigi-interface")
    luigi_log.addFilter(_PerfdagErrorAsMessage())
    for h in luigi_log.handlers:
        h.addFilter(_PerfdagErrorAsMessage())


def setup(verbose: bool = False, root=None) -> None:
    """Installs the run's handlers once per process (the first caller's `verbose` decides). The first
    caller is the run's root task (luigi asks the root whether it is complete before anything else):
    its name and --keep-servers decide what happens to the run's servers at exit."""
    if _state["setup"]:
        return
    if root is not None:
        _state["root"] = getattr(root, "stage", None) or type(root).__name__
        _state["root_id"] = root.task_id
        _state["keep"] = bool(getattr(root, "keep_servers", False))
    _state["setup"] = True
    import luigi


    errors_as_messages()
    if not (verbose or os.environ.get("PERFDAG_VERBOSE") == "1"):
        _quiet_third_party()
    # Libraries we import may configure the root logger; luigi has its own handler.
    logging.getLogger("luigi-interface").propagate = False
    if not log.handlers:  # stage progress goes to stderr whatever luigi's logging config is
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("perfdag %(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    if not (verbose or os.environ.get("PERFDAG_VERBOSE") == "1"):
        _luigi_info_to_run_log()
    runlog.current_run_id()
    luigi.Task.event_handler(luigi.Event.FAILURE)(_on_failure)
    atexit.register(_at_exit)
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_signal)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_signal)
        previous = sys.excepthook
        sys.excepthook = lambda t, v, tb: _interrupted_exit() if issubclass(t, KeyboardInterrupt) else previous(t, v, tb)


# --- third-party output -----------------------------------------------------------------------
# modelopt and transformers print warnings, progress bars and chatter ("Inserted 56 quantizers")
# that would land right above the run's summary. Unless --verbose (or PERFDAG_VERBOSE=1), they go
# to runs/<run id>/third_party.log instead: Python warnings, transformers' own logger below errors,
# and whatever those packages write to stdout/stderr themselves.
THIRD_PARTY = ("modelopt", "transformers", "torch", "huggingface_hub", "accelerate", "tqdm", "safetensors",
               "tokenizers", "datasets", "warnings")


class _ThirdPartyFilter:
    """Wraps sys.stdout/sys.stderr: a write whose caller is a third-party module goes to the log file."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        frame = sys._getframe(1)
        module = frame.f_globals.get("__name__", "") if frame else ""
        if module.split(".")[0] in THIRD_PARTY:
            _third_party_log(text)
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


_third_party = {"file": None, "said": False}


def _third_party_log(text: str) -> None:
    if _third_party["file"] is None:
        try:
            path = runlog.run_file(artifacts_root()).parent / "third_party.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            _third_party["file"] = open(path, "a", buffering=1)
        except OSError:
            _third_party["file"] = False  # a read-only root: dropped
        if _third_party["file"] and not _third_party["said"]:
            _third_party["said"] = True
            log.info("third-party warnings and output go to %s (--verbose shows them)", path)
    if _third_party["file"]:
        _third_party["file"].write(text)


class _ToThirdPartyLog(logging.Handler):
    def emit(self, record):
        _third_party_log(self.format(record) + "\n")


def _quiet_third_party() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers is imported
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.captureWarnings(True)
    warn_log = logging.getLogger("py.warnings")
    warn_log.handlers[:] = [_ToThirdPartyLog()]
    warn_log.propagate = False
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _ThirdPartyFilter):
            setattr(sys, name, _ThirdPartyFilter(stream))


def _luigi_info_to_run_log() -> None:
    """luigi's INFO lines (scheduling, workers, its execution summary: ~60 a run) go to
    runs/<run id>/luigi.log; the terminal keeps luigi's warnings and errors and perfdag's own lines."""

    luigi_log = logging.getLogger("luigi-interface")
    terminal = [h for h in luigi_log.handlers if type(h) is logging.StreamHandler]
    if not terminal:
        return
    try:
        path = runlog.run_file(artifacts_root()).parent / "luigi.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(path)
    except OSError:  # a read-only root: luigi keeps the terminal
        return
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s: %(message)s"))
    luigi_log.addHandler(to_file)
    for h in terminal:
        h.setLevel(max(h.level, logging.WARNING))
    log.info("luigi's log: %s (--verbose shows it here)", path)


# --- servers ----------------------------------------------------------------------------------

def release_servers(keys16: list[str] | None = None, *, keep: bool, why: str, grace_s: float = 30.0,
                    quiet: bool = False) -> list[int]:
    """Drops this run's leases (all it holds, or on `keys16`) through the server registry, which stops
    servers nobody else holds unless `keep`. Returns pids stopped."""
    registry = ServerRegistry(artifacts_root())
    stopped = registry.release_run(runlog.current_run_id(), keys16, keep=keep, grace_s=grace_s,
                                   log=(lambda line: None) if quiet else log.info)
    if stopped and not quiet:
        log.info("stopped servers (%s): pids %s", why, ", ".join(map(str, stopped)))
    return stopped


# --- verdicts and the exit code -----------------------------------------------------------------

def note_result(task_id: str, *, valid: bool = True, accuracy: bool = True, regression: bool = False,
                summary: str | None = None, persist: bool = True) -> None:
    """A top-level result: its summary is printed at exit, its verdict decides the exit code."""

    verdict = {"valid": bool(valid), "accuracy": bool(accuracy), "regression": bool(regression)}
    first = task_id not in _verdicts
    _verdicts[task_id] = verdict
    if summary and first:
        _summaries.append(summary)
    if persist:
        runlog.record_verdict(artifacts_root(), task_id, verdict)


def exit_code(verdicts: list[dict]) -> int:
    if any(v.get("regression") for v in verdicts):
        return EXIT_REGRESSION
    invalid = any(not v.get("valid", True) for v in verdicts)
    failed = any(not v.get("accuracy", True) for v in verdicts)
    return EXIT_BOTH if invalid and failed else EXIT_INVALID if invalid else EXIT_ACCURACY if failed else 0


def _all_verdicts() -> list[dict]:
    doc = runlog.read(artifacts_root()) or {}
    merged = {**(doc.get("verdicts") or {}), **_verdicts}  # worker processes note theirs in run.json
    return list(merged.values())


# --- handlers ------------------------------------------------------------------------------------

def note_done(task_id: str) -> None:
    """A task is complete in this process; when it is the root, the run's servers may go at exit.
    (Under luigid a worker can run out of work before the root is done: another worker may be about
    to measure on the servers this one launched, so that worker leaves them up.)"""
    if task_id == _state["root_id"]:
        _state["root_done"] = True


def _on_failure(task, exception):
    _state["failed"] = True


def _release_at_exit() -> None:
    if _state["released"]:
        return
    _state["released"] = True
    try:
        if _state["failed"] or _state["interrupted"]:
            release_servers(keep=False, why="the run failed" if _state["failed"] else "interrupted",
                            grace_s=30.0 if _state["failed"] else 1.5)
        elif _state["root"] in KEEPS_SERVERS or not _state["root_done"]:
            _release_leases_only()
        else:
            release_servers(keep=_state["keep"], why=f"{_state['root'] or 'the run'} done; --keep-servers keeps them")
    except Exception as e:  # never turn a finished run into a traceback at exit
        log.warning("releasing servers at exit failed: %s", e)


def _release_leases_only() -> None:
    """A LaunchServers run leaves its servers up (the next run reuses them)."""


    registry = ServerRegistry(artifacts_root())
    run_id = runlog.current_run_id()
    for key16 in registry.leased_by(run_id):
        registry.release(key16, run_id)


def _at_exit() -> None:
    _release_at_exit()
    for text in _summaries:
        print(text, flush=True)
    if _state["failed"] or _state["interrupted"]:
        return
    code = exit_code(_all_verdicts())
    if code:
        print(f"perfdag: exit {code}: {EXIT_CODES[code]}", file=sys.stderr, flush=True)
        for h in logging.getLogger().handlers + log.handlers:
            h.flush()
        os._exit(code)  # luigi has already chosen 0; a script must see the verdict


def _on_signal(signum, frame):
    _state["interrupted"] = True
    raise KeyboardInterrupt


def _interrupted_exit() -> None:
    """Ctrl-C: stop what this run was the last user of, say so in one line, no traceback."""
    _state["interrupted"] = True
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the clean-up short
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:
            break
    stopped = []
    try:
        # Bounded: a server busy with requests would wait up to its exit timeout (10 s) on SIGTERM,
        # and the run's requests are discarded anyway.
        stopped = release_servers(keep=False, why="interrupted", grace_s=1.5, quiet=True)
        _state["released"] = True
    except Exception:
        pass
    what = f"; stopped server pids {', '.join(map(str, stopped))}" if stopped else ""
    print(f"perfdag: interrupted{what}", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)
