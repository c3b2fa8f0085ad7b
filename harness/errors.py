"""perfdag's one error base class, and its families.

Everything perfdag raises on purpose derives from `PerfdagError`, so an entry point can print it
as a message instead of a traceback. `str()` is that message: one line, or a header line plus
one line per problem (`problems`, each 'field: what is wrong; the fix').
Each family also derives from the builtin it refines, so `except ValueError` keeps working.
"""
from __future__ import annotations

MAX_LINE = 500        # characters of one problem line: a 10 MB value must not print 10 MB
MAX_PROBLEMS = 50     # problem lines shown; the rest are counted
MAX_MESSAGE_LINE = 2000  # the message itself may carry a server log's tail: longer lines, more of them
MAX_MESSAGE_LINES = 400


def shorten(value, limit: int = 120) -> str:
    """repr(value), cut to `limit` characters with the length said (for values quoted in messages)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def _bounded(line: str, limit: int = MAX_LINE) -> str:
    return line if len(line) <= limit else f"{line[:limit]}... (cut: {len(line)} characters)"


class PerfdagError(Exception):
    """An error perfdag reports as a message; `problems` lists what is wrong, one item each.
    Output is bounded: each line at most MAX_LINE characters, at most MAX_PROBLEMS lines."""

    def __init__(self, message: str = "", problems: list[str] | None = None):
        problems = [_bounded(str(p)) for p in problems or []]
        if len(problems) > MAX_PROBLEMS:
            problems = problems[:MAX_PROBLEMS] + [f"... and {len(problems) - MAX_PROBLEMS} more problem(s)"]
        lines = str(message).split("\n")
        message = "\n".join([_bounded(line, MAX_MESSAGE_LINE) for line in lines[:MAX_MESSAGE_LINES]]
                            + ([f"... ({len(lines) - MAX_MESSAGE_LINES} more lines)"] if len(lines) > MAX_MESSAGE_LINES else []))
        self.problems = problems
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
