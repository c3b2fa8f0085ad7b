"""Sweep definitions and results (no luigi): points from a grid and/or a list, tables and plots.

A sweep file names a base params file, optional overrides common to every point, and a grid
(every combination) and/or a list of points, each a mapping of dotted keys to values.
"""
from __future__ import annotations

import csv
import itertools
import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import InputError


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

    @model_validator(mode="after")
    def _has_points(self):
        if not self.grid and not self.points:
            raise ValueError("a sweep needs a grid: and/or points:")
        for k, v in self.grid.items():
            if not v:
                raise ValueError(f"grid.{k}: empty list of values")
        return self


def load_sweep(path: str | Path) -> tuple[SweepFile, Path]:
    """The validated sweep and its base params file resolved relative to the sweep file."""
    path = Path(path)
    if not path.is_file():
        raise SweepError(f"--sweep: {path} not found")
    from pydantic import ValidationError

    from .config import yamlio
    from .errors import InputError

    try:
        doc = yamlio.load_file(path)
        sweep = SweepFile.model_validate(doc or {})
    except InputError as e:
        raise SweepError(str(e)) from None
    except ValidationError as e:  # one line per field
        lines = "; ".join(f"{'.'.join(map(str, x['loc'])) or '<document>'}: {x['msg']}" for x in e.errors())
        raise SweepError(f"{path}: {lines}") from None
    base = Path(sweep.base)
    if not base.is_absolute() and not base.exists():
        base = Path(os.path.normpath(path.parent / base))
    return sweep, base


def _value(v: Any) -> str:
    """A value as --overrides spells it (YAML flow style, so lists keep their commas)."""
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def points(sweep: SweepFile) -> list[dict[str, Any]]:
    keys = list(sweep.grid)
    grid = [dict(zip(keys, combo)) for combo in itertools.product(*sweep.grid.values())] if keys else []
    return grid + [dict(p) for p in sweep.points]


def point_overrides(sweep: SweepFile, point: dict[str, Any], extra: str = "") -> str:
    """The sweep's common overrides, then the point's values, then `extra` (later wins)."""
    parts = [sweep.overrides] if sweep.overrides else []
    parts += [f"{k}={_value(v)}" for k, v in point.items()]
    parts += [extra] if extra else []
    return ",".join(parts)


def point_id(row: dict[str, Any], varied: list[str]) -> str:
    """Identifies a point across nights by its varied values."""
    return json.dumps({k: row.get(k) for k in varied}, sort_keys=True)


def row(point: dict[str, Any], report: dict, resolved: dict[str, Any] | None = None) -> dict[str, Any]:
    """One point's results. `resolved`: the values its parameters resolved to, so a point that
    leaves a varied parameter at its default shows that default, not None."""
    p, a = report["performance"], report["accuracy"]
    return {**point, **(resolved or {}), "scenario": p["scenario"],
            "tokens_per_s": p["tokens_per_second"], "samples_per_s": p["samples_per_second"],
            "ttft_p99_ms": p["ttft_ms"]["p99"], "tpot_p99_ms": p["tpot_ms"]["p99"], "valid": p["valid"],
            "ttft_limit_ms": p.get("ttft_limit_ms"), "tpot_limit_ms": p.get("tpot_limit_ms"),
            "invalid_reason": p.get("invalid_reason"), "accuracy_passed": a["passed"],
            "fullrun_key": report["stages"]["FullRun"][:16]}


def lookup(doc: dict, dotted: str) -> Any:
    """A dotted key's value in a resolved params document (None where it does not exist)."""
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def pareto_front(rows: list[dict], x: str, y: str) -> list[int]:
    """Indices of rows not dominated: lower x (latency) and higher y (throughput) are better."""
    pts = [(i, r[x], r[y]) for i, r in enumerate(rows) if r.get(x) is not None and r.get(y) is not None]
    front = []
    for i, xi, yi in pts:
        if not any((xj <= xi and yj >= yi) and (xj < xi or yj > yi) for _, xj, yj in pts):
            front.append(i)
    return front


