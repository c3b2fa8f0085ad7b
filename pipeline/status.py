"""`python -m pipeline status`: every stage's key, cached or missing, and why (like `dvc status`).

States: `cached` (reusable), `missing` (with which key inputs differ from the newest cached
artifact of that stage: params, tools, upstream keys, perfdag's code, what a tool is handed),
`missing` also when published but an upstream whose files it uses at run time is gone (`upstream
BuildEngine 1b0d...: missing`),
`corrupt` (published, but its files, or those it was made from, are not what was published, or its
manifest's signature does not hold),
`stopped` (servers perfdag stopped on purpose; the next run relaunches them), `stale` (servers
that died or stopped answering; the next run relaunches them).
"""
from __future__ import annotations

from typing import Any

from tasks.base import STAGES, StageTask
from tasks.settings import looking_only


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: doc}


SECTIONS = ("params", "tools", "upstream", "code", "executed")


def _why(task: StageTask) -> list[dict]:
    """What differs from the newest cached artifact of the same stage."""
    cached = task.store.manifests(task.stage)
    if not cached:
        return [{"field": "*", "reason": "no cached artifact of this stage"}]
    newest = cached[0]
    diffs = []
    for section in SECTIONS:
        now, then = task.key_doc.get(section) or {}, newest.get(section) or {}
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
    return diffs or [{"field": "*", "reason": f"same inputs as {newest.get('key', '?')[:16]} but schema or key differ"}]


def _full_run_stages(params_file: str, overrides: str) -> set[str]:
    """The stages a FullRun of these params builds (RunTest06 is built only by a Submission)."""
    from .full_run import FullRun

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


def print_status(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="perfdag status")
    for col in ("stage", "key", "status", "why"):
        table.add_column(col)
    for r in rows:
        why = ""
        for c in r.get("changed", []):
            why += (f"{c['field']}: {c['cached']!r} -> {c['now']!r}\n" if "cached" in c else f"{c['reason']}\n")
        style = {"cached": "green", "stale": "red", "corrupt": "red", "stopped": "cyan"}.get(r["status"], "yellow")
        table.add_row(r["stage"], r["key"], f"[{style}]{r['status']}[/]", why.rstrip())
    Console().print(table)
