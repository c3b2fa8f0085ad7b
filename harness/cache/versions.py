"""Versions of the tools that shape an artifact; they enter stage keys."""
from __future__ import annotations

from functools import lru_cache
from importlib import metadata


@lru_cache(maxsize=None)
def package_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def versions(*dists: str) -> dict[str, str]:
    return {d: package_version(d) for d in dists}