def write_results(out_dir: Path, name: str, varied: list[str], rows: list[dict]) -> list[str]:
    cols = list(dict.fromkeys([*varied, *(k for r in rows for k in r)]))
    with open(out_dir / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    (out_dir / "sweep.json").write_text(json.dumps({"name": name, "varied": varied, "rows": rows}, indent=2))
    fmt = lambda v: "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    md = [f"# sweep {name}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    plots = _plots(out_dir, varied, rows)
    md += [""] + [f"![{Path(p).stem}]({p})" for p in plots]
    (out_dir / "sweep.md").write_text("\n".join(md) + "\n")
    return plots


#: How a point is drawn: valid with accuracy passed, INVALID, accuracy failed.
_STYLE = {"ok": dict(marker="o", color="tab:blue", label="VALID, accuracy PASS"),
          "invalid": dict(marker="x", color="tab:red", label="INVALID"),
          "failed": dict(marker="^", color="tab:orange", label="accuracy FAIL")}


def point_kind(r: dict) -> str:
    return "invalid" if not r.get("valid") else "ok" if r.get("accuracy_passed") else "failed"


def _numeric(xs: list) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)


def _plots(out_dir: Path, varied: list[str], rows: list[dict]) -> list[str]:
    """tokens/s against each varied parameter, one panel per scenario (Offline and Server tokens/s
    measure different things: never one axis), and p99 TPOT against tokens/s for streaming points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    scenarios = list(dict.fromkeys(r.get("scenario") or "?" for r in rows))
    for key in [k for k in varied if k != "loadgen.scenario"]:
        all_x = [r.get(key) for r in rows]
        numeric = _numeric(all_x)
        order = sorted({str(x) for x in all_x}) if not numeric else None
        fig, axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 4), squeeze=False, sharex=True)
        for ax, sc in zip(axes[0], scenarios):
            pts = [r for r in rows if (r.get("scenario") or "?") == sc]
            for kind, style in _STYLE.items():
                sel = [r for r in pts if point_kind(r) == kind and r.get("tokens_per_s") is not None]
                if sel:
                    xs = [r.get(key) if numeric else order.index(str(r.get(key))) for r in sel]
                    ax.scatter(xs, [r["tokens_per_s"] for r in sel], s=60, **style)
            if not numeric:
                ax.set_xticks(range(len(order)), order)
            ax.set_ylim(bottom=0), ax.set_xlabel(key), ax.set_ylabel(f"tokens/s ({sc})")
            ax.set_title(sc), ax.legend(fontsize="small", loc="lower right")
        fig.suptitle(f"tokens/s vs {key}")
        fname = f"tokens_per_s_vs_{key.replace('.', '_')}.png"
        fig.tight_layout(), fig.savefig(out_dir / fname, dpi=100), plt.close(fig)
        files.append(fname)
    streaming = [r for r in rows if r.get("tpot_p99_ms") is not None and r.get("tokens_per_s") is not None]
    if streaming:
        fig, ax = plt.subplots(figsize=(6, 4))
        colors = iter(("tab:blue", "tab:green", "tab:purple", "tab:brown"))
        for sc in dict.fromkeys(r["scenario"] for r in streaming):
            pts = [r for r in streaming if r["scenario"] == sc]
            color = next(colors, "tab:gray")
            for kind, style in _STYLE.items():
                sel = [r for r in pts if point_kind(r) == kind]
                if sel:
                    ax.scatter([r["tpot_p99_ms"] for r in sel], [r["tokens_per_s"] for r in sel], s=60,
                               marker=style["marker"], color=color if kind == "ok" else style["color"],
                               label=f"{sc}: {style['label']}")
            good = [r for r in pts if point_kind(r) == "ok"]  # an INVALID point is not a trade-off on offer
            front = sorted((good[i]["tpot_p99_ms"], good[i]["tokens_per_s"])
                           for i in pareto_front(good, "tpot_p99_ms", "tokens_per_s"))
            if front:
                ax.plot(*zip(*front), "-", color=color, alpha=0.6, label=f"{sc}: Pareto front (valid points)")
        ax.set_xlim(left=0), ax.set_ylim(bottom=0)
        ax.set_xlabel("p99 TPOT (ms)"), ax.set_ylabel("tokens/s"), ax.legend(fontsize="small")
        ax.set_title("throughput vs p99 TPOT (streaming points)")
        fig.tight_layout(), fig.savefig(out_dir / "pareto_tpot.png", dpi=100), plt.close(fig)
        files.append("pareto_tpot.png")
    return files
