"""Sweep: one FullRun per point of a sweep file; shared stages are shared artifacts.

Points that share a stage's inputs share its key, so a sweep over build/runtime/loadgen keys
quantizes once; points that share a Triton repo reuse its live servers (FullRuns inside a
sweep keep their servers, and the sweep stops what it launched when it is done).

With `endpoint` each point is a Bench of the running servers its parameters name (openai.endpoints:
no model stages, no accuracy run, nothing launched or stopped), or a FindMaxLoad of them.
"""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import luigi

from harness.config import ParamsError
from harness.config.sweeps import (
    SweepError,
    SweepFile,
    duplicate_points,
    load_sweep,
    parse_grid,
    point_names,
    point_overrides,
    points,
)
from harness.reports.nightly import repeat_of
from harness.reports.spread import aggregate
from harness.reports.sweep import fmt, lookup, row, search_row, text_table, write_results
from pipeline.performance_run import PerformanceRun, measurement
from pipeline.search import FindMaxLoad
from pipeline.sweep_array import fans_out, run_array
from tasks import LaunchServers, lifecycle
from tasks.base import StageTask, load_params
from tasks.external_servers import check_endpoint_params
from tasks.lifecycle import note_result, release_servers


def _problems_by_point(sweep, base, overrides: str, check) -> list[str]:
    """`check(params_file, overrides)` on every point at once (not the first point's alone), each
    problem it raises named once with the points that have it."""
    found: dict[str, list[str]] = {}
    for name, point in zip(point_names(sweep), points(sweep)):
        try:
            check(str(base), point_overrides(sweep, point, overrides))
        except ParamsError as e:
            for problem in e.problems or [str(e)]:
                found.setdefault(problem, []).append(name)
    return [f"{p} ({', '.join(names[:3])}{' and others' if len(names) > 3 else ''})" for p, names in found.items()]


def point_problems(sweep, base, overrides: str) -> list[str]:
    """Every point's parameter problems."""
    return _problems_by_point(sweep, base, overrides, load_params)


def endpoint_problems(sweep, base, overrides: str, tokenizer: bool = True) -> list[str]:
    """Where the points measure running servers (`endpoint`): what each point's parameters lack for it
    (openai.endpoints, build.backend=openai, dataset.tokenizer where the point tokenizes), and Slurm
    arrays, whose tasks run a point's FullRun (model stages and all)."""
    def check(params_file: str, point: str) -> None:
        p = load_params(params_file, point)
        check_endpoint_params(p, tokenizer=tokenizer)
        if p.slurm is not None and p.slurm.array:
            raise ParamsError(["slurm.array with a running server (--url): each array task runs a point's FullRun, "
                               "which builds the model stages; set slurm.array=false"])
    return _problems_by_point(sweep, base, overrides, check)


def _searchable(params_file: str, overrides: str) -> None:
    task = FindMaxLoad(params_file=params_file, overrides=overrides)  # raises what the search refuses
    if task.params.slurm is not None and task.params.slurm.array:
        raise ParamsError(["search: true with slurm.array: each array task runs one FullRun, and a search's "
                           "probes run one after another; set slurm.array=false (the searches then share "
                           "their engines' serving allocations)"])


def search_problems(sweep, base, overrides: str) -> list[str]:
    """Where each point is a search: what FindMaxLoad refuses for a point (an Offline point without an
    SLO, say), and Slurm arrays, whose tasks run one FullRun each."""
    return _problems_by_point(sweep, base, overrides, _searchable)


