"""The cyclic collector paused while a command's modules import (issue 51).

Imports allocate hundreds of thousands of objects that live as long as the process and free almost
none, so the collector's passes over them are wasted (about a tenth of a cached FullRun's CPU), and
every later full pass would walk them again. While the imports run the collector is paused; then what
they made is frozen (gc.freeze: later passes skip it) and the collector is left as it was found.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_for_imports() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()
