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

import difflib
import json
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
    closest = task.store.closest(task.stage, task.key_doc)  # from the stage's index: one manifest read
    if closest is False:  # the index's pick is not what is published: every manifest, as without an index
        cached = task.store.manifests(task.stage)  # newest first
        closest = min(cached, key=lambda m: len(_diff(task.key_doc, m))) if cached else None
    if closest is None:
        return [{"field": "*", "reason": "no cached artifact of this stage"}]
    diffs = _diff(task.key_doc, closest)
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
        row = {"stage": name, "key": task.key[:16], "full_key": task.key, "path": str(task.artifact_dir),
               "code": task.key_doc["code"], "built_by_task": name in in_full_run}
        if m is None:
            row.update(status="missing", changed=_why(task))
            if name not in in_full_run:
                by = "`python -m pipeline submission`" if name.startswith("RunTest") else f"`luigi ... {name}`"
                row["changed"].insert(0, {"field": "*", "reason": f"FullRun does not build it; {by} does"})
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


MAX_LINES, MAX_VALUE, MAX_BLOB_LINES = 3, 60, 6


def _short(v: Any) -> str:
    """A value on one line, cut to MAX_VALUE characters (a config.pbtxt is not a status line)."""
    text = repr(v)
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return v[:16]  # an upstream key: named as artifacts/<Stage>/<key16> names it
    if isinstance(v, str) and "\n" in v:
        text = f"<{v.count(chr(10)) + 1} lines> " + repr(v.split(chr(10), 1)[0])
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 1] + "…"


def _as_lines(v: Any) -> list[str] | None:
    """A text blob (a config file) as its lines, an argv (or a list of them, one per server) as one
    argument a line; None for anything else."""
    if isinstance(v, str) and "\n" in v:
        return v.splitlines()
    if isinstance(v, list) and v and all(isinstance(a, list) for a in v):
        return [f"[{i}] {a}" for i, argv in enumerate(v) for a in argv]
    if isinstance(v, list) and len(v) > 3 and all(isinstance(a, (str, int, float)) for a in v):
        return [str(a) for a in v]
    return None


def blob_diff(then: Any, now: Any, renamed: list[tuple[str, str]] = ()) -> list[str] | None:
    """The changed lines of two blobs ('- old' / '+ new', MAX_BLOB_LINES at most); None when they are
    not blobs (then a value is shown whole, cut). A line that differs only by naming an upstream's
    old or new key (`renamed`: (old key16, new key16)) is no change: the upstream line says it."""
    a, b = _as_lines(then), _as_lines(now)
    if a is None or b is None:
        return None
    for old, new in renamed:
        a = [line.replace(old, "<key>") for line in a]
        b = [line.replace(new, "<key>") for line in b]
    changed = [line for line in difflib.ndiff(a, b) if line[:2] in ("- ", "+ ")]
    more = len(changed) - MAX_BLOB_LINES
    return changed[:MAX_BLOB_LINES] + ([f"… {more} more changed lines (status --full)"] if more > 0 else [])


def why_lines(changed: list[dict], full: bool = False, header: bool = True) -> list[str]:
    """At most MAX_LINES changes per stage (all with `full`), the rest pointed at --full / --json; a
    changed text blob or argv as its changed lines."""
    lines = []
    against = next((c["compared_with"] for c in changed if c.get("compared_with")), None)
    for c in changed:
        if "cached" not in c:
            lines.append(c["reason"])
        elif full:
            lines.append(f"{c['field']}: {c['cached']!r} -> {c['now']!r}")
        elif (diff := blob_diff(c["cached"], c["now"], c.get("renamed", ()))) is not None:
            lines.append(f"{c['field']}:" + "".join(f"\n  {d}" for d in diff))
        else:
            lines.append(f"{c['field']}: {_short(c['cached'])} -> {_short(c['now'])}")
    if not full and len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"… {len(lines) - MAX_LINES} more (status --full, or --json)"]
    if against and changed and "cached" in changed[0] and header:
        lines.insert(0, f"vs closest cached {against}:")
    return lines


def explained(rows: list[dict]) -> list[dict]:
    """The rows a reader needs, in stage order: only the stages the task builds, and each change named
    once, at the first stage it enters; a stage that rebuilds only because an upstream does says so in
    one line ("rebuilds: upstream BuildEngine changes")."""
    by_key = {r.get("full_key"): r["stage"] for r in rows}
    order = {r["stage"]: i for i, r in enumerate(rows)}
    named: set[str] = set()
    out = []
    for r in rows:
        if not r.get("built_by_task", True):
            continue
        changed = r.get("changed", [])
        if r["status"] != "missing" or not any("cached" in c for c in changed):
            out.append(r)
            continue
        ups = list(dict.fromkeys(by_key.get(c["now"], c["field"].split(".", 1)[1]) for c in changed
                                 if c["field"].startswith("upstream.") and "cached" in c))
        ups.sort(key=lambda s: order.get(s, len(order)))
        own = [c for c in changed if not c["field"].startswith("upstream.") and c["field"] not in named]
        named.update(c["field"] for c in changed)
        lead = [{"field": "*", "reason": f"rebuilds: upstream {', '.join(ups)} change{'s' if len(ups) == 1 else ''}"}] \
            if ups else []
        if ups:  # what it renders anew, beyond naming its upstream's new key (a repository's path)
            renamed = [(c["cached"][:16], c["now"][:16]) for c in changed
                       if c["field"].startswith("upstream.") and "cached" in c]
            own = [{**c, "renamed": renamed} for c in own if c["field"].startswith("code.") or (
                c["field"].startswith("executed.") and _unkeyed(c["cached"], renamed) != _unkeyed(c["now"], renamed))]
        out.append({**r, "changed": lead + own})
    return out


def _unkeyed(v: Any, renamed: list[tuple[str, str]]) -> Any:
    """`v` with its upstreams' key16s, old and new, as `<key>`: what differs beyond an upstream's name."""
    text = json.dumps(v, sort_keys=True)
    for old, new in renamed:
        text = text.replace(old, "<key>").replace(new, "<key>")
    return text


def print_status(rows: list[dict], full: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False)
    shown = rows if full else explained(rows)
    width = max(len(r["stage"]) for r in shown)
    console.print(f"perfdag status: {len(shown)} stages ({sum(r['status'] == 'cached' for r in shown)} cached)")
    for r in shown:
        style = {"cached": "green", "stale": "red", "corrupt": "red", "stopped": "cyan"}.get(r["status"], "yellow")
        changed = r.get("changed", [])
        against = next((c["compared_with"] for c in changed if c.get("compared_with") and "cached" in c), None)
        head = f"{r['stage']:<{width}}  {r['key']}  "
        lines = why_lines(changed, full, header=False)
        if len(lines) == 1 and not any("cached" in c for c in changed):  # one reason: on the stage's line
            said = lines[0] if lines[0].startswith("rebuilds:") else f"{r['status']}: {lines[0]}"
            if len(head + said) <= console.width:
                console.print(head + f"[{style}]{escape(said)}[/]")
                continue
        console.print(head + f"[{style}]{r['status']}[/]" + (f"  vs cached {against}" if against else ""))
        for line in lines:
            for part in line.split("\n"):
                console.print("  " + escape(part), overflow="ellipsis", no_wrap=True)
