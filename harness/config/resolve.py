"""Resolves the parameter document: defaults -> file (with extends:) -> env flags -> overrides.

Every problem found on the way is collected and reported at once, one line each, as a
ParamsError; nothing is written anywhere by resolution.
"""
from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml
from pydantic import ValidationError

from harness.config.names import non_ascii_problem
from harness.config.rules import cross_field_problems
from harness.config.schema import SECTIONS, Params
from harness.errors import InputError, shorten
from harness.untrusted import yamlio

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
    """A YAML 1.2 value ('16' -> 16, 'true' -> True, '[1,2]' -> [1, 2], '10:00' -> '10:00'), so CLI values
    type like the file; text that is not YAML stays the text. InputError for YAML whose shape perfdag
    refuses (a complex key, nesting past yamlio.MAX_DEPTH)."""
    try:
        return yamlio.loads(text) if text.strip() else ""
    except yamlio.ShapeError as e:
        raise InputError(f"at column {e.problem_mark.column + 1}: {e.problem}") from None
    except yaml.YAMLError:
        return text


def parse_env_flags(name: str, text: str) -> tuple[dict[str, Any], list[str]]:
    """`k:v,k:v` -> dict; problems name the variable and the broken item. A value is a number or a
    boolean only when the whole of it is one (`64`, `0.9`, `true`): `1:2` stays the text '1:2', which a
    number field then refuses, never the YAML 1.1 sexagesimal 62."""
    flags, problems = {}, []
    for item, key, sep, value in _flag_items(text):
        if sep and (why := non_ascii_problem(key, _flag_names(ENV_FLAGS[name]))):
            problems.append(f"{name}: key {key!r} {why}")
            continue
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            problems.append(f"{name}: item {item!r} is not key:value (expected e.g. 'max_batch_size:64,use_fp8_context_fmha:enable')")
            continue
        flags[key] = yamlio.scalar(value)
    return flags, problems


def _flag_items(text: str):
    """(item, key, ':', value) of each `k:v` item, stripped; sep '' where the item has no colon."""
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition(":")
        yield item, key.strip(), sep, value.strip()


def _flag_names(section: str) -> list[str]:
    return [*Params.model_fields[section].annotation.model_fields, *FLAG_ALIASES]


# Names may start with any letter here, so a look-alike key still splits off and is named as one.
_OVERRIDE_SPLIT = re.compile(r",(?=\s*[^\W\d]\w*(?:\.[^\W\d]\w*)+\s*=)")


def parse_overrides(text: str) -> tuple[list[tuple[list[str], Any]], list[str]]:
    """'section.key=value,...' -> [(path, value)]. A comma only splits before the next 'a.b='."""
    out, problems = [], []
    if not text or not text.strip():
        return out, problems
    for item in _OVERRIDE_SPLIT.split(text.strip()):
        path, sep, value = item.strip().partition("=")
        parts = path.strip().split(".")
        if sep and not path.isascii():  # a look-alike letter, a full-width one, a zero-width space
            i = next(i for i, p in enumerate(parts) if not p.isascii())
            odd, known = parts[i].strip(), SECTIONS if i == 0 else _known_keys(tuple(p.strip() for p in parts[:i]))
            problems.append(f"--overrides: {odd!r} in {item.strip()!r} {non_ascii_problem(odd, known)}")
            continue
        if not sep or len(parts) < 2 or not all(re.fullmatch(r"[A-Za-z_]\w*", p) for p in parts):
            problems.append(f"--overrides: {item.strip()!r} is not section.key=value (e.g. 'build.max_batch_size=64')")
            continue
        if parts[0] not in SECTIONS:
            problems.append(f"--overrides: unknown section {parts[0]!r} in {item.strip()!r}; sections are "
                            f"{', '.join(SECTIONS)}")
            continue
        try:
            out.append((parts, parse_scalar(value.strip())))
        except InputError as e:
            problems.append(f"--overrides: {path.strip()}={shorten(value.strip(), 40)}: {e}")
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
    if not path.exists():
        problems.append(f"params file {str(path)!r} not found{where}; pass --params-file with an existing YAML file")
        return {}
    try:  # a FIFO, a device or a file over yamlio.MAX_YAML_BYTES is refused by name, never read
        doc = yamlio.load_file(path, f"params file{where}")
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


