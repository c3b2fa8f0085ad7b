"""Opening a file a user names (a key, a params or sweep file, a dataset): a regular file only, read
with a bound.

A FIFO blocks `open()` until someone writes to it, a device such as /dev/zero never ends, and a
socket cannot be opened at all; each is refused with one line naming the path before any stage
runs. The file is opened without blocking and checked on the open descriptor, so one swapped in
after the check is caught too.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from harness.errors import InputError


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


def not_regular(path: str | os.PathLike) -> str | None:
    """What `path` is when it exists and is not a regular file ('a FIFO'...), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def _refuse(what: str, path, kind: str) -> InputError:
    return InputError(f"{what} {path}: is {kind}, not a regular file; give a regular file")


def open_regular(path: str | os.PathLike, what: str) -> BinaryIO:
    """`path` opened for binary reading; InputError when it is not a regular file, OSError when it
    cannot be opened (missing, permissions)."""
    kind = not_regular(path)
    if kind:  # a socket cannot be opened: say what it is before trying
        raise _refuse(what, path, kind)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO swapped in: no wait for a writer
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(what, path, _kind(mode))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, what: str, limit: int, fix: str) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them; InputError naming the path, the
    limit and `fix` when there are more."""
    with open_regular(path, what) as f:
        # in pieces: read(limit + 1) allocates a buffer of the limit (2 GiB for a trajectory file) at once
        pieces, got = [], 0
        while got <= limit and (piece := f.read(min(1 << 24, limit + 1 - got))):
            pieces.append(piece)
            got += len(piece)
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if len(data) > limit:
            size = max(os.fstat(f.fileno()).st_size, len(data))
            raise InputError(f"{what} {Path(path)}: {size} bytes, more than the {limit} read at most; {fix}")
    return data
