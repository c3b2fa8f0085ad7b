"""Nightly: a dated sweep compared with the newest earlier night; a regression exits non-zero.

The date enters only the measuring stages' keys (RunLoadgen, CheckAccuracy and what builds on
them), so every night measures afresh while models, engines and repos are reused. Each point is
judged by its scenario's metrics (harness/reports/nightly.py); --repeats N measures it N times, and a
metric changes only where the nights' repeats differ by more than their noise (harness/stats/noise.py:
3 repeats a night at least; fewer are not judged, a searched point excepted: its probes are evidence).
Backfill: luigi --module pipeline RangeDailyBase --of Nightly --start 2026-11-01 --stop 2026-11-08
(with [Nightly] sweep=... in luigi.cfg or --Nightly-sweep).
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path

import luigi

from harness.cache.store import ArtifactStore
from harness.config import ParamsError
from harness.errors import PerfdagError, shorten
from harness.reports import nightly
from harness.reports.compare import flat
from harness.reports.sweep import POINT_STAGES, point_id
from pipeline.sweep import Sweep
from tasks.lifecycle import errors_as_messages, note_result, setup
from tasks.settings import artifacts_root, signing_key

log = logging.getLogger("perfdag")


class NightDate(luigi.DateParameter):
    """--date YYYY-MM-DD; a bad value is one line naming the format, not strptime's traceback."""

    def parse(self, s):
        try:
            return super().parse(s)
        except ValueError:
            raise self._bad(s) from None

    @staticmethod
    def _bad(s) -> ParamsError:
        errors_as_messages()  # luigi logs what it cannot parse with a traceback
        return ParamsError([f"--date: {shorten(s, 40)} is not a date; give YYYY-MM-DD, e.g. --date $(date +%F)"])


