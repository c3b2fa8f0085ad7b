"""Dataset converters: one module per source format, each exposing `convert(src, out, ...)`, which reads the
source's real layout and writes the dataset form perfdag reads (`python -m pipeline dataset convert`).
Modules are named here and imported when used."""
from __future__ import annotations

import importlib

from harness.errors import InputError

#: format name -> its module (a `convert(src, out, **options) -> dict` function).
CONVERTERS = {"librispeech": "harness.model.converters.librispeech"}


def converter(fmt: str):
    if fmt not in CONVERTERS:
        raise InputError(f"--format {fmt!r}: no such converter; use one of {', '.join(CONVERTERS)}")
    return importlib.import_module(CONVERTERS[fmt]).convert
