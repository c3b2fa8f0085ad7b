"""Measurements are observations: a measuring stage's key says what was measured, and each execution
of it is an observation of its own, kept with every file it produced.

A build is a function of its inputs, so one artifact per key is all there is to keep. A measurement
is not: measuring the same key again gives other numbers, and both are facts. So the store keeps, per
key of an observing stage (tasks/base.py `observes`), the latest observation where every artifact
lives (artifacts/<Stage>/<key16>/: what reuse takes, what downstream stages read) and every earlier
one under artifacts/observations/<Stage>/<key16>/<observation id>/, moved there (one rename, under the
key's lock) when a new observation of the key is published.

An observation's id is the run id that made it (runs/<run id>/), `.2`, `.3`... for further ones of
one run (--repeat). It is written in the observation's manifest, which is checksummed and signed like
any other, so an observation renamed or copied to another's place (another id, another key) is
refused, as is one whose files differ from what was published (ArtifactStore.observation_problems).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from harness.cache.integrity import MANIFEST
from harness.untrusted import jsonio

OBSERVATIONS = "observations"  # <root>/observations/<Stage>/<key16>/<observation id>/
FIELD = "observation"          # the manifest field holding an observation's id
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


def is_id(s: object) -> bool:
    """Whether `s` can be an observation id (and so name a directory)."""
    return isinstance(s, str) and bool(_ID.fullmatch(s)) and ".." not in s


def archive_dir(root: Path, stage: str, key: str) -> Path:
    return Path(root) / OBSERVATIONS / stage / key[:16]


def id_of(manifest: dict) -> str | None:
    """The observation id a manifest names: its own field, else (published before observations were
    kept) the run that made it; None when neither is a usable id."""
    for cand in (manifest.get(FIELD), manifest.get("run_id")):
        if is_id(cand):
            return cand
    return None


def sequence(obs_id: str | None) -> tuple[str, int]:
    """Where an id stands among one key's observations when two finished in the same millisecond
    (`finished_at`'s resolution): by run (run ids begin with their start time), then `.2`, `.3`...
    in the order `new_id` hands them out (numerically: `.10` after `.9`)."""
    base, _, n = (obs_id or "").rpartition(".")
    return (base, int(n)) if base and n.isdigit() else (obs_id or "", 1)


def archived_ids(root: Path, stage: str, key: str) -> list[str]:
    d = archive_dir(root, stage, key)
    try:
        return sorted(e.name for e in os.scandir(d) if e.is_dir(follow_symlinks=False) and is_id(e.name))
    except OSError:
        return []


def new_id(run_id: str, taken: set[str]) -> str:
    """This run's next observation id of a key: the run id, then `<run id>.2`, `.3`..."""
    if run_id not in taken:
        return run_id
    n = 2
    while f"{run_id}.{n}" in taken:
        n += 1
    return f"{run_id}.{n}"


def archive(root: Path, stage: str, key: str, published: Path) -> Path | None:
    """Moves the published observation at `published` into the archive under its id (call under the
    key's lock, before a new observation replaces it). None, and nothing moved, when what is there is
    no observation of this key (no readable manifest naming it): the caller removes it as before."""
    try:
        m = jsonio.loads((published / MANIFEST).read_bytes())
    except (OSError, jsonio.NotJson):
        return None
    if not isinstance(m, dict) or m.get("key") != key or published.is_symlink():
        return None
    obs = id_of(m)
    if obs is None:
        return None
    dest_parent = archive_dir(root, stage, key)
    dest_parent.mkdir(parents=True, exist_ok=True)
    dest = dest_parent / obs
    if os.path.lexists(dest):  # the same observation twice (it was restored by hand): keep both
        return None
    os.replace(published, dest)  # under the root: one rename, files keep their identities
    return dest
