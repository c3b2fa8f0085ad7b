"""runs/.index.jsonl: what gc reads of each run record, so a root of a year of nightlies is not re-parsed every time.

One line per run record (`runs/<id>/run.json`) that parsed as a RunRecord: the record's stat (inode, size, mtime,
ctime), its run directory's stat, and what gc takes from it (run id, when it was updated, the artifacts and
observations it referenced, whether the directory holds a failed stage's or a corrupt artifact's kept files).
gc --delete writes it whole, from every record parsed afresh, under `runs/.index.lock` (a flock, as the stages'
indexes are written); nothing else writes it.

It is untrusted input and only a cache: a bounded read, every line parsed and type-checked (a torn, truncated or
malformed index is not read at all), and a line is taken only while both stats are still the ones it recorded and
the record and its directory are a regular file and directory (no link). A record written, replaced or edited
since (its stat moved), a directory that gained or lost an entry, and a record with no line are parsed as without
the index. A line edited so that its stats still match is the one thing the stats cannot see: gc --delete, which
acts, never reads the index (it parses every record, as before, and then writes the index back).
"""
from __future__ import annotations

import json
import os
import stat
from datetime import datetime
from pathlib import Path

from filelock import FileLock

from harness.errors import InputError
from harness.untrusted.files import read_regular

INDEX = ".index.jsonl"
LOCK = ".index.lock"
#: A line is a few hundred bytes to a few KiB; a root of a million runs stays under this.
MAX_INDEX_BYTES = 4 << 30
_HEADER = {"perfdag_runs_index": 1}


def stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def stamps(run_dir: Path) -> tuple[list[int], list[int]] | None:
    """(the run directory's stat, its run.json's): None unless both are what they seem (a directory and a regular
    file, neither a link), so a line can only ever stand for a plain record inside the root."""
    try:
        d = os.lstat(run_dir)
        f = os.lstat(run_dir / "run.json")
    except OSError:
        return None
    if not stat.S_ISDIR(d.st_mode) or not stat.S_ISREG(f.st_mode):
        return None
    return stamp(d), stamp(f)


def _line_ok(e) -> bool:
    return (isinstance(e, dict) and isinstance(e.get("d"), str) and isinstance(e.get("run_id"), str)
            and isinstance(e.get("updated"), str) and type(e.get("aged")) is bool
            and all(isinstance(e.get(s), list) and len(e[s]) == 4 and all(type(x) is int for x in e[s])
                    for s in ("dstamp", "stamp"))
            and all(isinstance(e.get(s), list) and all(isinstance(x, str) for x in e[s]) for s in ("ids", "obs")))


def read(runs: Path) -> dict[str, dict]:
    """The index's lines by run directory name as written; {} when it is missing, torn or malformed."""
    try:
        data = read_regular(runs / INDEX, "runs index", MAX_INDEX_BYTES, "the run records are parsed instead")
    except (OSError, InputError):
        return {}
    lines = data.split(b"\n")
    if lines[-1] != b"" or not lines[0]:  # a torn last line: a writer killed mid-write
        return {}
    out: dict[str, dict] = {}
    for i, line in enumerate(lines[:-1]):
        try:  # flat lines of exact types only (`_line_ok`): no depth walk needed
            e = json.loads(line)
        except (ValueError, RecursionError):
            return {}
        if i == 0:
            if e != _HEADER:
                return {}
            continue
        if not _line_ok(e):
            return {}
        out[e["d"]] = e
    return out


def lookup(lines: dict[str, dict], name: str, now: tuple[list[int], list[int]] | None) -> dict | None:
    """Run directory `name`'s line, as read_runs gives a record, where its stats `now` are the ones recorded."""
    e = lines.get(name)
    if e is None or now is None or [e["dstamp"], e["stamp"]] != list(now):
        return None
    try:
        updated = datetime.fromisoformat(e["updated"])
    except ValueError:
        return None
    if updated.tzinfo is None:
        return None
    return {"run_id": e["run_id"], "updated": updated, "ids": set(e["ids"]), "observations": set(e["obs"]),
            "aged": e["aged"]}


def line(name: str, run: dict, now: tuple[list[int], list[int]], aged: bool) -> dict:
    return {"d": name, "dstamp": now[0], "stamp": now[1], "run_id": run["run_id"],
            "updated": run["updated"].isoformat(), "ids": sorted(run["ids"]), "obs": sorted(run["observations"]),
            "aged": aged}


def write(runs: Path, lines: list[dict]) -> None:
    """The whole index, replaced by one rename under its flock (best effort: an index not written is only slower)."""
    try:
        with FileLock(str(runs / LOCK)):
            tmp = runs / f"{INDEX}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(json.dumps(_HEADER) + "\n")
                for e in sorted(lines, key=lambda e: e["d"]):
                    f.write(json.dumps(e, separators=(",", ":")) + "\n")
            os.replace(tmp, runs / INDEX)
    except OSError:
        pass