def _promote_flags(doc: dict, origins: dict[str, str]) -> None:
    """Flag-dict keys that name a typed field of their section (or its alias) set that field.

    So TRTLLM_BUILD_FLAGS=max_batch_size:64 means the same as build.max_batch_size=64; the rest
    stay as backend-specific flags. `origins` (dotted path -> where the value came from) follows.
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
                if f"{section}.flags.{key}" in origins:
                    origins[f"{section}.{name}"] = origins.pop(f"{section}.flags.{key}")
                else:
                    origins.pop(f"{section}.{name}", None)


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


def _pydantic_problems(err: ValidationError, origins: dict[str, str]) -> list[str]:
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            known = _known_keys(e["loc"][:-1])
            what = "section" if len(e["loc"]) == 1 else "key"
            odd = non_ascii_problem(str(e["loc"][-1]), known)
            msg = f"unknown {what}; " + (f"it {odd}" if odd else f"allowed: {', '.join(known)}")
        elif e["type"] != "missing" and not isinstance(e.get("input"), dict):
            msg = f"{msg} (got {shorten(e.get('input'))}{_yaml11_hint(e)})"
        out.append(f"{origins[loc]} sets {loc}: {msg}" if loc in origins else f"{loc or '<document>'}: {msg}")
    return out


def _yaml11_hint(e: dict) -> str:
    """For a string refused by a number or boolean field that YAML 1.1 would have typed ('10:00', 'yes')."""
    value = e.get("input")
    if not isinstance(value, str) or not e["type"].startswith(("int_", "float_", "bool_")) or len(value) > 100:
        return ""
    try:
        old = yaml.safe_load(value)
    except yaml.YAMLError:
        return ""
    if isinstance(old, str) or not isinstance(old, (bool, int, float)):
        return ""
    want = "true or false" if e["type"].startswith("bool_") else "a plain number"
    return f", text in YAML 1.2 where YAML 1.1 read {old!r}; write {want}"


def _known_keys(loc: tuple) -> list[str]:
    model = Params
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not hasattr(field.annotation, "model_fields"):
            return []
        model = field.annotation
    return [k for k in model.model_fields]


def resolve(params_file: str | os.PathLike | None = None, overrides: str = "",
            env: Mapping[str, str] | None = None,
            checks: Sequence[Callable[[Params], list[str]]] = ()) -> Params:
    """The validated parameter document, or ParamsError listing every problem: the schema's, the
    backend-free rules' and those of `checks` (harness.backends.resolve adds the chosen backend's)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    doc: dict = {}
    origins: dict[str, str] = {}  # dotted path -> the environment variable item that set it
    if params_file:
        doc = load_params_file(Path(params_file), problems)

    for var, section in ENV_FLAGS.items():
        if env.get(var):
            flags, errs = parse_env_flags(var, env[var])
            problems += errs
            sec = doc.setdefault(section, {}) if isinstance(doc.get(section, {}), dict) else None
            if sec is not None:
                sec["flags"] = {**(sec.get("flags") or {}), **flags}
                origins.update({f"{section}.flags.{k}": f"{var} item {k}:{v}" for _, k, _, v in _flag_items(env[var])
                                if k in flags})

    _promote_flags(doc, origins)  # before overrides, so an override beats an env flag naming the same field

    parsed, errs = parse_overrides(overrides)
    problems += errs
    for parts, value in parsed:
        _set_path(doc, parts, value)
        origins.pop(".".join(parts), None)
    _promote_flags(doc, origins)
    problems += control_character_problems(doc)
    try:
        params = Params.model_validate(doc)
    except ValidationError as e:
        raise ParamsError(problems + _pydantic_problems(e, origins)) from None
    problems += cross_field_problems(params)
    for check in checks:
        problems += check(params)
    if problems:
        raise ParamsError(problems)
    return params
