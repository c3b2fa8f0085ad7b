"""Observations seen from a stage (harness/cache/observations.py is the store's side): which observation
this run makes of an observing stage's key, whether the published one is it, and where it lies.

Under --rerun-from (or FullRun --repeat, which reruns from RunLoadgen) a stage must be made anew in
this run. For a build that means "published by this run"; for an observation, "this repeat's": the
run id for the first, `<run id>.<i>` for repeat i, so that repeat 2 is measured although repeat 1
was published by the same run, and repeat 1 stays done once repeat 2 has archived it.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.cache import observations
from harness.cache import runs as runlog
from tasks import trust

if TYPE_CHECKING:
    from tasks.base import StageTask


def rerun_stage(task: "StageTask") -> str:
    """The stage rebuilt from in this run: --rerun-from's, else, for a repeat, the measurement."""
    return task.rerun_from or ("RunLoadgen" if task.repeat_index else "")


def task_id_suffix(task: "StageTask") -> str:
    """What tells luigi a rerun (and each repeat of an observation) from a plain reuse of the key."""
    if not task.must_rerun:
        return ""
    return f"_rerun-{rerun_stage(task)}" + (f"_repeat-{task.repeat_index}" if task.observes and task.repeat_index else "")


def wanted(task: "StageTask") -> str:
    """The observation id this run makes of `task`'s key under must_rerun."""
    run_id = runlog.current_run_id()
    return f"{run_id}.{task.repeat_index}" if task.repeat_index > 1 else run_id


def made_in_this_run(task: "StageTask", manifest: dict) -> bool:
    """Under must_rerun: whether `manifest` is what this run was asked to make."""
    if task.observes:
        return observations.id_of(manifest) == wanted(task)
    return manifest.get("run_id") == runlog.current_run_id()


def observation_dir(task: "StageTask") -> Path | None:
    """Where `task`'s observation lies: a repeat's own, latest or archived by a later repeat (None: not
    made yet); any other task's is the latest, its artifact directory."""
    if not (task.observes and task.must_rerun and task.repeat_index):
        return task.artifact_dir
    return next((o["dir"] for o in task.store.observations(task.stage, task.key) if o["id"] == wanted(task)), None)


def fields(task: "StageTask") -> dict:
    """An observing stage's manifest fields: its observation's id (this run's next one of the key, or the
    one a rerun asks for), and the observations it was made from ({"<Stage>/<key16>": id} of its
    observing lineage)."""
    if not task.observes:
        return {}
    latest = task.manifest()
    taken = set(observations.archived_ids(task.store.root, task.stage, task.key))
    if latest is not None:
        taken.add(observations.id_of(latest))
    made_of = {ident: observations.id_of(um) for ident, (up, um) in trust.lineage(task).items() if up.observes}
    obs = wanted(task) if task.must_rerun else observations.new_id(runlog.current_run_id(), taken)
    return {observations.FIELD: obs, "observed_from": made_of}
