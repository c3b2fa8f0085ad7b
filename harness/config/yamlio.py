"""Reading YAML the strict way: UTF-8 only, no duplicate keys, no aliases, `1e-3` is a number.

PyYAML keeps the last of two equal keys without a word and reads `1e-3` (no dot) as a string;
both hide mistakes in a params file, so both are fixed here. Aliases (`*name`, `<<: *name`) are
refused: nested ones expand exponentially (an "alias bomb" of a few lines is gigabytes), and
`extends:` and a sweep's `overrides:` already share values between files. Errors name the file,
line and fix.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError


class StrictLoader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"alias *{event.anchor} is not allowed in perfdag files (aliases can expand without "
                            "bound); write the value out, or share it with extends:", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"duplicate key {key!r} (first at line {seen[key] + 1}); keep one of them", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


# YAML 1.2 floats: 1e-3, 1E5, .5, inf/nan spellings (the last are refused later as non-finite).
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)
                |[-+]?(?:[0-9][0-9_]*)\.[0-9_]*
                |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def loads(text: str) -> Any:
    return yaml.load(text, Loader=StrictLoader)


def describe_error(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"malformed YAML{where}: {getattr(e, 'problem', None) or e}"


def read_text(path: Path) -> str:
    """A file's text, or InputError naming what is wrong with it."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                         "save it as UTF-8") from None
    if "\x00" in text:
        raise InputError(f"{path}: contains NUL bytes; is it a text file?")
    return text


def load_file(path: Path) -> Any:
    """The YAML document in `path`; InputError (file, line, fix) when it cannot be read."""
    text = read_text(path)
    try:
        return loads(text)
    except yaml.YAMLError as e:
        raise InputError(f"{Path(path).name}: {describe_error(e)}") from None
