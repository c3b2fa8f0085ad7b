"""A memo of what gc read the server records of LaunchServers artifacts from, so that a dry run of a large root does
not read and parse every such manifest again.

gc asks of every LaunchServers artifact nothing else keeps whether its servers are in use (harness/gc/collect.py);
that needs the artifact's server records, from its servers.json or else its manifest's copy (a manifest lists every
file: a large read per artifact). This memo, `~/.cache/perfdag/gc-server-docs-<rule>.json` ($XDG_CACHE_HOME where
set), is private to the user as the code-digest and verified-observation memos are (harness/cache/private_memo.py).
An entry is named by the artifact's directory and holds the identity (device, inode, size, mtime, ctime, type) of the
directory, its manifest.json and its servers.json (None: absent), taken before and after they were read, and what was
read: the document holding the records and the file it is in (None: no records). It is taken only while all three
paths still have that identity: a write, touch, rename, link or removal moves one (the kernel sets ctime), and they
are read again exactly as without the memo. Only the reading is saved: the document's records are still checked by
the strict schema (harness/serving/records.py; a malformed one is reported on every run), stamped with this root's
identity, and their processes looked up afresh. A reading that reported a file it could not read is never kept;
the entries of a root's artifacts a dry run did not ask about (gone, or kept for another reason) are dropped.
A plan that deletes, and PERFDAG_VERIFY=1, never read the memo. Deleting the file is always safe.
"""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

from harness.cache import private_memo
from harness.cache.integrity import MANIFEST
from harness.cache.verified import identity
from harness.untrusted import jsonio

SERVERS_FILE = "servers.json"
MEMO_ENTRIES = 50_000           # entries kept, newest last (a root of 100,000 items has about 10,000 launches)
_MEMO_BYTES = 1 << 30
_NAMES = (None, SERVERS_FILE, MANIFEST)


@lru_cache(maxsize=1)
def _rule() -> str:
    base = Path(__file__).resolve().parent.parent
    return hashlib.sha256(b"".join((base / f).read_bytes() for f in (
        "gc/server_memo.py", "gc/collect.py", "untrusted/records.py", "untrusted/jsonio.py",
        "untrusted/files.py"))).hexdigest()[:12]


def memo_file() -> Path:
    """One memo per version of the code that reads what it holds (a change starts afresh)."""
    return private_memo.path(f"gc-server-docs-{_rule()}.json")


def _ident_ok(v) -> bool:
    return v is None or isinstance(v, list) and len(v) == 6 and all(type(x) is int for x in v)


def _entry_ok(v) -> bool:
    return (isinstance(v, list) and len(v) == 3 and isinstance(v[0], list) and len(v[0]) == 3
            and all(_ident_ok(i) for i in v[0]) and v[1] in _NAMES)


class Memo:
    """The memo as one plan uses it: `use` False (a plan that deletes) reads and writes nothing."""

    def __init__(self, use: bool):
        self.use = use and os.environ.get("PERFDAG_VERIFY") != "1"
        self.fresh, self.seen = False, set()
        doc = private_memo.read(memo_file(), _MEMO_BYTES) if self.use else {}
        self.entries = {k: v for k, v in doc.items() if isinstance(k, str) and _entry_ok(v)}

    @staticmethod
    def identities(d: str) -> list:
        """Of the artifact's directory `d` (a normalised absolute path), its manifest and its servers.json."""
        return [identity(d), identity(f"{d}/{MANIFEST}"), identity(f"{d}/{SERVERS_FILE}")]

    def get(self, d: str, ids: list) -> tuple[object, str | None] | None:
        """(document, file name) read from `d` while its paths had identities `ids`; None: not known."""
        self.seen.add(d)
        e = self.entries.get(d) if self.use else None
        return (e[2], e[1]) if e is not None and e[0] == ids else None

    def put(self, d: str, ids: list, doc, name: str | None) -> None:
        """`d` read as `doc` from `name` while its paths had identities `ids` (taken before the reading)."""
        if not self.use or ids[0] is None or self.identities(d) != ids:  # moved while read: read again next time
            return
        if name is not None and jsonio.too_deep(doc, jsonio.MAX_DEPTH - 3):  # the memo's own nesting on top
            return
        self.entries.pop(d, None)  # re-inserted last: the newest entry
        self.entries[d] = [ids, name, doc if name is not None else None]
        self.fresh = True

    def save(self, under: str) -> None:
        """Writes the memo when this plan added to it or it held directories under `under` (the root's LaunchServers/)
        this plan did not ask about (gone, or kept for another reason): those are dropped. A private file, replaced
        whole; never fails."""
        stale = [d for d in self.entries if d.startswith(under) and d not in self.seen] if self.use else []
        for d in stale:
            del self.entries[d]
        if self.fresh or stale:
            private_memo.write(memo_file(), dict(list(self.entries.items())[-MEMO_ENTRIES:]))
            self.fresh = False
