"""`python -m pipeline gc`: remove artifacts no recent run referenced; dry run unless --delete.
Over 400 lines because what stays is one closure over runs, leases, locks and manifests, computed in one pass.

What stays:
- every artifact a run referenced (built or reused, as recorded in runs/<id>/run.json) whose
  `updated_at` is within --keep-days, or whose run is still going (its pid is alive);
- every artifact built within --keep-days (its building run referenced it);
- every LaunchServers artifact whose servers are live (ready, or their process still runs);
- every key whose lock is held (a stage is building it), in-progress `.tmp-*` builds included;
- the upstream closure of all of the above, by the manifests' `upstream` keys: a cached FullRun
  is complete without luigi touching its upstream, so a run that only reuses the report would
  otherwise leave the engine behind it unreferenced.
- every kept observation of a measurement (observations/<Stage>/<key16>/<id>/, the earlier executions
  of a measuring stage's key: harness/cache/observations.py) made within --keep-days or read by a run
  within them: observations age like artifacts.
What goes: every other published artifact (Sweep included) and observation, and `.tmp-*` / `.trash-*` dirs whose
key lock is free (a dead builder's leftovers); of killed runs, their servers, the records of dead
servers, the shared memory nobody maps, the LoadGen driver's semaphores, and the private directories of servers
that are gone (outside the root: harness/serving/private.py). Never touched: runs/ (small history, only
reported; a failed stage's kept files, runs/<id>/failed/*, and corrupt artifacts moved aside,
runs/<id>/corrupt/*, age out after --keep-days), Nightly/
(history), lock files, `.backends` (no longer used: servers copy the Python backend from the wheel), `.hashcache`.

Deleting takes the key's lock non-blocking (held: skipped), checks the artifact was not
replaced or referenced by a run since the plan, renames it out of the stage directory (so no
reader ever sees a half-deleted artifact that still has its manifest), releases the lock and
removes the renamed tree.

What the root holds is untrusted input: run and server records are parsed with strict schemas (a
malformed one is reported and acted on in no way), nothing reached through a link out of the root
is listed or deleted, and servers are stopped only when they prove to be perfdag's (their launch
token, harness/serving/processes.py).

One module over 400 lines: planning, deleting and reporting share one Plan, and the argument
that gc never deletes what is in use reads best in one place.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from harness.cache import index, runindex
from harness.cache.observations import OBSERVATIONS, archived_ids
from harness.cache.runs import AGED, RUNS, confined, parse_time, read_runs, run_is_live
from harness.cache.store import MANIFEST, lock_held, lock_path
from harness.gc.leftovers import orphan_servers, orphan_shm
from harness.gc.server_memo import SERVERS_FILE, Memo
from harness.loadgen import semaphores
from harness.serving import private
from harness.serving import launcher
from harness.serving import records as untrusted
from harness.serving.elsewhere import running_elsewhere
from harness.serving.launcher import is_ours
from harness.serving.registry import ServerRegistry
from harness.serving.shm import remove_shm_files
from harness.untrusted import jsonio
from harness.untrusted.records import Unreadable, collected

NIGHTLY, TRASH = "Nightly", ".gc-trash"
_LEFTOVER = re.compile(r"^\.(tmp|trash)-([0-9a-f]{16})-")


@dataclass
class Entry:
    id: str                                  # "<Stage>/<key16>" or "<Stage>/.tmp-<key16>-..."
    stage: str
    key16: str
    path: str
    kind: str                                # "artifact" | "observation" | "leftover" | "failed" (runs/<id>/failed/...)
    size_bytes: int = 0
    key: str | None = None
    finished_at: str | None = None
    run_id: str | None = None                # the run that built it
    last_referenced: str | None = None       # newest updated_at of a run that referenced it
    last_run: str | None = None
    action: str = "delete"                   # "keep" | "delete"
    why: str = ""
    status: str = ""                         # after --delete: deleted | skipped: ... | failed: ...
    upstream: list[str] = field(default_factory=list)
    manifest_stamp: Any = None

    def public(self) -> dict:
        d = asdict(self)
        d.pop("manifest_stamp")
        return d


@dataclass
class Plan:
    root: Path
    keep_days: float
    now: datetime
    cutoff: datetime
    entries: list[Entry]
    runs: dict
    nightly: dict
    skipped: list[dict]
    warnings: list[str]
    run_files: dict[str, int] = field(default_factory=dict)  # run.json -> mtime_ns when planned
    servers: dict = field(default_factory=dict)  # leftovers of killed runs: orphan servers, dead records, shm

    @property
    def goes(self) -> list[Entry]:
        return [e for e in self.entries if e.action == "delete"]

    @property
    def kept(self) -> list[Entry]:
        return [e for e in self.entries if e.action == "keep"]


# --- small helpers ----------------------------------------------------------------------------


def _date(s: str | None) -> str:
    return _date_of(s) if isinstance(s, str) else "never"


@lru_cache(maxsize=1 << 16)  # (a report names the same few thousand run dates on its 100,000 lines)
def _date_of(s: str) -> str:
    t = parse_time(s)
    return t.strftime("%Y-%m-%d") if t else "never"


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError


def dir_size(path: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(path, onerror=lambda e: None):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _days(n: float) -> str:
    return f"{n:g} day" + ("" if n == 1 else "s")



def servers_in_use(records: list[dict]) -> bool:
    """The recorded servers answer ready (harness.serving.launcher.servers_live), or a tritonserver process
    perfdag started for them still runs (same pid and start time), ready or not."""
    if not records:
        return False
    # Each record's process looked up once: when one is ours (or another node's, while its job runs) the answer is
    # yes, ready or not; when none is, servers_live can only hold where every record is external (it asks each
    # record the same, and a record neither ours, nor elsewhere, nor external is down).
    if any(is_ours(r) or running_elsewhere(r) for r in records):
        return True
    return all(r.get("external") for r in records) and launcher.servers_live(records)


def _server_records(root: Path, entry_dir: str, memo: Memo, stamp: dict) -> list[dict]:
    """The artifact's server records, checked (servers.json, else the manifest's copy); [] when malformed. What
    they are read from may come from the memo (harness/gc/server_memo.py); they are checked here either way."""
    ids = memo.identities(entry_dir)
    got = memo.get(entry_dir, ids)
    if got is None:
        doc, name, clean = _server_doc(Path(entry_dir))
        if clean:
            memo.put(entry_dir, ids, doc, name)
    else:
        doc, name = got
    recs = untrusted.servers_of(doc, f"{entry_dir}/{name}", root, stamp) if name is not None else None
    return recs or []


def _server_doc(d: Path) -> tuple[Any, str | None, bool]:
    """(the document `d`'s server records are in, the file of `d` it was read from (None: no records), and whether
    this reading may be memoised: not where a file could not be read, which is reported on every run)."""
    sj, clean = d / SERVERS_FILE, True
    # most old artifacts have no servers.json: one lstat says so before servers_doc resolves both paths
    if os.path.lexists(sj):
        try:
            return untrusted.servers_doc(sj, inside=d), SERVERS_FILE, True
        except FileNotFoundError:
            pass
        except Unreadable:  # (reported)
            clean = False
        if sj.exists():  # there but not read: no records, and not the manifest's either
            return None, None, clean
    servers = _manifest_servers(d)
    return servers, (MANIFEST if servers is not None else None), clean


def _manifest_servers(d: Path):
    """The manifest's copy of its server records (None: none, or unreadable). Only that part is walked for depth
    (jsonio's check, before the strict schema walks it): a manifest lists every file, and walking all of it for
    each LaunchServers artifact was a large part of a large root's gc."""
    try:
        m = json.loads((d / MANIFEST).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    servers = m.get("servers") if isinstance(m, dict) else None
    return None if servers is None or jsonio.too_deep(servers, jsonio.MAX_DEPTH - 1) else servers


def _names(d: Path) -> set[str]:
    try:
        return {e.name for e in os.scandir(d)}
    except OSError:
        return set()


def _manifest_stamp(m: dict) -> tuple:
    return (m.get("key"), m.get("run_id"), m.get("finished_at"))


def _read_manifest(d: Path) -> dict | None:
    try:
        m = jsonio.loads((d / MANIFEST).read_bytes())
    except (OSError, jsonio.NotJson):
        return None
    return m if isinstance(m, dict) else None



# --- the plan ---------------------------------------------------------------------------------
def _indexed(root: Path, stage: str, rel: str, indexes: dict, verify: bool) -> tuple[dict | None, tuple, bool]:
    """(manifest fields gc reads: key, upstream, run_id, finished_at; None: no readable manifest) of directory
    `rel` of `stage`, from the stage's index (harness/cache/index.py) where it lists it, else its manifest;
    and whether the directory's manifest is readable."""
    if stage not in indexes:
        indexes[stage] = index.entries(root, stage, write=verify and (root / stage).is_dir(), verify=verify,
                                       fields=False)  # gc compares no key inputs
    e = indexes[stage].get(rel)
    if e is not None and not e.get("odd"):
        if not e.get("manifest"):
            return None, (), False
        return ({"key": e.get("key"), "upstream": e["upstream"], "run_id": e.get("run_id"),
                 "finished_at": e.get("finished_at"), "size": e.get("size")},
                (e.get("key"), e.get("run_id"), e.get("finished_at")), True)
    man = _read_manifest(index.directory(root, stage, rel))
    if man is None:
        return None, (), False
    ups = [v for v in (man.get("upstream") or {}).values() if isinstance(v, str)] \
        if isinstance(man.get("upstream"), dict) else []
    return ({"key": man.get("key") if isinstance(man.get("key"), str) else None, "upstream": ups,
             "run_id": man.get("run_id"), "finished_at": man.get("finished_at"), "size": None},
            _manifest_stamp(man), True)


def _observation_entries(root: Path, indexes: dict, verify: bool) -> list[Entry]:
    """The kept earlier observations of measuring stages' keys (observations/<Stage>/<key16>/<id>/)."""
    out: list[Entry] = []
    for sdir in _stage_dirs(root / OBSERVATIONS) if confined(root / OBSERVATIONS, root) else []:
        for kdir in sorted(sdir.iterdir()):
            if kdir.is_symlink() or not kdir.is_dir():
                continue
            base = str(kdir)
            for obs in archived_ids(root, sdir.name, kdir.name):
                d = f"{base}/{obs}"  # (os.path.join per item: a large root's cost)
                man, _, _ = _indexed(root, sdir.name, f"obs/{kdir.name}/{obs}", indexes, verify)
                man = man or {}
                out.append(Entry(id=f"{sdir.name}/{kdir.name}/{obs}", stage=sdir.name, key16=kdir.name, path=d,
                                 kind="observation", key=man.get("key"), finished_at=man.get("finished_at"),
                                 run_id=man.get("run_id"), upstream=man.get("upstream") or []))
                out[-1].size_bytes = man.get("size") or 0
    return out


def _stage_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(d for d in root.iterdir()
                  if d.is_dir() and not d.is_symlink() and not d.name.startswith(".") and d.name not in (RUNS, NIGHTLY, OBSERVATIONS))


def plan(root: Path, keep_days: float = 14, now: datetime | None = None, verify: bool = False) -> Plan:
    """What gc would do. The manifests' fields come from the stages' indexes (harness/cache/index.py), checked
    against the root and rebuilt from the manifests when they do not hold. `verify` (a plan that deletes) also
    checks every line against its manifest, and writes back an index it rebuilt; a dry run writes nothing."""
    with collected() as ignored:
        p = _plan(Path(root).resolve(), keep_days, now, verify)
    p.warnings += ignored
    return p


def _plan(root: Path, keep_days: float, now: datetime | None, verify: bool = False) -> Plan:
    now = now or datetime.now(timezone.utc)
    cutoff = now - timedelta(days=keep_days)
    warnings: list[str] = []
    skipped: list[dict] = []

    # What sits in the store.
    entries: list[Entry] = []
    indexes: dict[str, dict] = {}  # stage -> its index's lines (harness/cache/index.py)
    known_size: set[str] = set()   # entries whose size the index recorded (else the tree is walked)
    for sdir in _stage_dirs(root):
        base, stage = str(sdir), sdir.name  # (a Path's name per item: a large root's cost)
        for name in sorted(index.subdirs(sdir)):  # (a stat, and a Path, per name of a stage's directory were a large root's cost)
            d = f"{base}/{name}"
            if name == ".locks":
                continue
            m = _LEFTOVER.match(name)
            if m:
                entries.append(Entry(id=f"{stage}/{name}", stage=stage, key16=m.group(2), path=d,
                                     kind="leftover"))
                continue
            if name.startswith("."):
                continue
            man, stamp, readable = _indexed(root, stage, name, indexes, verify)
            if not readable:
                skipped.append({"id": f"{stage}/{name}", "path": d,
                                "why": "no readable manifest.json: not a published artifact, left alone"})
                continue
            entries.append(Entry(id=f"{stage}/{name}", stage=stage, key16=name, path=d,
                                 kind="artifact", key=man["key"], finished_at=man["finished_at"],
                                 run_id=man["run_id"], upstream=man["upstream"], manifest_stamp=stamp,
                                 size_bytes=man["size"] or 0))
            if man["size"] is not None:
                known_size.add(entries[-1].id)
    obs_entries = _observation_entries(root, indexes, verify)
    known_size.update(e.id for e in obs_entries if e.size_bytes)
    entries += obs_entries
    by_id = {e.id: e for e in entries if e.kind in ("artifact", "observation")}
    by_key = {e.key: e for e in by_id.values() if e.key and e.kind == "artifact"}

    keep: dict[str, str] = {}  # entry id -> why it stays (first reason wins)

    def keep_because(e: Entry, why: str) -> None:
        keep.setdefault(e.id, why)

    # Runs: the last reference of every artifact; recent or live runs keep theirs.
    # (a dry run takes what runs/.index.jsonl still vouches for; a plan that deletes parses every record and writes
    # the index back: harness/cache/runindex.py)
    runs = read_runs(root, warnings, indexed={} if verify else runindex.read(root / RUNS))
    if verify and (root / RUNS).is_dir():
        runindex.write(root / RUNS, [runindex.line(r["name"], r, r["now"], r["aged"]) for r in runs
                                     if r.get("now") is not None])
    live_runs = 0
    for r in sorted(runs, key=lambda r: r["updated"]):
        recent = r["updated"] >= cutoff
        live = not recent and run_is_live(r["run_id"])
        live_runs += live
        updated = r["updated"].isoformat(timespec="seconds")
        for i in r["ids"] | r["observations"]:
            e = by_id.get(i)
            if e is None:
                continue
            e.last_referenced, e.last_run = updated, r["run_id"]
            if recent:
                keep_because(e, f"referenced by run {r['run_id']} on {_date(e.last_referenced)}")
            elif live:
                keep_because(e, f"referenced by run {r['run_id']}, still running")

    for e in by_id.values():
        built = parse_time(e.finished_at)
        if built and built >= cutoff:
            keep_because(e, f"built on {_date(e.finished_at)}, within {_days(keep_days)}")

    # In use: a held lock (a stage building it), live servers. Only what nothing keeps yet is asked (the first
    # reason wins), and only a key with a lock file can have its lock held.
    lock_files: dict[str, set[str]] = {}
    for e in entries:
        if e.id in keep:
            continue
        if e.stage not in lock_files:
            lock_files[e.stage] = _names(root / e.stage / ".locks")
        if f"{e.key16}.lock" in lock_files[e.stage] and lock_held(root, e.stage, e.key16):
            keep_because(e, "lock held: a stage is building this key" + (" (in-progress build)" if e.kind == "leftover" else ""))
    registry = ServerRegistry(root)
    launched = [e for e in by_id.values() if e.stage == "LaunchServers" and e.id not in keep]
    registered = registry.with_entries({e.key16 for e in launched})  # only they have process records or leases
    memo, stamp = Memo(use=not verify), untrusted.stamp_of(root)  # (a plan that deletes reads every manifest)
    for e in launched:
        recs = _server_records(root, e.path, memo, stamp)
        known = e.key16 in registered
        if servers_in_use(recs) or (known and any(is_ours(r) for r in registry.records(e.key16))):
            addrs = ", ".join(f"{r.get('host')}:{r.get('port', r.get('grpc_port'))}" for r in recs)
            keep_because(e, f"live servers ({addrs})")
        elif known and registry.holders(e.key16):
            keep_because(e, "a running run holds its servers")
    memo.save(f"{root}/LaunchServers/")

    # Upstream closure of everything kept.
    todo = [by_id[i] for i in keep if i in by_id]
    while todo:
        e = todo.pop()
        for k in e.upstream:
            u = by_key.get(k)
            if u is not None and u.id not in keep:
                keep[u.id] = f"upstream of kept {e.id}"
                todo.append(u)

    days = _days(keep_days)
    for e in entries:
        if e.id in keep:
            e.action, e.why = "keep", keep[e.id]
        elif e.kind == "leftover":
            e.why = "dead builder's leftover (its lock is free)"
        elif e.last_referenced:
            e.why = f"no run within {days} referenced it (last: run {e.last_run})"
        else:
            e.why = "no run references it" + (f" (built {_date(e.finished_at)})" if e.finished_at else "")
    for e in entries:
        if e.id not in known_size:
            e.size_bytes = dir_size(Path(e.path)) if e.action == "delete" or e.kind == "artifact" else 0
        elif e.kind == "observation" and e.action != "delete":
            e.size_bytes = 0  # as without the index: a kept observation is not counted

    # Leftovers of an interrupted gc.
    trash = root / TRASH
    if trash.is_symlink() or (trash.exists() and not trash.is_dir()):
        warnings.append(f"{trash} is a link or not a directory: gc lists nothing in it and deletes nothing "
                        "until it is removed")
    elif trash.is_dir():
        for d in sorted(trash.iterdir()):
            entries.append(Entry(id=f"{TRASH}/{d.name}", stage=TRASH, key16="", path=str(d), kind="leftover",
                                 size_bytes=dir_size(d) if d.is_dir() else 0, why="leftover of an interrupted gc"))

    # A failed stage's kept files (runs/<id>/failed/<Stage>-<key16>/) and corrupt artifacts moved aside
    # (runs/<id>/corrupt/...) age out like artifacts do.
    for d in _aged(root, runs):
        try:
            mtime = datetime.fromtimestamp(d.stat().st_mtime, timezone.utc)
        except OSError:
            continue
        what = "a failed stage's files" if d.parent.name == "failed" else "a corrupt artifact moved aside"
        if d.is_dir() and confined(d, root) and mtime < cutoff and not run_is_live(d.parent.parent.name):
            entries.append(Entry(id=str(d.relative_to(root)), stage=RUNS, key16="", path=str(d), kind="failed",
                                 size_bytes=dir_size(d), why=f"{what}, kept since {mtime:%Y-%m-%d}"))

    old_runs = sum(r["updated"] < cutoff for r in runs)
    runs_info = {"count": len(runs), "older_than_keep_days": old_runs, "live": live_runs}
    nights = sorted(str(d.relative_to(root)) for d in (root / NIGHTLY).glob("*/*") if d.is_dir()) \
        if (root / NIGHTLY).is_dir() else []
    servers = {"orphans": [{"key16": r["key16"], "pid": r["pid"]} for r in
                           orphan_servers(root, lambda k: not lock_held(root, "LaunchServers", k))],
               "dead_records": [r["_file"] for r in registry.records()
                                if not r.get("external") and not is_ours(r) and not running_elsewhere(r)],
               "orphan_shm": orphan_shm(), "orphan_semaphores": semaphores.orphans(),
               "orphan_private": [str(d) for d in private.orphans()]}
    return Plan(root, keep_days, now, cutoff, entries, runs_info, {"nights": len(nights)}, skipped, warnings,
                {r["file"]: r["mtime_ns"] for r in runs}, servers)


def _aged(root: Path, runs: list[dict]) -> list[Path]:
    """runs/*/failed/* and runs/*/corrupt/*, looking only into run directories that may hold them: not into one
    whose index line (its directory's stat unchanged) says it holds neither."""
    none = {r["name"] for r in runs if r.get("aged") is False and "name" in r}
    out: list[Path] = []
    for name in sorted(_names(root / RUNS)):
        if name.startswith(".") or name in none:
            continue
        for sub in AGED:
            out += (root / RUNS / name / sub).glob("*")
    return sorted(out)


# --- deleting ---------------------------------------------------------------------------------
def _remove_tree(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink()


def _clean_servers(p: Plan) -> None:
    """Stops the servers of launches that never published (their runs were killed), forgets dead
    servers and removes the shared memory nobody maps."""
    root, registry = p.root, ServerRegistry(p.root)
    done = {"stopped": [], "records": 0, "shm": 0}
    for o in p.servers.get("orphans", []):
        lock = FileLock(str(lock_path(root, "LaunchServers", o["key16"])), timeout=0)
        try:
            lock_path(root, "LaunchServers", o["key16"]).parent.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except (Timeout, OSError):
            continue
        try:
            if not registry.holders(o["key16"]):
                done["stopped"] += registry.stop(o["key16"])
        finally:
            lock.release()
    done["records"] = registry.sweep_dead()
    done["shm"] = len(remove_shm_files(orphan_shm()))
    done["semaphores"] = len(semaphores.remove(p.servers.get("orphan_semaphores", [])))
    gone = {str(d) for d in private.orphans()}  # still gone now: never one a server started meanwhile
    for d in p.servers.get("orphan_private", []):
        if d in gone:
            shutil.rmtree(d, ignore_errors=True)
    done["private"] = len(gone & set(p.servers.get("orphan_private", [])))
    p.servers["done"] = done


def execute(p: Plan) -> None:
    """Deletes what the plan lets go, each under its key's lock taken non-blocking."""
    root = p.root
    _clean_servers(p)
    trash = root / TRASH
    for e in p.goes:
        path = Path(e.path)
        if e.stage == TRASH or e.kind == "failed":  # no lock: no stage builds or reuses these
            try:
                _remove_tree(path)
                e.status = "deleted"
            except FileNotFoundError:
                e.status = "deleted"
            except OSError as err:
                e.status = f"failed: {err}"
            continue
        lp = lock_path(root, e.stage, e.key16)
        try:
            lp.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            e.status = f"failed: {err}"
            continue
        lock = FileLock(str(lp), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            e.status = "skipped: lock held (a stage started building it)"
            continue
        try:
            if not path.exists():
                e.status = "skipped: already gone"
                continue
            if e.kind == "artifact":
                m = _read_manifest(path)
                if m is None or _manifest_stamp(m) != e.manifest_stamp:
                    e.status = "skipped: republished since the plan"
                    continue
                if any(e.id in r["ids"] for r in read_runs(root, seen=p.run_files)):
                    e.status = "skipped: a run referenced it since the plan"
                    continue
            trash.mkdir(exist_ok=True)
            if trash.is_symlink() or not trash.is_dir():
                raise OSError(f"{trash} is a link or not a directory; remove it")
            dest = trash / f"{e.stage}-{path.name}-{os.getpid()}"
            os.replace(path, dest)  # one rename: the published artifact is gone at once
            try:  # still under the key's lock: no publish of the key can come between the rename and this line
                index.record(root, e.stage, [], gone=[path])
            except OSError:
                pass  # only slower: readers find the index inconsistent and rebuild it
        except OSError as err:
            e.status = f"failed: {err}"
            continue
        finally:
            lock.release()
        try:
            shutil.rmtree(dest)
            e.status = "deleted"
        except OSError as err:
            e.status = f"failed: {err} (moved to {dest}; the next gc removes it)"
    try:
        trash.rmdir()
    except OSError:
        pass


# --- output -----------------------------------------------------------------------------------
def to_json(p: Plan, deleted: bool) -> dict:
    goes = p.goes
    return {
        "root": str(p.root), "keep_days": p.keep_days, "cutoff": p.cutoff.isoformat(timespec="seconds"),
        "mode": "delete" if deleted else "dry-run",
        "delete": [e.public() for e in goes],
        "total": {"count": len(goes), "bytes": sum(e.size_bytes for e in goes)},
        "freed": {"count": sum(e.status == "deleted" for e in goes),
                  "bytes": sum(e.size_bytes for e in goes if e.status == "deleted")} if deleted else None,
        "keep": [e.public() for e in p.kept],
        "skipped": p.skipped, "runs": p.runs, "nightly": p.nightly, "warnings": p.warnings, "servers": p.servers,
    }


def render(p: Plan, deleted: bool, verbose: bool = False) -> str:
    goes = p.goes
    lines = [f"perfdag gc: {p.root}",
             (f"keeping what runs referenced since {p.cutoff:%Y-%m-%d %H:%M} UTC ({_days(p.keep_days)}), "
              "what is in use, and their upstream")]
    if goes:
        lines.append("deleting:" if deleted else "would delete (dry run; --delete deletes):")
        w = max(len(e.id) for e in goes)
        for e in goes:
            status = f"  [{e.status}]" if deleted and e.status != "deleted" else ""
            ref = _date(e.last_referenced) if e.kind == "artifact" and e.stage != TRASH else "-"
            lines.append(f"  {e.id:<{w}}  {human_size(e.size_bytes):>10}  last ref {ref:<10}  {e.why}{status}")
    else:
        lines.append("nothing to delete")
    total = sum(e.size_bytes for e in goes)
    if deleted:
        done = [e for e in goes if e.status == "deleted"]
        lines.append(f"total: freed {human_size(sum(e.size_bytes for e in done))} in {len(done)} of {len(goes)} "
                     f"item(s)" + (f"; {len(goes) - len(done)} skipped or failed" if len(done) < len(goes) else ""))
    else:
        lines.append(f"total: {human_size(total)} in {len(goes)} item(s) would be freed")
    kept = p.kept
    lines.append(f"kept: {len(kept)} item(s), {human_size(sum(e.size_bytes for e in kept))}")
    if verbose and kept:
        w = max(len(e.id) for e in kept)
        lines += [f"  {e.id:<{w}}  {human_size(e.size_bytes):>10}  last ref {_date(e.last_referenced):<10}  {e.why}"
                  for e in kept]
    r = p.runs
    lines.append(f"runs/: {r['count']} run record(s) kept, {r['older_than_keep_days']} older than {_days(p.keep_days)} "
                 "(gc never deletes run history)")
    lines.append(f"Nightly/: {p.nightly['nights']} night(s) kept (gc never deletes Nightly history)")
    lines += [f"left alone: {s['id']}: {s['why']}" for s in p.skipped]
    sv = p.servers or {}
    if sv.get("orphans") or sv.get("dead_records") or sv.get("orphan_shm") or sv.get("orphan_semaphores") \
            or sv.get("orphan_private"):
        verb = "stopped/removed" if deleted else "would stop/remove"
        lines.append(f"servers: {verb} {len(sv.get('orphans', []))} server(s) of launches that never published "
                     f"(pids {', '.join(str(o['pid']) for o in sv.get('orphans', [])) or '-'}), "
                     f"{len(sv.get('dead_records', []))} record(s) of dead servers, "
                     f"{len(sv.get('orphan_shm', []))} shared-memory region(s) nobody maps, "
                     f"{len(sv.get('orphan_semaphores', []))} semaphore(s) of killed LoadGen drivers, "
                     f"{len(sv.get('orphan_private', []))} private server director(y/ies) of servers that are gone")
    lines += [f"warning: {w}" for w in p.warnings]
    return "\n".join(lines)


def gc(root: Path, keep_days: float = 14, delete: bool = False) -> Plan:
    p = plan(root, keep_days, verify=delete)  # deleting plans from manifests checked against the index
    if delete:
        execute(p)
    return p


