"""What an external tool is handed, normalised for the stage keys: no machine paths, ports or pids.

Command lines and environments are rendered with placeholders (`<port>`, `<repo>`, `<shm>` ...)
by the same functions that render the real ones; what is left of this machine (the venv, the
Python install, the perfdag checkout, the artifacts root) is replaced by a name here.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from harness import CHECKOUT

PERFDAG = str(CHECKOUT)


def machine_paths(root: str | Path | None = None) -> dict[str, str]:
    subs = {sys.prefix: "<venv>", sys.base_prefix: "<python>", PERFDAG: "<perfdag>"}
    if root is not None:
        subs[str(Path(root).resolve())] = "<root>"
    return subs


def normalise(obj: Any, subs: dict[str, str] | None = None) -> Any:
    """`obj` with every occurrence of a machine path replaced by its name (longest path first)."""
    subs = machine_paths() if subs is None else subs
    order = sorted(subs, key=len, reverse=True)

    def one(v):
        if isinstance(v, str):
            for path in order:
                if path and path in v:
                    v = v.replace(path, subs[path])
            return v
        if isinstance(v, dict):
            return {one(k): one(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [one(x) for x in v]
        return v
    return one(obj)
