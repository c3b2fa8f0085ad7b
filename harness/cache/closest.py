"""`status`'s closest cached artifact of a stage: the published one whose key inputs differ least from what is
asked for, found from the stage's index (harness/cache/index.py), and a memo of that answer.

Finding it parses every artifact line of the index (a measuring stage of a year's nightlies has tens of thousands)
each time `status` runs, yet the answer is a function of the index's bytes, the root's artifact directories and
their manifests' stats (the index holds only while they are the ones it records) and what is asked for. So it is
memoised in the user's cache directory, outside any root (`~/.cache/perfdag/closest-<rule>.json`, private to the
user as the code-digest memo is: harness/cache/private_memo.py), per root and stage: the identity of the index file
read (device, inode, size, mtime, ctime, type: an append, a rewrite or a replacement moves it; taken before and
after the read, and nothing is kept when it moved in between), a digest of the artifact directories' names with the
stat of each manifest as the index records them, and per digest of the key inputs asked for, the line picked. It
is taken only while the index has that identity and the root's directories and manifests' stats digest the same
(each manifest is still stat'ed, as the index's own check does); then the index would parse to the same lines,
they would hold, and the same line would be picked. The pick's manifest is read and checked against its line
either way. An index that does not hold (rebuilt in memory) is never memoised, nor is anything under
`PERFDAG_VERIFY=1`, which never reads the memo. Deleting the memo is always safe.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

from harness.cache import index, private_memo, verified
from harness.cache.integrity import MANIFEST
from harness.untrusted import jsonio

MEMO_ENTRIES = 256  # (root, stage) pairs
MEMO_PICKS = 32  # sets of key inputs asked, per entry
_MEMO_BYTES = 64 << 20
_MEMO: dict | None = None
_FRESH: list[str] = []


@lru_cache(maxsize=1)
def _memo_file() -> Path:
    """One memo per version of this module and of the index it reads (a rule change starts afresh)."""
    here = Path(__file__).parent
    rule = hashlib.sha256(b"".join((here / f).read_bytes() for f in ("closest.py", "index.py"))).hexdigest()[:12]
    return private_memo.path(f"closest-{rule}.json")


def _memo() -> dict:
    global _MEMO
    if _MEMO is None:
        _MEMO = private_memo.read(_memo_file(), _MEMO_BYTES)
    return _MEMO


def _save() -> None:
    """Adds this process's new entries to the memo (a private file, replaced whole); never fails."""
    if not _FRESH:
        return
    _FRESH.clear()
    private_memo.write(_memo_file(), dict(list(_memo().items())[-MEMO_ENTRIES:]))


def _digest(doc) -> str:
    return hashlib.blake2b(json.dumps(doc, separators=(",", ":")).encode(), digest_size=16).hexdigest()


def _root_stamps(root: Path, stage: str) -> str:
    """The digest of the stage's artifact directories, each with its manifest's stat now (what `consistent` checks)."""
    base = f"{root}/{stage}/"
    return _digest([[rel, index.stamp_now(f"{base}{rel}/{MANIFEST}")] for rel in index.artifact_dirs(root, stage)])


def _memoised(name: str, read: list | None, asked: str, root: Path, stage: str) -> tuple[bool, dict | None]:
    """(found, the line picked: None where the stage had no artifact) from the memo, where it still holds."""
    entry = _memo().get(name)
    if read is None or not isinstance(entry, dict) or entry.get("index") != read:
        return False, None
    picks = entry.get("picks")
    if not isinstance(picks, dict) or asked not in picks:
        return False, None
    line = picks[asked]
    if line is not None and not (isinstance(line, dict) and isinstance(line.get("d"), str)
                                 and index.artifact_name(line["d"])):
        return False, None
    return (entry.get("stamps") == _root_stamps(root, stage)), line


def _remember(name: str, read: list, stamps: str, asked: str, line: dict | None) -> None:
    memo = _memo()
    entry = memo.pop(name, None)  # re-inserted last: the newest entry
    if not isinstance(entry, dict) or entry.get("index") != read or entry.get("stamps") != stamps \
            or not isinstance(entry.get("picks"), dict):
        entry = {"index": read, "stamps": stamps, "picks": {}}
    picks = entry["picks"]
    picks.pop(asked, None)
    picks[asked] = line
    for old in list(picks)[:-MEMO_PICKS]:  # the oldest asked go first
        del picks[old]
    memo[name] = entry
    if not _FRESH:
        atexit.register(_save)
    _FRESH.append(name)


def _pick(got: dict[str, dict], doc: dict) -> dict | None:
    """The artifact line whose key inputs are closest to `doc`'s (fewest differing: `index.distance`; the newest
    among equals, as ArtifactStore.manifests orders them: by finished time, then directory); None when there is none.
    A line sharing too few inputs to be closer than the best so far is not counted further (the count is at least
    the inputs asked for less those it shares)."""
    now = set(index.field_hashes(doc))
    now_names = {h >> 40 for h in now}
    best, best_rank = None, None
    for rel, e in got.items():
        if "/" in rel or not e.get("manifest"):
            continue
        then = e["fields"]
        shared = len(now.intersection(then))
        if best_rank is not None and len(now_names) - shared > best_rank[0]:
            continue
        rank = (len(now_names | {h >> 40 for h in then}) - shared, e.get("finished_at") or "", rel)
        if best_rank is None or rank[0] < best_rank[0] or (rank[0] == best_rank[0] and rank[1:] > best_rank[1:]):
            best, best_rank = e, rank
    return best


def closest(root: str | os.PathLike, stage: str, doc: dict) -> dict | None | bool:
    """The published manifest of `stage` whose key inputs are closest to `doc`'s, read and checked against its
    index line; None when the stage has none; False when that manifest is not the one indexed (the caller scans
    instead)."""
    root = Path(root)
    path = root / stage / index.INDEX
    name, asked = f"{root}|{stage}", _digest(index.field_hashes(doc))
    memo = os.environ.get("PERFDAG_VERIFY") != "1"
    before = verified.identity(path) if memo else None
    found, line = _memoised(name, before, asked, root, stage) if memo else (False, None)
    if not found:
        got = index.read(root, stage, artifacts_only=True)  # observations' lines (most of a measuring stage's): unread
        held = got is not None and index.consistent(root, stage, got, artifacts_only=True)
        if not held:
            got = {rel: index.entry_of(root, stage, rel) for rel in index.artifact_dirs(root, stage)}
        line = _pick(got, doc)
        if held and before is not None and verified.identity(path) == before:
            _remember(name, before, _digest([[rel, got[rel].get("stamp")] for rel in sorted(got)]), asked, line)
    if line is None:
        return None
    where = f"{root}/{stage}/{line['d']}"
    data, st = index.read_manifest(Path(where))
    if data is None or index.describe(line["d"], data, st) != line:  # not the manifest indexed, or the line was edited
        return False
    m = jsonio.loads(data)
    m["_dir"] = where
    return m
