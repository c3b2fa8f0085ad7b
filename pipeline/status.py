"""`python -m pipeline status`: every stage's key, cached or missing, and why (like `dvc status`).

States: `cached` (reusable), `missing` (with which key inputs differ from the cached artifact of
that stage whose inputs are closest, i.e. fewest differing fields: params, tools, upstream keys,
perfdag's code, what a tool is handed; a few lines per stage, all with --full or --json),
`missing` also when published but an upstream whose files it uses at run time is gone (`upstream
BuildEngine 1b0d...: missing`),
`corrupt` (published, but its files, or those it was made from, are not what was published, or its
manifest's signature does not hold),
`stopped` (servers perfdag stopped on purpose; the next run relaunches them), `stale` (servers
that died or stopped answering; the next run relaunches them).
"""
from __future__ import annotations

from typing import Any

from pipeline.full_run import FullRun
from tasks.base import StageTask
from tasks.registry import STAGES
from tasks.settings import looking_only


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: doc}


SECTIONS = ("params", "tools", "upstream", "code", "executed")


def _diff(key_doc: dict, manifest: dict) -> list[dict]:
    """The key inputs that differ between what is asked for and one published artifact."""
    diffs = []
    for section in SECTIONS:
        now, then = key_doc.get(section) or {}, manifest.get(section) or {}
        if section == "code":  # one line per module: 'code: harness/mlperf/accuracy.py changed'
            for mod in sorted(set(now) | set(then)):
                if now.get(mod) != then.get(mod):
                    what = "added" if mod not in then else "removed" if mod not in now else "changed"
                    diffs.append({"field": f"code.{mod}", "reason": f"code: {mod} {what}"})
            continue
        fnow, fthen = flatten({section: now}), flatten({section: then})
        for field in sorted(set(fnow) | set(fthen)):
            if fnow.get(field, "<absent>") != fthen.get(field, "<absent>"):
                diffs.append({"field": field, "cached": fthen.get(field, "<absent>"), "now": fnow.get(field, "<absent>")})
    return diffs


def _why(task: StageTask) -> list[dict]:
    """What differs from the cached artifact of the same stage whose inputs are closest to these
    (fewest differing fields; the newest among equals): the change the user made, not every way
    the newest artifact happens to differ."""
    cached = task.store.manifests(task.stage)  # newest first
    if not cached:
        return [{"field": "*", "reason": "no cached artifact of this stage"}]
    candidates = [(len(d), i, d, m) for i, m in enumerate(cached) for d in [_diff(task.key_doc, m)]]
    _, _, diffs, closest = min(candidates, key=lambda c: c[:2])
    key16 = str(closest.get("key", "?"))[:16]
    if not diffs:
        return [{"field": "*", "reason": f"same inputs as {key16} but schema or key differ", "compared_with": key16}]
    return [{**d, "compared_with": key16} for d in diffs]
def _full_run_stages(params_file: str, overrides: str) -> set[str]:
    """The stages a FullRun of these params builds (RunTest06 is built only by a Submission)."""

    seen, todo = set(), [FullRun(params_file=params_file, overrides=overrides)]
    while todo:
        t = todo.pop()
        if t.stage not in seen:
            seen.add(t.stage)
            todo.extend(t.upstream().values())
    return seen


def stage_status(params_file: str, overrides: str, verify: bool = False) -> list[dict]:
    """One row per stage. Writes nothing under the root: status only looks."""
    with looking_only():
        return _rows(params_file, overrides, verify)


def _rows(params_file: str, overrides: str, verify: bool) -> list[dict]:
    rows = []
    in_full_run = _full_run_stages(params_file, overrides)
    for name, cls in STAGES.items():
        task = cls(params_file=params_file, overrides=overrides, verify=verify)
        m = task.manifest()
        row = {"stage": name, "key": task.key[:16], "path": str(task.artifact_dir), "code": task.key_doc["code"]}
        if m is None:
            row.update(status="missing", changed=_why(task))
            if name not in in_full_run:
                row["changed"].insert(0, {"field": "*", "reason": "FullRun does not build it; "
                                          "`python -m pipeline submission` does"})
        elif gone := task.missing_upstream(m):  # published, but what it uses at run time is not
            row.update(status="missing", changed=[{"field": "*", "reason": g} for g in gone])
        elif problems := task.trust_problems(m):
            row.update(status="corrupt", changed=[{"field": "*", "reason": p} for p in problems])
        elif not task.usable(m):
            stopped = name == "LaunchServers" and not task.registry.records(task.key[:16])
            row.update(status="stopped" if stopped else "stale", changed=[{"field": "*", "reason": (
                "servers stopped by perfdag (FullRun's end or `servers stop`); the next run relaunches them"
                if stopped else "published, but its servers died or stopped answering; the next run relaunches them")}])
        else:
            row["status"] = "cached"
        rows.append(row)
    return rows


MAX_LINES, MAX_VALUE = 3, 60


def _short(v: Any) -> str:
    """A value on one line, cut to MAX_VALUE characters (a config.pbtxt is not a status line)."""
    text = repr(v)
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return v[:16]  # an upstream key: named as artifacts/<Stage>/<key16> names it
    if isinstance(v, str) and "\n" in v:
        text = f"<{v.count(chr(10)) + 1} lines> " + repr(v.split(chr(10), 1)[0])
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 1] + "…"


def why_lines(changed: list[dict], full: bool = False) -> list[str]:
    """At most MAX_LINES per stage (all with `full`), the rest pointed at --full / --json."""
    lines = []
    against = next((c["compared_with"] for c in changed if c.get("compared_with")), None)
    for c in changed:
        if "cached" in c:
            lines.append(f"{c['field']}: {_short(c['cached'])} -> {_short(c['now'])}" if not full
                         else f"{c['field']}: {c['cached']!r} -> {c['now']!r}")
        else:
            lines.append(c["reason"])
    if not full and len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"… {len(lines) - MAX_LINES} more (status --full, or --json)"]
    if against and changed and "cached" in changed[0]:
        lines.insert(0, f"vs closest cached {against}:")
    return lines


def print_status(rows: list[dict], full: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="perfdag status")
    for col in ("stage", "key", "status", "why"):
        table.add_column(col, overflow="fold")
    for r in rows:
        why = "\n".join(why_lines(r.get("changed", []), full))
        style = {"cached": "green", "stale": "red", "corrupt": "red", "stopped": "cyan"}.get(r["status"], "yellow")
        table.add_row(r["stage"], r["key"], f"[{style}]{r['status']}[/]", escape(why))
    Console().print(table)
