"""Where perfdag keeps things: artifacts root (env PERFDAG_ARTIFACTS, else luigi.cfg) and params."""
from __future__ import annotations

import os
from pathlib import Path

import luigi

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PARAMS = "params/default.yaml"


def artifacts_root() -> Path:
    root = os.environ.get("PERFDAG_ARTIFACTS") or luigi.configuration.get_config().get(
        "perfdag", "artifacts_root", "artifacts")
    return Path(root).expanduser().resolve()


def params_path(name: str) -> Path | None:
    """A params file as given, else relative to the repo (so the default works from any cwd)."""
    if not name:
        return None
    p = Path(name).expanduser()
    if not p.exists() and not p.is_absolute() and (REPO_ROOT / p).exists():
        return REPO_ROOT / p
    return p
