"""perfdag's one error base class, and its families.

Everything perfdag raises on purpose derives from `PerfdagError`, so an entry point can print it
as a message instead of a traceback. `str()` is that message: one line, or a header line plus
one line per problem (`problems`, each 'field: what is wrong; the fix').
Each family also derives from the builtin it refines, so `except ValueError` keeps working.
"""
from __future__ import annotations


class PerfdagError(Exception):
    """An error perfdag reports as a message; `problems` lists what is wrong, one item each."""

    def __init__(self, message: str = "", problems: list[str] | None = None):
        self.problems = list(problems or [])
        if self.problems:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            message = f"{message}\n{lines}" if message else lines
        super().__init__(message)


class InputError(PerfdagError, ValueError):
    """Bad input: parameters, sweep files, datasets. Refused before any stage runs."""


class BuildError(PerfdagError, RuntimeError):
    """A checkpoint, engine or server configuration could not be produced."""


class ServingError(PerfdagError, RuntimeError):
    """A server did not start, is not ready, or died."""


class MeasurementError(PerfdagError, RuntimeError):
    """A LoadGen run or its scoring failed."""


class ArtifactError(PerfdagError, RuntimeError):
    """A published artifact is corrupt or was changed after it was published."""


def one_line(exc: BaseException) -> str:
    """How an entry point prints an error: perfdag's own as its message, others with their type."""
    if isinstance(exc, PerfdagError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
