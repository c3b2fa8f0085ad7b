"""`python -m pipeline status`: every stage's key, cached or missing, and why (like `dvc status`)."""
from __future__ import annotations

from typing import Any

from tasks.base import STAGES, StageTask


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: doc}


def _why(task: StageTask) -> list[dict]:
    """Keys whose values differ from the newest cached artifact of the same stage."""
    cached = task.store.manifests(task.stage)
    if not cached:
        return [{"field": "*", "reason": "no cached artifact of this stage"}]
    newest = cached[0]
    now = flatten({k: task.key_doc[k] for k in ("params", "tools", "upstream")})
    then = flatten({k: newest.get(k, {}) for k in ("params", "tools", "upstream")})
    diffs = []
    for field in sorted(set(now) | set(then)):
        if now.get(field, "<absent>") != then.get(field, "<absent>"):
            diffs.append({"field": field, "cached": then.get(field, "<absent>"), "now": now.get(field, "<absent>")})
    return diffs or [{"field": "*", "reason": f"same inputs as {newest.get('key', '?')[:16]} but schema or key differ"}]


def stage_status(params_file: str, overrides: str) -> list[dict]:
    rows = []
    for name, cls in STAGES.items():
        task = cls(params_file=params_file, overrides=overrides)
        m = task.manifest()
        status = "missing" if m is None else "cached" if task.usable(m) else "stale"
        row = {"stage": name, "key": task.key[:16], "status": status, "path": str(task.artifact_dir)}
        if status == "missing":
            row["changed"] = _why(task)
        elif status == "stale":
            row["changed"] = [{"field": "*", "reason": "published but no longer usable (e.g. its servers are down); the next run rebuilds it"}]
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
        style = {"cached": "green", "stale": "red"}.get(r["status"], "yellow")
        table.add_row(r["stage"], r["key"], f"[{style}]{r['status']}[/]", why.rstrip())
    Console().print(table)
