"""Resolves the parameter document: defaults -> file (with extends:) -> env flags -> overrides.

Every problem found on the way is collected and reported at once, one line each, as a
ParamsError; nothing is written anywhere by resolution.
"""
from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from ..errors import InputError, shorten
from . import yamlio
from .rules import cross_field_problems
from .schema import SECTIONS, Params

# Environment variables merged into the matching flag dicts, as NVIDIA's harness reads them.
ENV_FLAGS = {
    "TRTLLM_CHECKPOINT_FLAGS": "quantize",
    "TRTLLM_BUILD_FLAGS": "build",
    "TRTLLM_RUNTIME_FLAGS": "runtime",
}
# Flag names NVIDIA's harness uses for what perfdag has a typed field for.
FLAG_ALIASES = {"tensor_parallelism": "tp_size", "pipeline_parallelism": "pp_size",
                "kvcache_free_gpu_mem_frac": "kv_cache_free_gpu_mem_fraction",
                "exclude_input_from_output": "exclude_input_in_output", "calib_max_seq_length": "calib_max_len"}


class ParamsError(InputError):
    """One or more problems in the resolved parameters; str() lists one per line."""

    def __init__(self, problems: list[str]):
        n = len(problems)
        super().__init__(f"invalid parameters ({n} problem{'s' if n != 1 else ''}):", problems)


