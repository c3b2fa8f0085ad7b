"""Nightly: a dated sweep compared with the newest earlier night; a regression exits non-zero.

The date enters only the measuring stages' keys (RunLoadgen, CheckAccuracy and what builds on
them), so every night measures afresh while models, engines and repos are reused.
Backfill: luigi --module pipeline RangeDailyBase --of Nightly --start 2026-11-01 --stop 2026-11-08
(with [Nightly] sweep=... in luigi.cfg or --Nightly-sweep).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import luigi

from harness.sweep import compare_nights
from harness.config import ParamsError
from harness.errors import shorten
from tasks.lifecycle import errors_as_messages, note_result, setup
from tasks.settings import artifacts_root

from .sweep import Sweep


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
    max_drop = luigi.FloatParameter(default=0.05, description="tokens/s drop that counts as a regression")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        try:  # the sweep (and its name, which names a directory) is checked before anything runs
            self.night_dir(self.date.isoformat())
        except ParamsError:
            errors_as_messages()
            raise

    def requires(self):
        return Sweep(sweep=self.sweep, overrides=self.overrides, nightly_date=self.date.isoformat())

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
        sweep = json.loads((self.requires().artifact_dir / "sweep.json").read_text())
        prev = self.previous_night()
        regressions = compare_nights(sweep["rows"], prev["rows"] if prev else [], sweep["varied"], self.max_drop)
        doc = {"date": self.date.isoformat(), "sweep": self.sweep, "compared_with": prev["date"] if prev else None,
               "max_drop": self.max_drop, "regressions": regressions, "rows": sweep["rows"], "varied": sweep["varied"]}
        out = self.night_dir(self.date.isoformat())
        out.mkdir(parents=True, exist_ok=True)
        (out / "nightly.md").write_text(_markdown(doc))
        with self.output().open("w") as f:
            json.dump(doc, f, indent=2)
        self._note(doc)

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
            log.error("%d regression(s) on %s vs %s:\n%s", len(regressions), doc["date"], doc["compared_with"], lines)
        note_result(self.task_id, regression=bool(regressions), persist=not quiet)


def _markdown(doc: dict) -> str:
    lines = [f"# nightly {doc['date']}", "", f"compared with: {doc['compared_with'] or 'nothing (first night)'}",
             f"max tokens/s drop: {doc['max_drop']:.0%}", ""]
    if doc["regressions"]:
        lines += ["## Regressions", ""] + [f"- `{json.dumps(r['point'])}`: {'; '.join(r['reasons'])}" for r in doc["regressions"]]
    else:
        lines.append("No regressions.")
    cols = [*doc["varied"], "tokens_per_s", "samples_per_s", "tpot_p99_ms", "valid", "accuracy_passed"]
    lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c)) for c in cols) + " |" for r in doc["rows"]]
    return "\n".join(lines) + "\n"
