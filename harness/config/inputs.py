"""Input files checked before any stage runs: a checkpoint's config.json and tokenizer files, a
dataset's encoding and required fields. Cheap on purpose (small files whole, big ones by their
first bytes or lines): the stages still read everything, and fail with the file and line named.
Every problem is 'field: file: what is wrong; the fix'.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from harness.config.schema import BUILTIN_CHECKPOINTS
from harness.errors import InputError, PerfdagError, shorten
from harness.mlperf import benchmarks
from harness.mlperf.bfcl import env as bfcl_env
from harness.model.datasets import jsonl_lines, jsonl_record
from harness.model.speech import MAX_DURATION_S, check_clip, read_manifest
from harness.untrusted import jsonio
from harness.untrusted.files import not_regular, open_regular

CONFIG_MAX_BYTES = 4 << 20         # a config.json is a few KiB; a bigger one is not a config
HEAD_BYTES = 1 << 20               # how much of a big file (tokenizer.json, a dataset) is looked at
JSONL_HEAD_LINES = 64
POSITIVE_INT_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")
SMALL_TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def checkpoint_problems(checkpoint: str) -> list[str]:
    if checkpoint in BUILTIN_CHECKPOINTS:
        return []
    d = Path(checkpoint)
    field = "model.checkpoint"
    out = _special_files(d, field)
    if out:  # reading one would block (FIFO) or never end (/dev/zero): nothing below may open them
        return out
    cfg = _json_file(d / "config.json", field, out, required=True)
    if cfg is not None:
        arch, mtype = cfg.get("architectures"), cfg.get("model_type")
        if not (isinstance(arch, list) and arch and all(isinstance(a, str) and a for a in arch)) \
                and not (isinstance(mtype, str) and mtype):
            out.append(f"{field}: {d / 'config.json'}: needs 'architectures' (a list of class names) or 'model_type'; "
                       "is it a Hugging Face model's config?")
        for key in POSITIVE_INT_FIELDS:
            v = cfg.get(key)
            if key in cfg and not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
                out.append(f"{field}: {d / 'config.json'}: {key} must be a positive integer (got {shorten(v)})")
    for name in SMALL_TOKENIZER_FILES:
        if (d / name).exists():
            _json_file(d / name, field, out)
    big = d / "tokenizer.json"
    if big.exists():
        head = _head(big, field, out)
        if head is not None and not head.lstrip().startswith(b"{"):
            out.append(f"{field}: {big}: not a JSON tokenizer (does not start with '{{'); replace it with the model's "
                       "tokenizer.json")
    return out


def _special_files(d: Path, field: str) -> list[str]:
    """One line per entry of the checkpoint directory that is not a regular file or a directory, links
    followed (a FIFO, socket or device, a link to one, a broken link); hidden entries are not read.
    A loader that met one would block, read without end, or not see the file and fail far from here."""
    out = []
    for dirpath, dirnames, filenames in os.walk(d):  # links to directories are listed, not walked
        dirnames[:] = [n for n in dirnames if not n.startswith(".")]
        for name in sorted(n for n in filenames if not n.startswith(".")):
            p = Path(dirpath) / name
            via = f" (symlink to {os.readlink(p)})" if p.is_symlink() else ""
            try:
                os.stat(p)
            except OSError as e:
                out.append(f"{field}: {p}{via}: cannot be read ({e.strerror}); restore the model's file")
                continue
            if what := not_regular(p):
                out.append(f"{field}: {p}{via}: is {what}, not a regular file; a checkpoint holds files: "
                           "restore the model's file")
    return out


def _json_file(path: Path, field: str, out: list[str], required: bool = False) -> dict | None:
    if not path.is_file():
        if required or path.exists():
            out.append(f"{field}: {path}: {'not a file' if path.exists() else 'missing'}; a Hugging Face model "
                       f"directory has one")
        return None
    try:
        if path.stat().st_size > CONFIG_MAX_BYTES:
            out.append(f"{field}: {path}: {path.stat().st_size} bytes, too big for a config (at most {CONFIG_MAX_BYTES})")
            return None
        data = path.read_bytes()
    except OSError as e:
        out.append(f"{field}: {path}: cannot be read ({e.strerror}); check its permissions")
        return None
    text = _utf8(data, path, field, out)
    if text is None:
        return None
    try:
        doc = jsonio.loads(text)
    except jsonio.NotJson as e:
        out.append(f"{field}: {path}: {e}; restore the file from the model's original")
        return None
    if not isinstance(doc, dict):
        out.append(f"{field}: {path}: must hold a JSON object, got {type(doc).__name__}")
        return None
    return doc


def _head(path: Path, field: str, out: list[str]) -> bytes | None:
    try:
        with open_regular(path, field) as f:  # a FIFO would block here
            data = f.read(HEAD_BYTES)
    except InputError as e:
        out.append(str(e))
        return None
    except OSError as e:
        out.append(f"{field}: {path}: cannot be read ({e.strerror}); check its permissions")
        return None
    # A multi-byte character may be cut at the end of the head: only what precedes it must decode.
    if _utf8(data, path, field, out, partial=len(data) == HEAD_BYTES) is None:
        return None
    return data


def _utf8(data: bytes, path: Path, field: str, out: list[str], partial: bool = False) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if partial and e.start >= len(data) - 3 and e.reason == "unexpected end of data":
            return data[:e.start].decode("utf-8")
        line = data.count(b"\n", 0, e.start) + 1
        out.append(f"{field}: {path}: not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}, line {line}); "
                   "save it as UTF-8")
        return None


def dataset_problems(fmt: str, path: str | None, max_line_bytes: int | None = None, num_samples: int | None = None,
                     audio_dir: str | None = None) -> list[str]:
    """A JSONL dataset's first lines: UTF-8, one JSON object per line, an input and a reference, no
    line longer than `max_line_bytes` (read no further than that). An audio manifest: every row, and
    the clips of the samples the run takes (opened, not decoded: rate, channels, length)."""
    if fmt == "librispeech" and path:
        return speech_problems(Path(path).expanduser(), num_samples, audio_dir)
    if fmt != "jsonl" or not path:
        return []

    p = Path(path).expanduser()
    out: list[str] = []
    try:
        with open_regular(p, "dataset file") as f:
            for lineno, raw in jsonl_lines(f, f"jsonl {p}", max_line_bytes):
                if lineno > JSONL_HEAD_LINES:
                    break
                jsonl_record(raw, f"jsonl {p} line {lineno}")
    except InputError as e:  # DatasetError, or not a regular file
        out.append(f"dataset.path: {e}")
    except OSError as e:
        out.append(f"dataset.path: {p}: cannot be read ({e.strerror}); check its permissions")
    return out


def speech_problems(path: Path, num_samples: int | None, audio_dir: str | None) -> list[str]:
    try:
        clips = read_manifest(path, audio_dir)
        if num_samples is not None and len(clips) < num_samples:
            return [f"dataset.num_samples: {num_samples}, but {path} has {len(clips)} clips of at most "
                    f"{MAX_DURATION_S:g} s; use at most {len(clips)}"]
        for c in clips[:num_samples]:
            check_clip(c, f"manifest {path} row {c.row}")
    except InputError as e:
        return [f"dataset.path: {e}"]
    return []


def livecodebench_problems(p) -> list[str]:
    """A dataset with LiveCodeBench rows (deepseek-r1, gpt-oss-120b) needs the local problems copy
    (accuracy.livecodebench_problems) holding each row's question_id: one line if not, before any stage."""

    try:
        bench = benchmarks.get(p.loadgen.mlperf_model).name
    except KeyError:
        return []  # benchmark_problems names it
    d = p.dataset
    if d.format == "builtin" or not d.path:
        return []
    # livecodebench imports the scorers and numpy: only a dataset on disk pays for it, never a builtin one
    from harness.mlperf.codeexec import livecodebench

    if bench not in livecodebench.RELEASES:
        return []
    try:
        path = Path(d.path).expanduser()
        st = path.stat()
        rows = _scorer_rows(d.format, str(path.resolve()), st.st_size, st.st_mtime_ns, d.num_samples, d.max_line_bytes)
    except Exception:  # noqa: BLE001 - an unreadable dataset is dataset_problems' (and the stage's) to report
        return []
    try:
        livecodebench.require(bench, rows, p.accuracy.livecodebench_problems)
    except livecodebench.ProblemsError as e:
        return [str(e)]
    return []


