"""Process-wide setup for a run, done explicitly (importing perfdag changes no global state).

`setup()` runs when luigi first asks a stage whether it is complete or runs one (idempotent):
perfdag's log handler, perfdag errors shown as messages instead of tracebacks, servers stopped
when a stage fails or the run is interrupted. A run that succeeds keeps what LaunchServers
started (live servers are reused by the next run); a run that fails or is interrupted stops the
servers it launched itself, never older ones.
"""
from __future__ import annotations

import atexit
import json
import logging
import signal
import threading

_state = {"setup": False, "failed": False, "interrupted": False, "filter": False}
log = logging.getLogger("perfdag")


class _PerfdagErrorAsMessage(logging.Filter):
    """luigi logs failures with a traceback; an error perfdag raised on purpose is a message."""

    def filter(self, record: logging.LogRecord) -> bool:
        from harness.errors import PerfdagError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, PerfdagError):
            msg = record.getMessage()
            record.msg = str(exc) if msg.startswith("Uncaught exception") else f"{msg}\n{exc}"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


def errors_as_messages() -> None:
    if _state["filter"]:
        return
    _state["filter"] = True
    luigi_log = logging.getLogger("luigi-interface")
    luigi_log.addFilter(_PerfdagErrorAsMessage())
    for h in luigi_log.handlers:
        h.addFilter(_PerfdagErrorAsMessage())


def setup() -> None:
    """Installs the run's handlers once per process."""
    if _state["setup"]:
        return
    _state["setup"] = True
    import luigi

    from . import runlog

    errors_as_messages()
    # Libraries we import may configure the root logger; luigi has its own handler.
    logging.getLogger("luigi-interface").propagate = False
    if not log.handlers:  # stage progress goes to stderr whatever luigi's logging config is
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("perfdag %(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    runlog.current_run_id()
    luigi.Task.event_handler(luigi.Event.FAILURE)(_on_failure)
    atexit.register(_at_exit)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def servers_launched_this_run() -> list[dict]:
    from . import runlog
    from .settings import artifacts_root

    out = []
    for f in (artifacts_root() / "LaunchServers").glob("*/manifest.json"):
        try:
            m = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if m.get("run_id") == runlog.current_run_id():
            out += m.get("servers", [])
    return out


def stop_servers_launched_this_run(why: str) -> None:
    from harness.serving.launcher import stop_recorded

    stopped = stop_recorded(servers_launched_this_run())
    if stopped:
        log.info("stopped the servers this run started (%s): pids %s", why, ", ".join(map(str, stopped)))


def _on_failure(task, exception):
    _state["failed"] = True


def _at_exit():
    if _state["failed"] or _state["interrupted"]:
        stop_servers_launched_this_run("the run failed" if _state["failed"] else "interrupted")


def _on_sigint(signum, frame):
    _state["interrupted"] = True
    raise KeyboardInterrupt