def parse_scalar(text: str) -> Any:
    """A YAML scalar ('16' -> 16, 'true' -> True, '[1,2]' -> [1, 2]), so CLI values type like the file."""
    try:
        return yamlio.loads(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def parse_env_flags(name: str, text: str) -> tuple[dict[str, Any], list[str]]:
    """`k:v,k:v` -> dict; problems name the variable and the broken item."""
    flags, problems = {}, []
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
            problems.append(f"{name}: item {item!r} is not key:value (expected e.g. 'max_batch_size:64,use_fp8_context_fmha:enable')")
            continue
        flags[key.strip()] = parse_scalar(value.strip())
    return flags, problems


_OVERRIDE_SPLIT = re.compile(r",(?=\s*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\s*=)")


def parse_overrides(text: str) -> tuple[list[tuple[list[str], Any]], list[str]]:
    """'section.key=value,...' -> [(path, value)]. A comma only splits before the next 'a.b='."""
    out, problems = [], []
    if not text or not text.strip():
        return out, problems
    for item in _OVERRIDE_SPLIT.split(text.strip()):
        path, sep, value = item.strip().partition("=")
        parts = path.strip().split(".")
        if not sep or len(parts) < 2 or not all(re.fullmatch(r"[A-Za-z_]\w*", p) for p in parts):
            problems.append(f"--overrides: {item.strip()!r} is not section.key=value (e.g. 'build.max_batch_size=64')")
            continue
        if parts[0] not in SECTIONS:
            problems.append(f"--overrides: unknown section {parts[0]!r} in {item.strip()!r}; sections are {', '.join(SECTIONS)}")
            continue
        out.append((parts, parse_scalar(value.strip())))
    return out, problems


def deep_merge(base: dict, top: Mapping) -> dict:
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_params_file(path: Path, problems: list[str], _chain: tuple[Path, ...] = ()) -> dict:
    """Reads a YAML params file, following `extends:` (relative to the file) with cycle detection."""
    path = Path(path).expanduser().resolve()
    if path in _chain:
        cycle = " -> ".join(p.name for p in (*_chain, path))
        problems.append(f"extends: cycle {cycle}; remove one of the extends: lines")
        return {}
    where = f" (extended by {_chain[-1].name})" if _chain else ""
    if path.is_dir():
        problems.append(f"params file {str(path)!r} is a directory{where}; pass --params-file with a YAML file")
        return {}
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "not found"
        problems.append(f"params file {str(path)!r} {what}{where}; pass --params-file with an existing YAML file")
        return {}
    try:
        doc = yamlio.load_file(path)
    except InputError as e:
        problems.append(str(e))
        return {}
    except OSError as e:
        problems.append(f"{path}: cannot be read ({e.strerror}); check its permissions")
        return {}
    if doc is None:  # an empty file is more likely a truncated copy than a wish for the defaults
        problems.append(f"{path.name}: the params file is empty; give at least one section (or `extends: "
                        "default.yaml`), or leave out --params-file for the defaults")
        return {}
    if not isinstance(doc, dict):
        problems.append(f"{path.name}: top level must be a mapping of sections, got {type(doc).__name__}")
        return {}
    parent = doc.pop("extends", None)
    if parent is None:
        return doc
    if not isinstance(parent, str) or not parent.strip():
        problems.append(f"{path.name}: extends: must be a file name, got {parent!r}")
        return doc
    base = load_params_file(path.parent / str(parent), problems, (*_chain, path))
    return deep_merge(base, doc)


def _set_path(doc: dict, parts: list[str], value: Any) -> None:
    node = doc
    for p in parts[:-1]:
        child = node.get(p)
        if not isinstance(child, dict):
            child = node[p] = {}
        node = child
    node[parts[-1]] = value


def _promote_flags(doc: dict) -> None:
    """Flag-dict keys that name a typed field of their section (or its alias) set that field.

    So TRTLLM_BUILD_FLAGS=max_batch_size:64 means the same as build.max_batch_size=64; the rest
    stay as backend-specific flags.
    """
    for section in ENV_FLAGS.values():
        sec = doc.get(section)
        if not isinstance(sec, dict) or not isinstance(sec.get("flags"), dict):
            continue
        fields = Params.model_fields[section].annotation.model_fields
        for key in list(sec["flags"]):
            name = FLAG_ALIASES.get(key, key)
            if name in fields and name != "flags":
                sec[name] = sec["flags"].pop(key)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_STRING = 4096  # PATH_MAX: no parameter needs more; a longer value is a mistake (or an attack)


def control_character_problems(doc: Any, path: str = "") -> list[str]:
    """Strings (and keys) with control characters: invisible in a terminal, fatal in a path or argv."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            where = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and len(k) > 200:
                out.append(f"{shorten(where, 80)}: a key of {len(k)} characters; keys are short names")
            elif isinstance(k, str) and _CONTROL.search(k):
                out.append(f"{where!r}: key contains a control character; remove it")
            out += control_character_problems(v, where)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += control_character_problems(v, f"{path}[{i}]")
    elif isinstance(doc, str) and len(doc) > MAX_STRING:
        out.append(f"{path}: a string of {len(doc)} characters (at most {MAX_STRING}): {shorten(doc, 60)}; shorten it")
    elif isinstance(doc, str) and _CONTROL.search(doc):
        ch = _CONTROL.search(doc).group()
        out.append(f"{path}: contains the control character {ch!r} (in {shorten(doc)}); remove it")
    return out


def _pydantic_problems(err: ValidationError) -> list[str]:
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            known = _known_keys(e["loc"][:-1])
            what = "section" if len(e["loc"]) == 1 else "key"
            msg = f"unknown {what}; allowed: {', '.join(known)}"
        elif e["type"] != "missing" and not isinstance(e.get("input"), dict):
            msg = f"{msg} (got {shorten(e.get('input'))})"
        out.append(f"{loc or '<document>'}: {msg}")
    return out


def _known_keys(loc: tuple) -> list[str]:
    model = Params
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not hasattr(field.annotation, "model_fields"):
            return []
        model = field.annotation
    return [k for k in model.model_fields]


def resolve(params_file: str | os.PathLike | None = None, overrides: str = "",
            env: Mapping[str, str] | None = None) -> Params:
    """The validated parameter document, or ParamsError listing every problem."""
    env = os.environ if env is None else env
    problems: list[str] = []
    doc: dict = {}
    if params_file:
        doc = load_params_file(Path(params_file), problems)

    for var, section in ENV_FLAGS.items():
        if env.get(var):
            flags, errs = parse_env_flags(var, env[var])
            problems += errs
            sec = doc.setdefault(section, {}) if isinstance(doc.get(section, {}), dict) else None
            if sec is not None:
                sec["flags"] = {**(sec.get("flags") or {}), **flags}

    _promote_flags(doc)  # before overrides, so an override beats an env flag naming the same field

    parsed, errs = parse_overrides(overrides)
    problems += errs
    for parts, value in parsed:
        _set_path(doc, parts, value)
    _promote_flags(doc)
    problems += control_character_problems(doc)
    try:
        params = Params.model_validate(doc)
    except ValidationError as e:
        raise ParamsError(problems + _pydantic_problems(e)) from None
    problems += cross_field_problems(params)
    if problems:
        raise ParamsError(problems)
    return params