@lru_cache(maxsize=4)
def _scorer_rows(fmt: str, path: str, size: int, mtime_ns: int, num_samples: int,
                 max_line_bytes: int | None = None) -> list[dict]:
    """The first num_samples rows' `dataset`, `gt_output` and `ground_truth` (what names a LiveCodeBench
    problem); memoised by the file's (path, size, mtime_ns): params are resolved once per stage."""
    keys = ("dataset", "gt_output", "ground_truth")
    if fmt == "jsonl":

        rows = []
        with open_regular(path, "dataset file") as f:
            for _, raw in jsonl_lines(f, f"jsonl {path}", max_line_bytes):
                if len(rows) >= num_samples:
                    break
                if raw.strip():
                    obj = json.loads(raw)
                    rows.append({k: obj[k] for k in keys if k in obj} if isinstance(obj, dict) else {})
        return rows
    if fmt == "mlperf_pickle":  # trusted by then: dataset.sha256 matched or dataset.allow_pickle
        import pandas as pd

        df = pd.read_pickle(path)
        cols = [k for k in keys if k in df.columns]
        return df[cols].head(num_samples).to_dict("records")
    return []


def bfcl_problems(p) -> list[str]:
    """qwen3.6-27b's accuracy is scored by bfcl-eval in its own environment: one line if there is none
    (or it holds another version), before any stage. Its runs score accuracy beside performance, as
    the benchmark's combined run does, so every run of it needs the environment."""
    try:
        bench = benchmarks.get(p.loadgen.mlperf_model)
    except KeyError:
        return []
    if not bfcl_env.scores(bench):
        return []
    try:
        bfcl_env.checked_python(None, field=f"${bfcl_env.ENV_VAR}")
    except PerfdagError as e:
        return [f"loadgen.mlperf_model: {bench.name}'s accuracy is scored by bfcl-eval: {e}"]
    return []