class Sweep(StageTask):  # not in STAGES: it takes a sweep file, not one params document
    stage = "Sweep"  # --overrides apply to every point, after the sweep's own values
    sweep = luigi.Parameter(default="", description="sweep file, e.g. params/sweeps/batch.yaml")
    grid = luigi.Parameter(default="", description="axes without a file: 'loadgen.server_target_qps=10,20,40' "
                           "(several separated by ';'), on --params-file; with --sweep, added to its grid")
    keep_servers = luigi.BoolParameter(default=False, significant=False)
    search = luigi.BoolParameter(default=False, description="each point is a search for its highest VALID load "
                                 "(as the sweep file's search: true)")
    repeat = luigi.IntParameter(default=1, description="measure every point N times (FullRun --repeat): the table "
                                "and plots give each number as the median [interval] of its repeats")
    converge = luigi.FloatParameter(default=0.0, description="with --repeat: a point stops repeating once its "
                                    "judged median is known within +-this share at 95 percent")
    # Significant: it changes every point's upstream; clone() hands it to FindMaxLoad and RunSessions points.
    endpoint = luigi.BoolParameter(default=False, description="measure the running servers each point's "
                                   "openai.endpoints name (Bench points: no model stages, no accuracy run)")
    no_accuracy = luigi.BoolParameter(default=False, description="measure each point's performance only "
                                      "(PerformanceRun points, or searches a PerformanceRun confirms: no "
                                      "RunAccuracy, no CheckAccuracy)")

    @cached_property
    def _loaded(self):
        try:
            if not self.sweep and not self.grid:
                raise SweepError("Sweep: give --sweep FILE or --grid 'section.key=v1,v2,...'")
            if self.sweep:
                sweep, base = load_sweep(self.sweep)
            else:
                sweep, base = SweepFile(base=self.params_file, grid=parse_grid(self.grid)), Path(self.params_file)
            if self.sweep and self.grid:
                sweep = sweep.model_copy(update={"grid": {**sweep.grid, **parse_grid(self.grid)}})
            if self.search:
                sweep = sweep.model_copy(update={"search": True})
        except SweepError as e:
            raise ParamsError(e.problems or [str(e)]) from None
        problems = duplicate_points(sweep) + point_problems(sweep, base, self.overrides) + self.repeat_problems(base)
        if self.endpoint and not problems:
            problems = endpoint_problems(sweep, base, self.overrides)
        if sweep.search and not problems:
            problems = search_problems(sweep, base, self.overrides)
        if problems:
            raise ParamsError(problems)
        return sweep, base

    def repeat_problems(self, base) -> list[str]:
        """--repeat's own: its range, and Slurm arrays (each array task runs one point in a run of its own)."""
        if self.repeat == 1:
            return []
        if not 1 <= self.repeat <= 1000:
            return [f"--repeat: {self.repeat}; give 1 to 1000 measurements of each point"]
        p = load_params(str(base), self.overrides)
        if p.slurm is not None and p.slurm.array:
            return ["--repeat with slurm.array: each array task measures one point in a run of its own; set "
                    "slurm.array=false"]
        return []

    @property
    def definition(self):
        return self._loaded[0]

    @property
    def base(self):
        return self._loaded[1]

    @property
    def points(self):
        return points(self.definition)

    def definition_name(self) -> str:
        """Names Nightly/<name>/: the sweep's name, else its file's stem; never a path."""
        import re

        name = self.definition.name or (Path(self.sweep).stem if self.sweep else "grid")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name) or ".." in name:
            raise ParamsError([f"sweep name {name!r} cannot name a directory; set name: to letters, digits, "
                               "'_', '.', '-' in the sweep file"])
        return name

    def key_inputs(self):
        repeats = {"repeat": self.repeat, "converge": self.converge} if self.repeat != 1 else {}
        perf_only = {"no_accuracy": True} if self.point_task is PerformanceRun else {}
        return {"sweep": self.definition.model_dump(mode="json"), **repeats, **perf_only}

    @property
    def point_task(self) -> type[StageTask]:
        """What one point is: a search, a running server's Bench, a PerformanceRun or a FullRun."""
        if self.definition.search:
            return FindMaxLoad
        return measurement(self.endpoint, self.no_accuracy)

    def code(self):
        # the tables and plots, the verdict in its rows, the spread of a point's repeats
        return ("harness.reports.sweep", "harness.reports.spread", "harness.loadgen.verdict", "harness.stats.noise")

    def upstream(self):
        n, rep = len(self.points), repeat_of(self.nightly_date)
        night = f" (night {self.nightly_date.partition('.')[0]}, repeat {rep})" if rep else ""
        return {f"point{i:03d}": self.clone(self.point_task, params_file=str(self.base),
                                             overrides=point_overrides(self.definition, p, self.overrides),
                                             repeat=self.repeat, converge=self.converge,
                                             as_point=True, point_label=f"{i + 1}/{n} " + (
                                                 ", ".join(f"{k}={fmt(v)}" for k, v in p.items()) or "base") + night)
                for i, p in enumerate(self.points)}

    def requires(self):
        return {} if fans_out(self) else self.upstream()  # slurm: the points run as a job array, in run()

    def _note(self) -> None:
        doc = json.loads((self.artifact_dir / "sweep.json").read_text())
        rows = doc["rows"]
        summary = (f"\nperfdag Sweep {self.definition_name()}: {len(rows)} point(s)\n"
                   f"{text_table(doc['varied'], rows)}\n  report     {self.artifact_dir / 'sweep.md'}\n")
        # A sweep's INVALID or accuracy-FAIL points are results, in its table: it exits non-zero only when
        # a point failed to run (luigi's own codes). Under Nightly the points' verdicts keep deciding the
        # night's exit code (10, 11, 12; 13 for a regression), as they always have.
        judged = bool(self.nightly_date)
        note_result(self.task_id, valid=not judged or all(r.get("valid") for r in rows),  # None: no accuracy run
                    accuracy=not judged or all(r.get("accuracy_passed") is not False for r in rows),
                    summary=None if self.nightly_date else summary, persist=False)

    def is_done(self) -> bool:
        done = super().is_done()
        if done:
            self._note()
        return done

    def build(self, out_dir: Path) -> dict:
        rows = []
        varied = list(dict.fromkeys(k for p in self.points for k in p))
        for (name, task), point in zip(self.upstream().items(), self.points):
            doc = task.params.model_dump(mode="json")  # what the point ran with, defaults included
            resolved = {k: lookup(doc, k) for k in varied}
            if self.definition.search:
                search = task.search_doc()
                confirmed = task.confirmed_run(search)
                report = json.loads((confirmed.artifact_dir / "report.json").read_text()) if confirmed else None
                rows.append(search_row(point, search, report, resolved))
                continue
            if task.repeats_them:  # every repeat this run measured, as one row with their spread
                rows.append(aggregate([row(point, r, resolved) for r in task.repeated_reports()]))
                continue
            report = json.loads((task.artifact_dir / "report.json").read_text())
            rows.append(row(point, report, resolved))
        plots = write_results(out_dir, self.definition_name(), varied, rows)
        return {"points": len(rows), "plots": plots}

    def run(self):
        if fans_out(self):

            lifecycle.setup(self.verbose, root=self)
            run_array(self)  # every point's FullRun, one array task each; then the table below
        super().run()
        self._note()
        if self.endpoint:  # not perfdag's servers
            return
        # Its points' servers, whichever worker launched them (under luigid that may be another).
        release_servers([p.clone(LaunchServers).key[:16] for p in self.upstream().values()],
                        keep=self.keep_servers, why="sweep done; --keep-servers keeps them")
