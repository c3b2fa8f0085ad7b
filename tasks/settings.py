"""Where perfdag keeps things: artifacts root (env PERFDAG_ARTIFACTS, else luigi.cfg), params, and the
optional manifest signing key (env PERFDAG_SIGNING_KEY_FILE, else luigi.cfg's signing_key_file)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import luigi

from harness import CHECKOUT
from harness.cache.signing import load_key

REPO_ROOT = CHECKOUT
DEFAULT_PARAMS = "params/default.yaml"


def artifacts_root() -> Path:
    root = os.environ.get("PERFDAG_ARTIFACTS") or luigi.configuration.get_config().get(
        "perfdag", "artifacts_root", "artifacts")
    return Path(root).expanduser().resolve()


_LOOKING_ONLY = [False]


@contextmanager
def looking_only() -> Iterator[None]:
    """Within it, perfdag writes nothing under the root (`status`): memo files are read, not updated."""
    before, _LOOKING_ONLY[0] = _LOOKING_ONLY[0], True
    try:
        yield
    finally:
        _LOOKING_ONLY[0] = before


def may_write_root() -> bool:
    return not _LOOKING_ONLY[0]


def signing_key() -> bytes | None:
    """The manifest signing key, or None when none is configured (manifests are then unsigned)."""
    path = os.environ.get("PERFDAG_SIGNING_KEY_FILE") or luigi.configuration.get_config().get(
        "perfdag", "signing_key_file", "")
    return _read_key(str(Path(path).expanduser().resolve())) if path else None


@lru_cache(maxsize=4)
def _read_key(path: str) -> bytes:
    return load_key(path)


def params_path(name: str) -> Path | None:
    """A params file as given, else relative to the repo (so the default works from any cwd)."""
    if not name:
        return None
    p = Path(name).expanduser()
    if not p.exists() and not p.is_absolute() and (REPO_ROOT / p).exists():
        return REPO_ROOT / p
    return p
