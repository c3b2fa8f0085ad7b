"""Reading YAML the strict way: the YAML 1.2 core schema, UTF-8 only, no duplicate keys, no aliases.

PyYAML implements YAML 1.1, whose implicit types hide mistakes: `10:00` is the sexagesimal 600,
`yes`/`no`/`on`/`off` are booleans, `017` is octal 15, `2024-01-01` a date, and `1e-3` (no dot) a
string. Here plain scalars resolve as the YAML 1.2 core schema says (ruamel.yaml's default too):
null, true/false, decimal, `0o` octal and `0x` hex integers, floats with an optional exponent;
anything else is a string, which a number field then refuses by name. PyYAML keeps the last of two
equal keys without a word: refused here. Aliases (`*name`, `<<: *name`) are refused: nested ones
expand exponentially (an "alias bomb" of a few lines is gigabytes), and `extends:` and a sweep's
`overrides:` already share values between files. A mapping key is a scalar (a complex key such as
`? [a, b]` names nothing perfdag reads), and collections nest at most MAX_DEPTH deep (PyYAML's
composer recurses once per level: 100,000 `[` would end in a RecursionError). Errors name the file,
line and fix.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from harness.errors import InputError
from harness.untrusted.files import read_regular

# A params, sweep or system file is a few KiB (the biggest shipped one under 2 KiB); more is a mistake.
MAX_YAML_BYTES = 1 << 20
# Collections nested in one document at most; a params file nests 3 or 4 deep (section, flags, a list).
MAX_DEPTH = 64


class ShapeError(yaml.MarkedYAMLError):
    """A document YAML allows and perfdag refuses for its shape: a complex key, or nesting past MAX_DEPTH."""

# YAML 1.2 core schema (spec 10.3.2), tag -> (regexp, first characters).
CORE_SCHEMA = {
    "tag:yaml.org,2002:null": (r"null|Null|NULL|~|", list("nN~") + [""]),
    "tag:yaml.org,2002:bool": (r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    "tag:yaml.org,2002:int": (r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    "tag:yaml.org,2002:float": (r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", list("-+0123456789.")),
}


def _core_resolvers() -> dict:
    out: dict = {}
    for tag, (pattern, first) in CORE_SCHEMA.items():
        for ch in first:
            out.setdefault(ch, []).append((tag, re.compile(rf"^(?:{pattern})$")))
    return out


class StrictLoader(yaml.SafeLoader):
    yaml_implicit_resolvers = _core_resolvers()  # replaces YAML 1.1's (sexagesimal, yes/no, dates, <<, =)
    _depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"alias *{event.anchor} is not allowed in perfdag files (aliases can expand without "
                            "bound); write the value out, or share it with extends:", event.start_mark)
        if self._depth >= MAX_DEPTH and self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            raise ShapeError(None, None, f"lists and mappings nested more than {MAX_DEPTH} deep; a perfdag file nests "
                                         "a few levels (section, key, value): is it the right file?",
                             self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                raise ShapeError("while reading a mapping", node.start_mark,
                                 f"a key that is a {kind} (a YAML complex key, `? ...`); keys are names: write the key "
                                 "as plain text", key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"duplicate key {key!r} (first at line {seen[key] + 1}); keep one of them", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):  # PyYAML's reads `017` as octal; YAML 1.2: decimal 17, octal is 0o17
        text = self.construct_scalar(node)
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


class StrictDumper(yaml.SafeDumper):
    """Writes YAML that reads back the same under YAML 1.2 and 1.1: a string that either would take for
    something else (`10:00`, `yes`, `0o17`, `1e3`) is quoted."""


for _ch, _rs in _core_resolvers().items():
    for _tag, _re in _rs:
        StrictDumper.add_implicit_resolver(_tag, _re, [_ch])


def loads(text: str) -> Any:
    return yaml.load(text, Loader=StrictLoader)


def dumps(obj: Any, **kw) -> str:
    return yaml.dump(obj, Dumper=StrictDumper, **kw)


def implicit_tag(text: str) -> str:
    """The tag YAML 1.2's core schema gives a plain scalar ('tag:yaml.org,2002:str' when none matches)."""
    for tag, regexp in StrictLoader.yaml_implicit_resolvers.get(text[:1], []):
        if regexp.match(text):
            return tag
    return "tag:yaml.org,2002:str"


def scalar(text: str) -> bool | int | float | str:
    """A value typed only when the whole of it is a YAML 1.2 boolean or number ('64' -> 64, 'true' ->
    True, '1e-3' -> 0.001); anything else ('1:2', 'enable', '[1]', 'null', '') stays the string."""
    if implicit_tag(text).rpartition(":")[2] in ("bool", "int", "float"):
        return loads(text)
    return text


def describe_error(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    what = "YAML perfdag does not read" if isinstance(e, ShapeError) else "malformed YAML"
    return f"{what}{where}: {getattr(e, 'problem', None) or e}"


def read_text(path: Path, what: str = "YAML file") -> str:
    """A file's text, or InputError naming what is wrong with it (not a regular file, too big, not
    UTF-8, NUL bytes)."""
    data = read_regular(path, what, MAX_YAML_BYTES, "a params, sweep or system file is a few KiB; is it the right file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                         "save it as UTF-8") from None
    if "\x00" in text:
        raise InputError(f"{path}: contains NUL bytes; is it a text file?")
    return text


def load_file(path: Path, what: str = "YAML file") -> Any:
    """The YAML document in `path`; InputError (file, line, fix) when it cannot be read."""
    text = read_text(path, what)
    try:
        return loads(text)
    except yaml.YAMLError as e:
        raise InputError(f"{Path(path).name}: {describe_error(e)}") from None
