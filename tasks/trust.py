"""Trust in what a stage reuses, beside tasks/base.py: what an artifact's content rests on, what changed
under it, and where a corrupt one goes.

Lineage: a measurement rests on its servers, their repository and the engine they serve; a score on
its accuracy log and through it on the same engine. Each manifest records the content digest of
every artifact in its lineage (`made_from`), so an engine rebuilt with other bytes makes what was
measured on the old one stale, even once the repository has been refilled and looks consistent.

A published artifact whose own files are not what was published is moved to
runs/<id>/corrupt/<Stage>-<key16>/ (evidence: the tampered bytes and `corrupt.txt`; run.json lists
it; gc ages it out after --keep-days), so it is rebuilt instead of reused, and not deleted.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cache import runs as runlog

if TYPE_CHECKING:
    from tasks.base import StageTask

log = logging.getLogger("perfdag")
_WARNED: set[tuple] = set()


def lineage(task: "StageTask") -> dict[str, tuple["StageTask", dict]]:
    """{"<Stage>/<key16>": (task, manifest)} of the published artifacts `task`'s content rests on: its
    upstreams, and theirs wherever one uses its upstream's files at run time."""
    out: dict[str, tuple[StageTask, dict]] = {}
    for up in task.upstream().values():
        um = up.manifest()
        if um is None:  # gone: missing_upstream decides whether that matters
            continue
        out[f"{up.stage}/{up.key[:16]}"] = (up, um)
        if not up.stands_alone(um):
            out.update(lineage(up))
    return out


def made_from(task: "StageTask") -> dict[str, dict]:
    """What a build records of its lineage: each artifact's content digest and publish time."""
    return {ident: {"content_digest": um.get("content_digest"), "finished_at": um.get("finished_at")}
            for ident, (_, um) in lineage(task).items()}


def lineage_problems(task: "StageTask", manifest: dict) -> list[str]:
    """An artifact of `task`'s lineage that now holds other content than it was made from (none for a
    manifest published before lineages were recorded)."""
    then_all = manifest.get("made_from")
    if not isinstance(then_all, dict):
        return []
    out = []
    for ident, (up, um) in lineage(task).items():
        then = then_all.get(ident)
        if isinstance(then, dict) and um.get("content_digest") != then.get("content_digest"):
            out.append(other_content(up, um, task, then.get("finished_at")))
    return out


def move_aside(task: "StageTask", manifest: dict, problems: list[str]) -> Path | None:
    """Under the key's lock: moves `task`'s corrupt artifact aside (see the module's docstring) and says
    so. None when it was rebuilt meanwhile, or is not kept (`moves_aside` False: runtime state, or a
    manifest that points at a checkpoint outside the root)."""
    if not task.moves_aside:
        return None
    dest = runlog.run_file(task.store.root).parent / "corrupt" / f"{task.stage}-{task.key[:16]}"
    try:
        where = task.store.move_aside(task.stage, task.key, dest, manifest.get("finished_at"))
    except OSError as e:  # e.g. runs/ on another filesystem: the build replaces it as before
        log.warning("%s %s: could not move the corrupt artifact aside: %s", task.stage, task.key[:16], e)
        return None
    if where is None:
        return None
    try:  # why, beside the evidence (and it dates the directory: gc ages it out from now)
        (where / "corrupt.txt").write_text("\n".join(problems) + "\n")
    except OSError:
        pass
    runlog.record_corrupt(task.store.root, task.stage, task.key, problems, str(where))
    log.warning("%s %s: not what was published, moved aside to %s; it will be rebuilt:\n  %s",
                task.stage, task.key[:16], where, "\n  ".join(problems))
    return where


def warn_once(task: "StageTask", problems: list[str],
              what: str = "not reusing the published artifact, it will be rebuilt") -> None:
    seen = (task.stage, task.key, tuple(problems))  # once per reason: a new one is news
    if seen in _WARNED:
        return
    _WARNED.add(seen)
    log.warning("%s %s: %s:\n  %s", task.stage, task.key[:16], what, "\n  ".join(problems))


def other_content(up: "StageTask", um: dict, task: "StageTask", built_then: str | None) -> str:
    """An upstream's manifest now names other content than `task` was made from. "Rebuilt" only when it
    was: its publish time moved since (recorded by perfdag since upstream_built exists)."""
    ours = f"{task.stage} {task.key[:16]}"
    if built_then and um.get("finished_at") != built_then:
        return f"{up.stage} {up.key[:16]} was rebuilt with other content after {ours} was made from it"
    if built_then:
        return (f"{up.stage} {up.key[:16]}: its manifest names other content than {ours} was made from, "
                "though it was not rebuilt (its manifest was edited)")
    return f"{up.stage} {up.key[:16]} holds other content than when {ours} was made from it"
