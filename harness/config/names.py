"""Names that look right and are not: a key with a Cyrillic "а" for the Latin "a", a full-width letter
or a zero-width space is an unknown key whose allowed list reads identical to it. Such a key is
named with its non-ASCII characters and the ASCII key it resembles."""
from __future__ import annotations

import difflib
import unicodedata
from typing import Iterable


def non_ascii(name: str) -> list[str]:
    """'U+0430 CYRILLIC SMALL LETTER A at position 2' for each non-ASCII character (positions from 1)."""
    return [f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed character')} at position {i}"
            for i, c in enumerate(name, start=1) if ord(c) > 127]


def resembles(name: str, known: Iterable[str]) -> str | None:
    """The known ASCII name that `name` is most likely a look-alike of, or None."""
    known = [k for k in known if k.isascii()]
    folded = "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf")
    if folded in known:  # full-width letters, zero-width spaces and the like
        return folded
    # A look-alike letter in place of an ASCII one: every ASCII character where it is, the rest differ.
    same = [k for k in known if len(k) == len(folded)
            and all(a == b for a, b in zip(folded, k) if a.isascii())]
    if len(same) == 1:
        return same[0]
    close = difflib.get_close_matches("".join(c if c.isascii() else "?" for c in folded), known, n=1, cutoff=0.6)
    return close[0] if close else None


def non_ascii_problem(name: str, known: Iterable[str]) -> str | None:
    """What to say of a name holding non-ASCII characters (None: it holds none)."""
    chars = non_ascii(name)
    if not chars:
        return None
    like = resembles(name, known)
    return (f"holds non-ASCII characters ({'; '.join(chars)})"
            + (f": it looks like {like!r}; type that name in ASCII" if like else "; names are ASCII"))
