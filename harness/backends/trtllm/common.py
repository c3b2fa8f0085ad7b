"""Small helpers shared by the trtllm modules: the error type and flag-value coercion."""
from __future__ import annotations

import difflib
from typing import Any, Iterable

from harness.errors import InputError


class TrtllmError(InputError):
    """Parameters the trtllm backend cannot turn into a valid command or config.

    `problems` holds one 'field: what is wrong; the fix' line each, like ParamsError.
    """

    def __init__(self, problems: list[str]):
        super().__init__(f"trtllm backend: {len(problems)} problem(s):", problems)


def raise_if(problems: list[str]) -> None:
    if problems:
        raise TrtllmError(problems)


# TensorRT-LLM's CLI spells booleans enable/disable; YAML and env flags may give true/false.
_TRUE = {"enable", "enabled", "true", "1", "yes", "on"}
_FALSE = {"disable", "disabled", "false", "0", "no", "off"}


def as_bool(value: Any) -> bool | None:
    """True/False for enable/disable-like values, None when it is not one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    s = str(value).strip().lower()
    return True if s in _TRUE else False if s in _FALSE else None


def as_int(value: Any) -> int | None:
    """An int for ints and integral strings (not bools), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def suggest(name: str, known: Iterable[str]) -> str:
    """' (did you mean X?)' for a near miss, else ''."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""
