"""The base of every parameter section (schema.py, sessions.py and layout.py build on it)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    # strict: YAML already gives numbers and booleans their types, so `true` is never a count and
    # "3" never a number; non-finite numbers (.nan, .inf) are refused everywhere.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True, allow_inf_nan=False)
