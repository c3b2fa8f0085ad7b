"""Frontier: the latency-throughput frontier of one or more engines, as a Sweep over concurrency.

Each point is a streamed closed-loop FullRun (LoadGen Offline with `harness.max_in_flight` users,
`harness.stream=true`, Offline sized by `auto`), so TTFT and TPOT are the client's. `--engines`
adds build axes (`build.max_batch_size=8,32`): every engine is built once, whatever its number of
levels, and its levels run one after another on its servers. The table, plot and Pareto front are
harness/reports/frontier.py.

SessionsFrontier is the same over the users of an agentic replay (`--sessions`): one RunSessions per
`sessions.users` level, the window's tokens/s against 1000 / TPOT p50 of the window's turns.

With `no_accuracy` (`frontier --no-accuracy`) each level is a PerformanceRun: the same report, no
accuracy run (RunAccuracy's key covers harness.max_in_flight, so a FullRun level runs one per level).

With `endpoint` (`frontier --url`) the levels are of one running server: Bench points (RunSessions
for --sessions) against openai.endpoints, no model stage, no accuracy run; `--engines` has nothing to
build there and is refused.
"""
from __future__ import annotations

import itertools
from functools import cached_property
from pathlib import Path

import luigi

from harness.backends import backend_for
from harness.config import ParamsError
from harness.config.sweeps import SweepError, SweepFile, duplicate_points, parse_grid, point_overrides
from harness.reports.frontier import front_note, levels, parse_levels, text_table, write_frontier
from harness.reports.frontier import frontier_rows as make_rows
from harness.reports.frontier import session_row
from pipeline.sweep import Sweep, endpoint_problems, point_problems
from tasks import RunSessions
from tasks.base import load_params
from tasks.lifecycle import note_result

#: What makes a point a frontier point; --overrides come after and win.
FRONTIER_OVERRIDES = "loadgen.scenario=Offline,harness.stream=true,loadgen.offline_expected_qps=auto"


