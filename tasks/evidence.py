"""What a failed build leaves for people to read: its files (and the servers' log tails) moved to
runs/<run id>/failed/<Stage>-<key16>/, named in the error and recorded in run.json."""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cache import runs as runlog

if TYPE_CHECKING:  # an annotation: the stage base calls this module
    from tasks.base import StageTask

log = logging.getLogger("perfdag")


def keep_attempt(task: "StageTask", out_dir: Path, suffix: str = "") -> Path | None:
    """Moves a failed attempt's files (and server log tails) to runs/<id>/failed/<Stage>-<key16><suffix>/."""
    dest = runlog.run_file(task.store.root).parent / "failed" / f"{task.stage}-{task.key[:16]}{suffix}"
    try:
        if dest.exists():  # a retry in the same run: the newest failure is the one to read
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(out_dir, dest)  # same filesystem (under the artifacts root): one rename
        out_dir.mkdir()  # the store removes its temp dir as usual
    except OSError as e:
        log.warning("%s: could not keep the failed build's files (%s): %s", task.stage, out_dir, e)
        return None
    try:
        task.evidence(dest)
    except Exception as e:  # evidence is a courtesy; the stage's own error is the news
        log.warning("%s: could not add server logs to %s: %s", task.stage, dest, e)
    return dest


def keep_failed(task: "StageTask", out_dir: Path, exc: BaseException) -> None:
    """A failed build's directory (logs, partial LoadGen logs) moves to runs/<id>/failed/<Stage>-<key16>/
    instead of being deleted; the error names it (never empty) and run.json records the failure."""
    kept = keep_attempt(task, out_dir)
    said = str(exc).strip()
    text = said or "(no message)"
    if kept is not None:
        text = text.replace(str(out_dir), str(kept))
        if str(kept) not in text:
            text += f"\n(logs and partial outputs kept in {kept})"
    if type(exc).__str__ is BaseException.__str__:  # the message is its args: reword it in place
        exc.args = (text,)
    else:  # e.g. OSError formats its own message: add ours beneath it
        exc.add_note(text.removeprefix(said).strip())
    runlog.record_failure(task.store.root, task.stage, task.key, f"{type(exc).__name__}: {text}",
                          str(kept) if kept else None)