class Nightly(luigi.Task):
    date = NightDate()
    sweep = luigi.Parameter(description="sweep file measured every night")
    overrides = luigi.Parameter(default="", description="applied to every point after the sweep's values")
    max_drop = luigi.FloatParameter(default=0.05, description="the least drop that counts: Offline tokens/s, "
                                    "Server/Interactive goodput, a searched point's max VALID load")
    max_latency_rise = luigi.FloatParameter(default=0.10, description="Server/Interactive: the least TTFT/TPOT p99 "
                                                                         "rise that counts (SingleStream: p90 latency)")
    repeats = luigi.IntParameter(default=1, description="measure each point N times; a change counts only where "
                                                        "the nights' repeats differ beyond their noise (needs 3)")
    site = luigi.Parameter(default="", description="a directory: the results site (python -m pipeline site) "
                                                   "rebuilt from the root at the end of the night")
    endpoint = luigi.BoolParameter(default=False, description="measure the running servers the sweep's points name "
                                   "(openai.endpoints, dataset.tokenizer): Bench points, no model stages")
    no_accuracy = luigi.BoolParameter(default=False, description="measure each point's performance only "
                                      "(PerformanceRun points, or searches a PerformanceRun confirms)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        try:  # the sweep (and its name, which names a directory) is checked before anything runs
            self.night_dir(self.date.isoformat())
        except ParamsError:
            errors_as_messages()
            raise

    def repeat(self, i: int) -> Sweep:
        """Repeat i's sweep; the repeat enters the measuring stages' keys (the first keeps the date alone)."""
        day = self.date.isoformat()
        return Sweep(sweep=self.sweep, overrides=self.overrides, nightly_date=nightly.repeat_date(day, i + 1),
                     endpoint=self.endpoint, no_accuracy=self.no_accuracy)

    def requires(self):
        return self.repeat(0)  # the others run one after another from run(): a sweep stops its servers
                               # when done, which must not happen under another repeat's measurement

    def night_dir(self, date_iso: str):
        return artifacts_root() / "Nightly" / self.requires().definition_name() / date_iso

    def output(self):
        return luigi.LocalTarget(str(self.night_dir(self.date.isoformat()) / "nightly.json"))

    def previous_night(self):
        earlier = sorted(d for d in self.night_dir("x").parent.glob("*")
                         if d.name < self.date.isoformat() and (d / "nightly.json").is_file())
        return json.loads((earlier[-1] / "nightly.json").read_text()) if earlier else None

    def run(self):
        setup(root=self)
        sweeps = [self.requires()]
        for i in range(1, max(1, self.repeats)):
            yield self.repeat(i)  # luigi runs it (a dynamic dependency), then resumes here
            sweeps.append(self.repeat(i))
        rows, varied = [], []
        for i, sweep_task in enumerate(sweeps):
            sweep = json.loads((sweep_task.artifact_dir / "sweep.json").read_text())
            rows += [{**r, "repeat": i + 1} for r in sweep["rows"]]
            varied = sweep["varied"]
        prev = self.previous_night()
        params = self.point_params(rows, varied)
        floors = {"tokens_per_s": self.max_drop, "ttft_p99_ms": self.max_latency_rise,
                  "tpot_p99_ms": self.max_latency_rise, "latency_p90_ms": self.max_latency_rise,
                  "goodput_samples_per_s": self.max_drop, "max_load": self.max_drop}
        points = nightly.compare(rows, prev["rows"] if prev else [], varied, floors)
        regressions = [{"point": p["point"], "reasons": p["reasons"]} for p in points if p["reasons"]]
        doc = {"date": self.date.isoformat(), "sweep": self.sweep, "compared_with": prev["date"] if prev else None,
               "repeats": max(1, self.repeats), "floors": floors, "max_drop": self.max_drop,
               "regressions": regressions, "relaunches": sum(p.get("relaunches") or 0 for p in points),
               "points": points, "rows": rows, "varied": varied, "params": params,
               "param_changes": nightly.param_changes(params, (prev or {}).get("params") or {})}
        out = self.night_dir(self.date.isoformat())
        out.mkdir(parents=True, exist_ok=True)
        (out / "nightly.md").write_text(nightly.render_markdown(doc))
        with self.output().open("w") as f:
            json.dump(doc, f, indent=2)
        self._note(doc)
        if self.site:
            self.refresh_site()

    def refresh_site(self) -> None:
        """The results site rebuilt with tonight in it; a site that cannot be written is logged, not the
        night's failure (its nightly.json and verdict stand)."""
        from harness.site.write import build  # plotly: only a night that builds the site imports it

        try:
            build(ArtifactStore(artifacts_root(), signing_key=signing_key()), Path(self.site),
                  generated=f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
            log.info("results site refreshed: %s", Path(self.site) / "index.html")
        except (PerfdagError, OSError) as e:
            log.error("results site not refreshed (%s): %s", self.site, e)

    @staticmethod
    def point_params(rows: list[dict], varied: list[str]) -> dict[str, dict]:
        """Each point's resolved parameters (flattened, from its FullRun's manifest): what the next night
        compares to say which changed."""
        out = {}
        for r in rows:
            pid = point_id(r, varied)
            if pid in out or not r.get("fullrun_key"):
                continue
            try:  # a Bench's (--endpoint) or PerformanceRun's (--no-accuracy) point is keyed as a FullRun's is
                stage = next((s for s in POINT_STAGES if (artifacts_root() / s / r["fullrun_key"]).is_dir()), "FullRun")
                m = json.loads((artifacts_root() / stage / r["fullrun_key"] / "manifest.json").read_text())
            except (OSError, json.JSONDecodeError):
                continue
            out[pid] = flat(m.get("resolved_params") or {})
        return out

    def complete(self) -> bool:
        setup(root=self)
        done = super().complete()
        if done:
            self._note(json.loads(Path(self.output().path).read_text()), quiet=True)
        return done

    def _note(self, doc: dict, quiet: bool = False) -> None:
        """A regression is the night's verdict: recorded, then the exit code (13) says it."""
        regressions = doc.get("regressions") or []
        if regressions and not quiet:
            lines = "\n".join(f"  - {json.dumps(r['point'])}: {'; '.join(r['reasons'])}" for r in regressions)
            log.error("%d regression(s) on %s vs %s:\n%s", len(regressions), doc["date"],
                      doc["compared_with"] or "nothing (first night)", lines)
        md = self.night_dir(doc["date"]) / "nightly.md"
        verdict = f"{len(regressions)} regression(s)" if regressions else "no regressions"
        if doc.get("relaunches"):  # also among the regressions' reasons (harness/reports/nightly.py)
            verdict += f", {doc['relaunches']} server relaunch(es) after a crash"
        summary = (f"\nperfdag Nightly {doc['date']} vs {doc['compared_with'] or 'nothing (first night)'}: "
                   f"{verdict}\n  report     {md}\n")
        note_result(self.task_id, regression=bool(regressions), summary=summary, persist=not quiet)