class Frontier(Sweep):
    stage = "Frontier"
    level_key = "harness.max_in_flight"  # what a level sets
    point_settings = FRONTIER_OVERRIDES  # what makes a point a frontier point
    levels = luigi.Parameter(default="", description="concurrency levels, e.g. '1,2,4,8' (default: 1..32 up to "
                             "--max-level, doubling beyond, and 1.1x it)")
    max_level = luigi.IntParameter(default=0, description="the declared maximum concurrency (default: the "
                                   "params' harness.max_in_flight, else build.max_batch_size)")
    engines = luigi.Parameter(default="", description="engine axes, as --grid: 'build.max_batch_size=8,32'")
    gpus = luigi.IntParameter(default=-1, description="GPUs serving, for tokens/s per GPU (default: "
                              "what the backend's servers use, runtime.num_gpus on GPUs; 0 on CPU: per system)")

    @cached_property
    def _loaded(self):
        base = Path(self.params_file)
        try:
            engines = parse_grid(self.engines) if self.engines else {}
            if engines and self.endpoint:
                raise SweepError("", ["--engines with --url: a running server's engine is not perfdag's to build; "
                                      "run one frontier per server (its levels are of that server)"])
            bad = [k for k in engines if not k.startswith(("build.", "quantize.", "model.", "runtime."))]
            if bad:
                raise SweepError("", [f"--engines: {k} is not an engine parameter (build.*, quantize.*, model.*, "
                                      f"runtime.*); the frontier varies {self.level_key} itself" for k in bad])
            sweep = SweepFile(name=self.sweep_name(), base=str(base), overrides=self.point_settings,
                              points=self.frontier_points(engines))
        except (SweepError, ValueError) as e:
            raise ParamsError(getattr(e, "problems", None) or [str(e)]) from None
        problems = duplicate_points(sweep) + point_problems(sweep, base, self.overrides)
        if self.endpoint and not problems:  # a replay sends recorded text: it needs no tokenizer
            problems = endpoint_problems(sweep, base, self.overrides, tokenizer=self.level_key != "sessions.users")
        if problems:
            raise ParamsError(problems)
        return sweep, base

    def frontier_points(self, engines: dict) -> list[dict]:
        """Each engine's levels, one after another (its servers serve them all)."""
        return [{**dict(zip(engines, combo)), self.level_key: c}
                for combo in itertools.product(*engines.values()) for c in self.level_list()]

    def sweep_name(self) -> str:
        return f"frontier-{Path(self.params_file).stem}"

    def level_list(self) -> list[int]:
        if self.levels:
            return parse_levels(self.levels)
        return levels(self.max_level or self.declared_max(load_params(self.params_file, self.overrides)))

    def declared_max(self, p) -> int:
        """The default top level: what the params say the engine holds at once."""
        return p.harness.max_in_flight or p.build.max_batch_size

    @property
    def engine_keys(self) -> list[str]:
        return [k for k in self.definition.points[0] if k != self.level_key]

    @property
    def gpu_count(self) -> int:
        if self.gpus >= 0:
            return self.gpus
        p = load_params(self.params_file, self.overrides)
        return backend_for(p).launch.gpus(p)

    def key_inputs(self):
        return {**super().key_inputs(), "gpus": self.gpu_count}

    def code(self):
        return (*super().code(), "harness.reports.frontier")

    def build(self, out_dir: Path) -> dict:
        import json

        done = super().build(out_dir)
        rows = make_rows(json.loads((out_dir / "sweep.json").read_text())["rows"], self.engine_keys, self.gpu_count,
                         self.level_key)
        files = write_frontier(out_dir, self.definition_name(), self.engine_keys, self.gpu_count, rows)
        return {**done, "frontier": files}

    def _note(self) -> None:
        import json

        rows = json.loads((self.artifact_dir / "frontier.json").read_text())["rows"]
        summary = (f"\nperfdag {self.stage} {self.definition_name()}: {len(rows)} point(s), "
                   f"{len({r['engine'] for r in rows})} engine(s)\n{text_table(rows, self.gpu_count)}\n"
                   f"  ({front_note(rows).replace('`', '')})\n"
                   f"  report     {self.artifact_dir / 'frontier.md'}\n")
        note_result(self.task_id, valid=True, accuracy=True, summary=summary, persist=False)


class SessionsFrontier(Frontier):
    """The frontier over users of an agentic replay: a RunSessions per `sessions.users` level (an
    engine's servers launched once and shared by its levels), drawn as Frontier draws concurrency."""
    stage = "SessionsFrontier"
    level_key = "sessions.users"
    point_settings = ""

    @cached_property
    def _loaded(self):
        if self.repeat != 1:
            raise ParamsError(["--repeat with --sessions: a replay's levels are measured once each for now; "
                               "run the sessions frontier again to see its spread"])
        sweep, base = super()._loaded
        p = load_params(str(base), self.overrides)
        if p.slurm is not None and p.slurm.array:
            raise ParamsError(["slurm.array: a sessions frontier runs its levels as steps of one serving "
                               "allocation; set slurm.array=false"])
        return sweep, base

    def sweep_name(self) -> str:
        return f"sessions-frontier-{Path(self.params_file).stem}"

    def declared_max(self, p) -> int:
        return p.sessions.users

    @property
    def point_task(self):
        return RunSessions  # a replay has no accuracy run: --no-accuracy changes nothing here

    def upstream(self):
        return {f"point{i:03d}": self.clone(self.point_task, params_file=str(self.base),
                                             overrides=point_overrides(self.definition, p, self.overrides))
                for i, p in enumerate(self.points)}

    def build(self, out_dir: Path) -> dict:
        import json

        replays = [session_row(point, json.loads((t.artifact_dir / "result.json").read_text()), t.key)
                   for t, point in zip(self.upstream().values(), self.points)]
        rows = make_rows(replays, self.engine_keys, self.gpu_count, self.level_key)
        files = write_frontier(out_dir, self.definition_name(), self.engine_keys, self.gpu_count, rows)
        return {"points": len(rows), "frontier": files}
