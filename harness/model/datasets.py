"""Benchmark datasets, as token ids (calibration prompts: harness/model/calibration.py).
Over 400 lines because every dataset format (MLCommons pickles, jsonl, synthetic) turns into the same Sample here, and their checks share one reader.

Benchmark datasets load into a list of :class:`Sample` (the LoadGen QSL is indexed by
``Sample.index``, which is the sample's position in the list).  Formats:

``builtin``
    Prompts cut from the shipped corpus (``harness.model.corpus.corpus_lines()``): the first
    6-10 words of each line (6 + i % 5 for line i, so deterministic), tokenised with the
    model's tokenizer.  ``reference_text`` is the rest of the line (the ground-truth
    continuation); the pipeline may replace references with a reference model's outputs.
``mlperf_pickle``
    MLPerf's processed pandas DataFrame pickle (llama2-70b ``open_orca_gpt4_tokenized_llama
    .sampled_24576.pkl`` and friends): ``tok_input`` are the input ids, the reference text is
    ``output`` (llama2-70b; ``ref_output`` / ``gt_output`` are accepted for mixtral-8x7b /
    llama3.1-405b pickles), ``tok_output`` / ``tok_ref_output`` become ``reference_ids``.
``jsonl``
    One JSON object per line: ``input_ids`` (list of ints) or ``input`` (text, tokenised);
    reference ``output`` or ``reference`` (text; or the benchmark's own ``gt_output`` /
    ``ground_truth``, as deepseek-r1 and gpt-oss-120b rows have it) and/or ``reference_ids`` /
    ``output_ids``; optionally ``max_tokens``, the sample's own output length (at most the run's).
``synthetic``
    Prompts of drawn lengths made from the shipped corpus with the model's tokenizer, each with
    its output length (``harness.model.synthetic``); performance only: the references are empty.
``librispeech``
    The reference's LibriSpeech manifest (whisper; ``harness.model.speech``): each kept row's clip,
    checked with soundfile, in ``meta["columns"]["audio"]``, its transcript the reference text; the
    input ids are the reference's decoder prompt, tokenized with the model's tokenizer.

No luigi imports.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from harness.cache.hashing import file_sha256
from harness.errors import InputError
from harness.model.corpus import corpus_lines
from harness.model.messages import messages_text
from harness.model.tokenizer import load_tokenizer
from harness.untrusted import jsonio
from harness.untrusted.files import not_regular, open_regular

FORMATS = ("builtin", "mlperf_pickle", "jsonl", "synthetic", "librispeech")
#: Word counts of builtin prompts cycle through this range (line i gets 6 + i % 5 words).
BUILTIN_MIN_WORDS = 6
BUILTIN_WORD_SPREAD = 5


class DatasetError(InputError):
    """A dataset file is missing, malformed or too small; the message names file and field."""


@dataclass
class Sample:
    """One benchmark sample: what the SUT sends (``input_ids``) and what accuracy scoring
    compares against (``reference_text`` and/or ``reference_ids``)."""

    index: int
    input_ids: list[int]
    reference_text: str | None = None
    reference_ids: list[int] | None = None
    input_text: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    max_new_tokens: int | None = None  # its own output length (synthetic workloads); None: the run's

    @property
    def input_len(self) -> int:
        return len(self.input_ids)


# --------------------------------------------------------------------------------------
# Benchmark datasets
# --------------------------------------------------------------------------------------

def load_dataset(fmt: str, path: str | os.PathLike | None, tokenizer_dir: str | os.PathLike | None,
                 num_samples: int, max_input_len: int | None = None, sha256: str | None = None,
                 max_line_bytes: int | None = None, synthetic=None, max_new_tokens: int | None = None,
                 audio_dir: str | os.PathLike | None = None, prompt: str | None = None) -> list[Sample]:
    """Load the first ``num_samples`` samples of a dataset (see the module docstring).

    ``tokenizer_dir`` is needed for ``builtin`` and for text inputs; prompts longer than
    ``max_input_len`` keep their first ``max_input_len`` tokens (as calibration does; the
    cut is recorded in ``Sample.meta["truncated_from"]``).  Raises :class:`DatasetError`
    naming the file, the row/line and the field for malformed input, when the dataset
    holds fewer than ``num_samples`` samples, when a jsonl line is longer than ``max_line_bytes``
    and when the samples would not fit in the memory this host has available.
    """
    if fmt not in FORMATS:
        raise DatasetError(f"unknown dataset format {fmt!r}; expected one of {', '.join(FORMATS)}")
    num_samples = int(num_samples)
    if num_samples < 1:
        raise DatasetError(f"num_samples must be >= 1, got {num_samples}")
    if max_input_len is not None and int(max_input_len) < 1:
        raise DatasetError(f"max_input_len must be >= 1, got {max_input_len}")
    if fmt == "builtin":
        if path is not None:
            raise DatasetError("the builtin dataset takes no path")
        samples = _load_builtin(tokenizer_dir, num_samples)
    elif fmt == "synthetic":
        samples = _make_synthetic(tokenizer_dir, num_samples, synthetic, max_new_tokens)
    else:
        if path is None:
            raise DatasetError(f"dataset format {fmt} needs a path")
        path = Path(path).expanduser()
        if kind := not_regular(path):
            raise DatasetError(f"dataset file {path}: is {kind}, not a regular file; give the dataset file")
        if not path.is_file():
            raise DatasetError(f"dataset file {path} does not exist")
        if fmt == "mlperf_pickle":
            samples = _load_mlperf_pickle(path, tokenizer_dir, num_samples, sha256)
        elif fmt == "librispeech":
            samples = _load_librispeech(path, tokenizer_dir, num_samples, audio_dir, prompt)
        else:
            samples = _load_jsonl(path, tokenizer_dir, num_samples, max_line_bytes)
    if max_input_len is not None:
        cap = int(max_input_len)
        for s in samples:
            if len(s.input_ids) > cap:
                s.meta["truncated_from"] = len(s.input_ids)
                s.input_ids = s.input_ids[:cap]
    return samples


def _load_librispeech(path: Path, tokenizer_dir, num_samples: int, audio_dir, prompt_text: str | None) -> list[Sample]:
    from harness.model.speech import check_clip, read_manifest

    if not prompt_text:
        raise DatasetError("the librispeech format needs the benchmark's decoder prompt (prompt=...)")
    clips = read_manifest(path, audio_dir)
    if len(clips) < num_samples:
        raise DatasetError(f"manifest {path}: has {len(clips)} clips of at most 30 s, fewer than "
                           f"num_samples={num_samples}")
    prompt = _LazyTokenizer(tokenizer_dir, f"manifest {path}: the decoder prompt").encode(prompt_text)
    if not prompt:
        raise DatasetError(f"manifest {path}: the tokenizer encodes the decoder prompt {prompt_text} to nothing")
    out = []
    for i, clip in enumerate(clips[:num_samples]):
        facts = check_clip(clip, f"manifest {path} row {clip.row}")
        out.append(Sample(index=i, input_ids=list(prompt), reference_text=clip.transcript, input_text=prompt_text,
                          meta={"columns": {"audio": str(clip.audio), "duration": clip.duration,
                                            "frames": facts["frames"]}}))
    return out


def _make_synthetic(tokenizer_dir, num_samples: int, settings, max_new_tokens: int | None) -> list[Sample]:
    if settings is None or max_new_tokens is None or tokenizer_dir is None:
        raise DatasetError("the synthetic dataset needs its settings (dataset.synthetic), max_new_tokens and a tokenizer")
    from harness.model.synthetic import synthetic_samples  # numpy: kept off the path that only checks params

    tok = load_tokenizer(tokenizer_dir)
    return [Sample(index=i, input_ids=ids, reference_text="", max_new_tokens=osl)
            for i, (ids, osl) in enumerate(synthetic_samples(tok, num_samples, settings, int(max_new_tokens)))]


class _LazyTokenizer:
    def __init__(self, tokenizer_dir, why: str):
        self.dir = tokenizer_dir
        self.why = why
        self._tok = None

    def encode(self, text: str) -> list[int]:
        if self._tok is None:
            if self.dir is None:
                raise DatasetError(f"{self.why} needs a tokenizer (tokenizer_dir is None)")
            self._tok = load_tokenizer(self.dir)
        return list(self._tok.encode(text, add_special_tokens=False))


#: Passes over the corpus: pass p cuts line i after 6 + (i % 5 + p) % 31 words (at most all but
#: its last word), and pass 0 is the original one-prompt-per-line set. 31 passes over 800 lines
#: give 24800 samples, enough for MLPerf's 24576-sample llama2 runs; short lines and lines that
#: share their start repeat prompts (about 5,200 distinct), which LoadGen does not mind.
BUILTIN_PASSES = 31


def builtin_capacity() -> int:
    """How many samples the builtin dataset holds (checked with the params, before any stage)."""
    return len(corpus_lines()) * BUILTIN_PASSES


def builtin_prompt_split(line: str, i: int, rnd: int = 0) -> tuple[str, str]:
    """(prompt, continuation) of corpus line ``i`` in pass ``rnd``: the first
    6 + (i % 5 + rnd) % 31 words (6 + i % 5 in pass 0), and the rest."""
    words = line.split()
    k = min(len(words) - 1, BUILTIN_MIN_WORDS + (i % BUILTIN_WORD_SPREAD + rnd) % BUILTIN_PASSES)
    return " ".join(words[:k]), " ".join(words[k:])


def _load_builtin(tokenizer_dir, num_samples: int) -> list[Sample]:
    lines = corpus_lines()
    if num_samples > len(lines) * BUILTIN_PASSES:
        raise DatasetError(f"dataset.num_samples: {num_samples} exceeds the {len(lines) * BUILTIN_PASSES} builtin "
                           f"prompts ({BUILTIN_PASSES} per shipped corpus line); use at most "
                           f"{len(lines) * BUILTIN_PASSES}")
    tok = _LazyTokenizer(tokenizer_dir, "the builtin dataset")
    out = []
    for i in range(num_samples):
        line, rnd = i % len(lines), i // len(lines)
        prompt, rest = builtin_prompt_split(lines[line], line, rnd)
        out.append(Sample(index=i, input_ids=tok.encode(prompt), reference_text=rest, input_text=prompt))
    return out


def _as_ids(value, where: str, field_name: str) -> list[int]:
    """Validate a list of token ids (list/tuple/numpy array of non-negative ints)."""
    try:
        import numpy as np

        if isinstance(value, np.ndarray):
            if value.ndim != 1 or not np.issubdtype(value.dtype, np.integer):
                raise DatasetError(f"{where}: field {field_name!r} must be a 1-D integer array, "
                                   f"got shape {value.shape} dtype {value.dtype}")
            value = value.tolist()
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(value, (list, tuple)):
        raise DatasetError(f"{where}: field {field_name!r} must be a list of token ids, got {type(value).__name__}")
    if not value:
        raise DatasetError(f"{where}: field {field_name!r} is empty")
    ids = []
    for j, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, int) and not _is_np_int(x):
            raise DatasetError(f"{where}: field {field_name!r}[{j}] is {x!r}, not an integer token id")
        x = int(x)
        if x < 0 or x > 2**31 - 1:
            raise DatasetError(f"{where}: field {field_name!r}[{j}] = {x} is not a valid INT32 token id")
        ids.append(x)
    return ids


def _is_np_int(x) -> bool:
    try:
        import numpy as np

        return isinstance(x, np.integer)
    except ImportError:  # pragma: no cover
        return False


def _load_mlperf_pickle(path: Path, tokenizer_dir, num_samples: int, sha256: str | None = None) -> list[Sample]:
    import pandas as pd

    if sha256:  # checked again right before unpickling: the file may have changed since validation
        if file_sha256(path) != sha256.lower():
            raise DatasetError(f"dataset.sha256: {path} no longer matches {sha256}; refusing to unpickle it")
    try:
        df = pd.read_pickle(path)
    except Exception as exc:
        raise DatasetError(f"mlperf_pickle {path}: cannot read as a pandas pickle: {type(exc).__name__}: {exc}") from exc
    if not isinstance(df, pd.DataFrame):
        raise DatasetError(f"mlperf_pickle {path}: expected a pandas DataFrame, got {type(df).__name__}")
    cols = list(map(str, df.columns))
    if "tok_input" not in df.columns:
        raise DatasetError(f"mlperf_pickle {path}: missing column 'tok_input' (the input token ids); "
                           f"columns are {cols}")
    ref_col = next((c for c in ("output", "ref_output", "gt_output") if c in df.columns), None)
    if ref_col is None:
        raise DatasetError(f"mlperf_pickle {path}: missing column 'output' (the reference text); columns are {cols}")
    ref_ids_col = next((c for c in ("tok_output", "tok_ref_output") if c in df.columns), None)
    if len(df) < num_samples:
        raise DatasetError(f"mlperf_pickle {path}: has {len(df)} rows, fewer than num_samples={num_samples}")
    out = []
    for i in range(num_samples):
        row = df.iloc[i]
        where = f"mlperf_pickle {path} row {i}"
        ref = row[ref_col]
        if not isinstance(ref, str):
            raise DatasetError(f"{where}: field {ref_col!r} must be text, got {type(ref).__name__}")
        ref_ids = None
        if ref_ids_col is not None and _present(row[ref_ids_col]):
            ref_ids = _as_ids(row[ref_ids_col], where, ref_ids_col)
        text = row["input"] if "input" in df.columns and isinstance(row["input"], str) else None
        extra = {c: _plain(row[c]) for c in _PICKLE_SCORER_COLUMNS if c in df.columns}
        out.append(Sample(index=i, input_ids=_as_ids(row["tok_input"], where, "tok_input"),
                          reference_text=ref, reference_ids=ref_ids, input_text=text,
                          meta={"columns": extra} if extra else {}))
    return out


#: Columns of MLPerf's pickles that a benchmark's scorer reads besides the reference text.
_PICKLE_SCORER_COLUMNS = ("dataset", "id", "metric", "gt_output", "output", "ref_output", "question",
                          "ground_truth", "test", "tests", "entry_point", "language")


def _plain(value):
    """A pickle cell as JSON-able Python (numpy scalars and arrays become numbers and lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _present(value) -> bool:
    if value is None:
        return False
    try:
        import math

        return not (isinstance(value, float) and math.isnan(value))
    except TypeError:  # pragma: no cover
        return True


#: Fields a jsonl line has for perfdag itself; any other field is one of the benchmark's own columns
#: (mixtral's `dataset` and `id`, 405b's `metric`, MBXP's tests ...), kept for its scorer.
_JSONL_OWN_FIELDS = frozenset({"input_ids", "input", "output", "reference", "reference_ids", "output_ids",
                               "max_tokens"})


def _max_tokens(obj: dict, where: str) -> int | None:
    v = obj.get("max_tokens")
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise DatasetError(f"{where}: field 'max_tokens' must be a whole number >= 1 (the sample's output length)")
    return v


def jsonl_lines(f, where: str, max_line_bytes: int | None) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of an open jsonl file; no line is read whole when it is longer than
    ``max_line_bytes`` (dataset.max_line_bytes): DatasetError names it after reading that much."""
    lineno = 0
    while raw := (f.readline(max_line_bytes + 1) if max_line_bytes else f.readline()):
        lineno += 1
        if max_line_bytes and len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            raise DatasetError(f"{where} line {lineno}: longer than dataset.max_line_bytes={max_line_bytes} bytes; "
                               "is it the dataset file? (raise dataset.max_line_bytes for samples that long)")
        yield lineno, raw


#: Memory a loaded sample takes per byte of its jsonl line, at most: a token id written as ~6 bytes
#: of JSON is a Python int in a list (~36 bytes); text tokenised at ~4 bytes a token likewise.
MEMORY_PER_LINE_BYTE = 10


def _available_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def jsonl_record(raw: bytes, where: str) -> dict | None:
    """One JSONL line checked (UTF-8, a JSON object, an input, a reference), None when blank.
    Also what validation runs on a dataset's first lines before any stage."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                           "save the file as UTF-8") from None
    if not line.strip():
        return None
    try:
        obj = jsonio.loads(line)
    except jsonio.NotJson as exc:
        raise DatasetError(f"{where}: {str(exc).replace(' at line 1,', ' at')}; a sample is one JSON object of flat "
                           "fields per line") from None
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "input_ids" in obj:
        _as_ids(obj["input_ids"], where, "input_ids")
    elif "input" in obj:
        if not isinstance(obj["input"], str) or not obj["input"]:
            raise DatasetError(f"{where}: field 'input' must be non-empty text")
    elif "messages" in obj:
        if not messages_text(obj["messages"]):
            raise DatasetError(f"{where}: field 'messages' must be a list of chat messages ({{\"role\", \"content\"}}) "
                               "with some text")
    else:
        raise DatasetError(f"{where}: missing field 'input' (text), 'input_ids' (token ids) or 'messages' (a chat)")
    found = False
    for key in ("output", "reference", "gt_output", "ground_truth"):
        if key in obj and obj[key] is not None:
            if not isinstance(obj[key], str):
                raise DatasetError(f"{where}: field {key!r} must be text, got {type(obj[key]).__name__}")
            found = True
            break
    for key in ("reference_ids", "output_ids"):
        if key in obj and obj[key] is not None:
            _as_ids(obj[key], where, key)
            found = True
            break
    if not found:
        raise DatasetError(f"{where}: missing reference: field 'output', 'reference', 'gt_output' or 'ground_truth' (text), "
                           "or 'reference_ids' (token ids)")
    return obj


def _load_jsonl(path: Path, tokenizer_dir, num_samples: int, max_line_bytes: int | None = None) -> list[Sample]:
    tok = _LazyTokenizer(tokenizer_dir, f"jsonl {path}: text field 'input'")
    out: list[Sample] = []
    # Refused before reading beyond what fits, not killed by the kernel (or aborted by a native
    # library failing to allocate) halfway: a clear error the run records.
    available, used = _available_memory(), 0
    with open_regular(path, "dataset file") as f:  # decoded per line, so a bad byte is reported with its line
        for lineno, raw in jsonl_lines(f, f"jsonl {path}", max_line_bytes):
            if len(out) >= num_samples:
                break
            used += len(raw)
            if used * MEMORY_PER_LINE_BYTE > available:
                raise DatasetError(
                    f"jsonl {path}: its first {lineno} lines hold {used} bytes; as samples in memory they need "
                    f"about {used * MEMORY_PER_LINE_BYTE / 2**20:.1f} MiB, more than the {available / 2**20:.1f} MiB "
                    "available; lower dataset.num_samples or free memory")
            where = f"jsonl {path} line {lineno}"
            obj = jsonl_record(raw, where)
            if obj is None:
                continue
            if "input_ids" in obj:
                ids = _as_ids(obj["input_ids"], where, "input_ids")
                text = obj.get("input") if isinstance(obj.get("input"), str) else None
            else:
                # A chat row without `input`: its messages' text stands for the prompt in token counts
                # (the request sends the messages themselves)
                text = obj["input"] if "input" in obj else messages_text(obj["messages"])
                ids = tok.encode(text)
                if not ids:
                    raise DatasetError(f"{where}: field 'input' tokenises to no tokens")
            ref_text = next((obj[k] for k in ("output", "reference", "gt_output", "ground_truth") if obj.get(k) is not None), None)
            ref_ids = next((_as_ids(obj[k], where, k) for k in ("reference_ids", "output_ids")
                            if obj.get(k) is not None), None)
            extra = {k: v for k, v in obj.items() if k not in _JSONL_OWN_FIELDS}
            out.append(Sample(index=len(out), input_ids=ids, reference_text=ref_text, reference_ids=ref_ids,
                              input_text=text, meta={"columns": extra} if extra else {},
                              max_new_tokens=_max_tokens(obj, where)))
    if len(out) < num_samples:
        raise DatasetError(f"jsonl {path}: has {len(out)} samples, fewer than num_samples={num_samples}")
    return out


def write_jsonl(samples: Sequence[Sample], path: str | os.PathLike) -> Path:
    """Write samples as a ``jsonl`` dataset (input_ids + reference text/ids) that
    :func:`load_dataset` reads back unchanged."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for s in samples:
            obj: dict[str, Any] = {"input_ids": list(map(int, s.input_ids))}
            if s.input_text is not None:
                obj["input"] = s.input_text
            if s.reference_text is not None:
                obj["output"] = s.reference_text
            if s.reference_ids is not None:
                obj["reference_ids"] = list(map(int, s.reference_ids))
            if s.max_new_tokens is not None:
                obj["max_tokens"] = int(s.max_new_tokens)
            for k, v in s.meta.get("columns", {}).items():
                obj.setdefault(k, v)
            f.write(json.dumps(obj) + "\n")
    return path
