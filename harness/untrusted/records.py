"""What perfdag wrote earlier under the artifacts root, read back as untrusted input.

Whoever can write under the root can edit those files, so a record is parsed with a strict schema
(exact JSON types, fields of perfdag's own shape) and, when it does not parse, reported once - one
line naming the file - and never acted on. Server records (serving/records.py) and run records
(cache/runs.py) are built on this.
"""
from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Annotated, Iterator, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from harness.errors import MAX_LINE, InputError
from harness.untrusted import jsonio
from harness.untrusted.files import read_regular

log = logging.getLogger("perfdag")


MAX_BYTES = 1 << 20  # a record is a few hundred bytes (a servers.json a few KiB): more is not a record


def matching(pattern: re.Pattern, what: str):
    def check(v: str) -> str:
        if not pattern.fullmatch(v):
            raise ValueError(f"not {what}")
        return v
    return AfterValidator(check)


Text = Annotated[str, Field(min_length=1, max_length=4096)]


Time = Annotated[float, Field(allow_inf_nan=False, ge=0)]


RunId = Annotated[str, matching(re.compile(r"[A-Za-z0-9_.:-]{1,128}"), "a run id")]


class StrictRecord(BaseModel):
    # Exact types; fields this perfdag does not know are dropped, never acted on. defer_build: a
    # record's validator is built when one is first read, not when its module is imported (a cached
    # run reads few of them; the same validation either way).
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, defer_build=True)


# --- reporting --------------------------------------------------------------------------------
_reported: set[str] = set()


_sinks: list[list[str]] = []


def ignored(source, why: str) -> None:
    """Reports a record perfdag will not act on: once per process, one line naming the file (to the
    innermost `collected()` list, else as a warning of the 'perfdag' logger)."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in f"ignoring {source}: {why}")  # one line
    if len(line) > MAX_LINE:
        line = line[:MAX_LINE] + "..."
    if line in _reported:
        return
    _reported.add(line)
    if _sinks:
        _sinks[-1].append(line)
    else:
        log.warning("%s", line)


@contextlib.contextmanager
def collected() -> Iterator[list[str]]:
    """Collects the lines `ignored` reports meanwhile (gc prints them with its report)."""
    sink: list[str] = []
    _sinks.append(sink)
    try:
        yield sink
    finally:
        _sinks.remove(sink)


def _problems(err: ValidationError) -> str:
    out = []
    for e in err.errors()[:3]:
        where = ".".join(str(x) for x in e["loc"]) or "record"
        out.append(f"{where}: {e['msg'].removeprefix('Value error, ')}")
    more = len(err.errors()) - 3
    return "; ".join(out) + (f" (and {more} more)" if more > 0 else "")


# --- reading ------------------------------------------------------------------------------------
class Unreadable(Exception):
    pass


def read_json(path: Path, inside: Path | None):
    """The JSON document in `path`: a regular file that is no link (harness.untrusted.files: no FIFO or device,
    at most MAX_BYTES read) and, with `inside`, really under that directory. FileNotFoundError when it
    is gone (no report)."""
    if inside is not None:
        try:
            real, base = path.resolve(), Path(inside).resolve()
        except (OSError, RuntimeError) as e:
            raise Unreadable(str(e)) from None
        if real != base and base not in real.parents:
            raise Unreadable(f"it lies outside {inside} (a link leads out)")
    if path.is_symlink():
        raise Unreadable("a symbolic link, not a record")
    try:
        data = read_regular(path, "record", MAX_BYTES, "a record is a few KiB")
    except InputError as e:
        raise Unreadable(str(e).removeprefix(f"record {path}: ")) from None
    except FileNotFoundError:
        raise
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None
    try:
        return jsonio.loads(data)
    except jsonio.NotJson as e:
        raise Unreadable(f"not JSON ({e})") from None


M = TypeVar("M", bound=StrictRecord)


def parse(model: type[M], doc, source) -> dict | None:
    """`doc` as `model` (the fields it holds, checked), or None after reporting why not."""
    try:
        return model.model_validate(doc).model_dump(exclude_unset=True)
    except ValidationError as e:
        ignored(source, f"malformed {model.__name__.removesuffix('Record').lower()} record ({_problems(e)}); "
                        "perfdag does not act on it")
        return None


def read(model: type[M], path: Path, inside: Path | None = None) -> dict | None:
    """The record in `path`, checked; None when it is absent, or unreadable or malformed (reported)."""
    try:
        doc = read_json(Path(path), inside)
    except FileNotFoundError:
        return None
    except Unreadable as e:
        ignored(path, f"{e}; perfdag does not act on it")
        return None
    return parse(model, doc, path)
