"""Triton model configurations: render config.pbtxt from the tensor contract, validate, write repos.

Both Triton backends (torch's Python model, TensorRT-LLM's tensorrtllm) render through
`render_model_config`, so the contract and the quoting exist once. Every config is parsed with
tritonclient's `model_config_pb2` before it is written.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from harness.errors import BuildError
from harness.serving.triton.contract import INPUTS, OUTPUTS, Tensor

NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class ModelConfigError(BuildError, ValueError):
    """A rendered or loaded config.pbtxt is not a valid Triton model config."""


def model_names(model_name: str, instances: int) -> list[str]:
    """One Triton model per engine instance on a server, named like TensorRT-LLM's: `name` alone,
    or `name_0..name_{n-1}`."""
    return [model_name] if instances == 1 else [f"{model_name}_{i}" for i in range(instances)]


def quote(value) -> str:
    """A string in protobuf text format."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dims(dims: Iterable[int]) -> str:
    return "[ " + ", ".join(str(int(d)) for d in dims) + " ]"


def render_model_config(name: str, *, backend: str, max_batch_size: int, decoupled: bool,
                        parameters: Mapping[str, str], max_queue_delay_us: int = 0,
                        max_queue_size: int | None = None, instance_count: int = 1,
                        inputs: Sequence[Tensor] = INPUTS, outputs: Sequence[Tensor] = OUTPUTS) -> str:
    """config.pbtxt text of one model speaking the contract (or the `inputs`/`outputs` given: whisper's
    models), in-flight batching, KIND_CPU instances (TensorRT-LLM places its own GPUs; the torch model runs
    where its `device` parameter says)."""
    if not NAME_RE.match(name or ""):
        raise ModelConfigError(f"invalid model name {name!r}; use letters, digits, '_', '.', '-'")
    if int(max_batch_size) < 1:
        raise ModelConfigError(f"max_batch_size must be >= 1 for in-flight batching, got {max_batch_size}")
    if int(instance_count) < 1:
        raise ModelConfigError(f"instance_count must be >= 1, got {instance_count}")
    lines = [f"name: {quote(name)}", f"backend: {quote(backend)}", f"max_batch_size: {int(max_batch_size)}", "",
             "model_transaction_policy {", f"  decoupled: {'true' if decoupled else 'false'}", "}", "",
             "dynamic_batching {", f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}"]
    if max_queue_size is not None:
        lines.append(f"  default_queue_policy: {{ max_queue_size: {int(max_queue_size)} }}")
    lines += ["}", "", "input ["]
    blocks = []
    for t in inputs:
        b = ["  {", f"    name: {quote(t.name)}", f"    data_type: {t.data_type}", f"    dims: {_dims(t.dims)}"]
        b += ["    reshape: { shape: [ ] }"] if t.scalar else []
        b += ["    allow_ragged_batch: true"] if t.ragged else []
        b += ["    optional: true"] if t.optional else []
        blocks.append("\n".join(b + ["  }"]))
    lines += [",\n".join(blocks), "]", "output ["]
    lines.append(",\n".join("\n".join(["  {", f"    name: {quote(t.name)}", f"    data_type: {t.data_type}",
                                       f"    dims: {_dims(t.dims)}", "  }"]) for t in outputs))
    lines += ["]", "", "instance_group [", "  {", f"    count: {int(instance_count)}", "    kind: KIND_CPU", "  }", "]"]
    for key, value in parameters.items():
        lines += ["parameters: {", f"  key: {quote(key)}", f"  value: {{ string_value: {quote(value)} }}", "}"]
    return "\n".join(lines) + "\n"


def validate_model_config(text: str, *, expected_name: str | None = None) -> list[str]:
    """The problems of a config.pbtxt text (empty: valid): it must parse as a ModelConfig, leave no
    `${...}` placeholder, name its tensors uniquely and (if given) carry `expected_name`."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    problems: list[str] = []
    placeholders = sorted(set(re.findall(r"\$\{[^}]*\}?", text)))
    if placeholders:
        problems.append("unfilled template placeholder(s): " + ", ".join(placeholders))
    cfg = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as exc:
        problems.append(f"not a valid ModelConfig text proto: {exc}")
        return problems
    if not cfg.name:
        problems.append("model config has no name")
    elif expected_name is not None and cfg.name != expected_name:
        problems.append(f"model config name {cfg.name!r} != directory name {expected_name!r}")
    if not cfg.backend and not cfg.platform:
        problems.append("model config sets neither backend nor platform")
    seen: dict[str, str] = {}
    for kind, tensors in (("input", cfg.input), ("output", cfg.output)):
        for t in tensors:
            if not t.name:
                problems.append(f"an {kind} tensor has no name")
                continue
            if t.name in seen:
                problems.append(f"duplicate tensor name {t.name!r} ({seen[t.name]} and {kind})")
            seen[t.name] = kind
            if not t.dims and not (kind == "input" and t.HasField("reshape")):
                problems.append(f"{kind} tensor {t.name!r} has no dims")
    if cfg.max_batch_size < 0:
        problems.append(f"max_batch_size must be >= 0, got {cfg.max_batch_size}")
    return problems


def check_model_config(text: str, *, expected_name: str | None = None, source: str = "config.pbtxt") -> None:
    """Raises ModelConfigError listing every problem of `text` (nothing when valid)."""
    problems = validate_model_config(text, expected_name=expected_name)
    if problems:
        raise ModelConfigError(f"invalid Triton model config {source}:", problems)


def write_model_repo(repo_dir: str | os.PathLike, models: Mapping[str, str], model_py: str | None = None, *,
                     version: int = 1, validate: bool = True) -> Path:
    """Writes `repo_dir/<name>/config.pbtxt` and the version directory `<name>/<version>/`, with
    `model.py` in it when a Python-backend source text is given. Configs are validated first.

    Beside model.py goes an empty *file* named `__pycache__`: the backend's stub ignores
    PYTHONDONTWRITEBYTECODE, and a cached .pyc there would be run instead of the verified source.
    A file of that name means no cache can be written or read (Python falls back to the source),
    and it is checksummed like the rest, so a planted cache directory is flagged."""
    repo = Path(repo_dir)
    if not models:
        raise ModelConfigError("no models to write")
    for name, text in models.items():
        if not NAME_RE.match(name):
            raise ModelConfigError(f"invalid model name {name!r}")
        if validate:
            check_model_config(text, expected_name=name, source=f"{name}/config.pbtxt")
    for name, text in models.items():
        vdir = repo / name / str(int(version))
        vdir.mkdir(parents=True, exist_ok=True)
        (repo / name / "config.pbtxt").write_text(text)
        if model_py is not None:
            (vdir / "model.py").write_text(model_py)
            (vdir / "__pycache__").write_bytes(b"")
    return repo
