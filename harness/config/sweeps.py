"""Sweep files (no luigi): a base params file, overrides common to every point, and a grid (every
combination) and/or a list of points, each a mapping of dotted keys to values. Tables and plots of a
sweep's results are harness/reports/sweep.py."""
from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.config.resolve import parse_scalar
from harness.errors import InputError
from harness.untrusted import yamlio


class SweepError(InputError):
    pass


class SweepFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Names a directory (Nightly/<name>/): a plain name, never a path.
    name: str = Field("", pattern=r"^(|[A-Za-z0-9][A-Za-z0-9_.-]{0,99})$")
    base: str = "params/default.yaml"
    overrides: str = ""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    points: list[dict[str, Any]] = Field(default_factory=list)
    # Each point is a search (FindMaxLoad under the point's search.* settings) instead of one FullRun:
    # the table then names the point with the highest confirmed load.
    search: bool = False

    @field_validator("grid")
    @classmethod
    def _no_empty_axis(cls, grid):  # a field check, so it is listed with the file's other problems
        empty = [k for k, v in grid.items() if not v]
        if empty:
            raise ValueError(f"empty list of values for {', '.join(empty)}; give at least one value each")
        return grid

    @model_validator(mode="after")
    def _has_points(self):
        if not self.grid and not self.points:
            raise ValueError("a sweep needs a grid: and/or points:")
        return self


def load_sweep(path: str | Path) -> tuple[SweepFile, Path]:
    """The validated sweep and its base params file resolved relative to the sweep file (its points
    are checked by `duplicate_points` and by resolving each)."""
    path = Path(path)
    if not path.exists():
        raise SweepError(f"--sweep: {path} not found")


    try:
        doc = yamlio.load_file(path, "--sweep: sweep file")  # a FIFO, a device or a huge file: refused by name
        sweep = SweepFile.model_validate(doc or {})
    except InputError as e:
        raise SweepError(str(e)) from None
    except ValidationError as e:  # every problem, one line each
        raise SweepError(f"sweep file {path}:", [
            f"{'.'.join(map(str, x['loc'])) or '<document>'}: {x['msg'].removeprefix('Value error, ')}"
            for x in e.errors()]) from None
    base = Path(sweep.base)
    if not base.is_absolute() and not base.exists():
        base = Path(os.path.normpath(path.parent / base))
    return sweep, base


def parse_grid(text: str) -> dict[str, list[Any]]:
    """`--grid` as a sweep's grid: axes 'section.key=v1,v2,...' separated by ';' or spaces, each value
    read as YAML (so 10 is a number and true a boolean, as in a file)."""
    grid: dict[str, list[Any]] = {}
    problems = []
    for item in (x for x in re.split(r"[;\s]+", text.strip()) if x):
        key, sep, values = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", key) or not values.strip(","):
            problems.append(f"--grid: {item!r} is not section.key=v1,v2,... (e.g. loadgen.server_target_qps=10,20,40)")
            continue
        if key in grid:
            problems.append(f"--grid: {key} is given twice; list all its values once")
            continue
        try:
            grid[key] = [parse_scalar(v.strip()) for v in values.split(",") if v.strip()]
        except InputError as e:
            problems.append(f"--grid: {key}: {e}")
    if problems:
        raise SweepError("", problems)
    if not grid:
        raise SweepError("--grid: no axis given; e.g. --grid loadgen.server_target_qps=10,20,40")
    return grid


def _value(v: Any) -> str:
    """A value as --overrides spells it (YAML flow style, so lists keep their commas; a string that
    would read back as something else, such as '10:00' or '1e3', quoted)."""

    return yamlio.dumps(v, default_flow_style=True).strip().removesuffix("...").strip()


def points(sweep: SweepFile) -> list[dict[str, Any]]:
    keys = list(sweep.grid)
    grid = [dict(zip(keys, combo)) for combo in itertools.product(*sweep.grid.values())] if keys else []
    return grid + [dict(p) for p in sweep.points]


def point_names(sweep: SweepFile) -> list[str]:
    """How a message names each point: its place in the grid or in points:."""
    n = len(points(sweep)) - len(sweep.points)
    return [f"grid point {i + 1}" for i in range(n)] + [f"points[{i}]" for i in range(len(sweep.points))]


def duplicate_points(sweep: SweepFile) -> list[str]:
    """Points that set the same values (each would measure the same thing twice), both named."""
    seen: dict[str, str] = {}
    out = []
    for name, p in zip(point_names(sweep), points(sweep)):
        canon = json.dumps(p, sort_keys=True, default=str)
        if canon in seen:
            out.append(f"{name} is the same point as {seen[canon]} ({_short(canon)}); remove one")
        else:
            seen[canon] = name
    return out


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def point_overrides(sweep: SweepFile, point: dict[str, Any], extra: str = "") -> str:
    """The sweep's common overrides, then the point's values, then `extra` (later wins)."""
    parts = [sweep.overrides] if sweep.overrides else []
    parts += [f"{k}={_value(v)}" for k, v in point.items()]
    parts += [extra] if extra else []
    return ",".join(parts)
