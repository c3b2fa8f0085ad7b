"""What MLCommons' LLM evaluation scripts share: reading LoadGen's accuracy log, decoding,
post-processing and ROUGE.

Each script (``language/<benchmark>/evaluate-accuracy.py`` or ``evaluation.py`` of
mlcommons/inference) walks ``mlperf_log_accuracy.json`` in order, keeps the *first* entry of
each ``qsl_idx`` (later ones are skipped before their ``data`` is decoded), reads ``data`` as
hex of the SUT's token ids (``--dtype int32`` in every documented invocation; the scripts'
own default is int64), decodes with ``skip_special_tokens=True``, strips predictions and
references and puts each sentence on its own line (``nltk.sent_tokenize``) for ROUGE-Lsum.

Deliberate deviations, shared by every scorer:

- Sentences are split by a regex (:func:`split_sentences`), not by ``nltk.sent_tokenize``,
  which downloads the ``punkt`` model at run time.  ROUGE-1/2/L ignore newlines, so this
  can change only ``rougeLsum``, lengths counted after post-processing (``gen_len``) and
  llama3.1-405b's ``qa_em`` substring test, and only where punkt splits differently (after
  abbreviations such as "Mr.", or at a quote or bracket following the full stop).
- ``evaluate.load("rouge")`` (which fetches the metric's code at run time) is replaced by
  ``rouge_score`` called the way that metric calls it: ``RougeScorer(types,
  use_stemmer=True).score(reference, prediction)`` per sample, F-measure kept.
- ``dtype="float"`` (accepted by some scripts, meaningless for token ids) is refused.
- A malformed log, an unknown ``qsl_idx`` or a missing column raises
  :class:`ScoringInputError` with one line naming the entry or column, where the scripts
  stop with a traceback.
- Row i of the dataset is ``qsl_idx`` i by position; the llama2 and 405b scripts index by
  label, which is the same for MLPerf's pickles (their index is 0..n-1).
- The scripts load the tokenizer with ``use_fast=False``; here the caller passes the
  tokenizer object, which should decode as that slow tokenizer does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from harness.errors import InputError

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
#: numpy dtypes of the logged token ids, by the name the scripts' ``--dtype`` takes.
DTYPES = {"int32": np.int32, "int64": np.int64}
#: What every documented ``evaluate-accuracy.py`` invocation passes (the SUTs log int32).
DEFAULT_DTYPE = "int32"


class ScoringInputError(InputError):
    """A log entry or dataset the scorer cannot read; the message names the entry or column."""


class LogEntryError(ScoringInputError):
    """An entry of mlperf_log_accuracy.json is malformed (no qsl_idx/data, non-hex, bad size)."""


class DatasetColumnError(ScoringInputError):
    """The dataset lacks a column the benchmark's scorer reads, or a value there is unusable."""


# --------------------------------------------------------------------------------------
# The accuracy log
# --------------------------------------------------------------------------------------

@dataclass
class LogSamples:
    """The log's first entry per ``qsl_idx``, in log order, decoded to token ids (numpy arrays:
    a reasoning log holds thousands of ids per entry, 4 bytes each here, ~30 as Python ints)."""

    qsl_idxs: list[int]
    token_ids: list[np.ndarray]
    entries: int  # all entries, duplicates included (mixtral's gen_num counts these)

    @property
    def gen_tok_len(self) -> int:
        return sum(len(t) for t in self.token_ids)


def resolve_dtype(dtype) -> np.dtype:
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ScoringInputError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        return np.dtype(DTYPES[dtype])
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8)):
        raise ScoringInputError(f"dtype {dt.name} is not supported; use one of {', '.join(DTYPES)}")
    return dt


def first_entries(log_entries, num_rows: int, dtype=DEFAULT_DTYPE,
                  log_name: str = "mlperf_log_accuracy.json") -> LogSamples:
    """Decode the first entry of each ``qsl_idx`` as the scripts do; later repeats only count
    in :attr:`LogSamples.entries` (their ``data`` is never decoded, as in the scripts)."""
    dt = resolve_dtype(dtype)
    if not isinstance(log_entries, list):
        raise LogEntryError(f"{log_name}: expected a JSON list of entries, got {type(log_entries).__name__}")
    seen: set[int] = set()
    idxs: list[int] = []
    ids: list[list[int]] = []
    for n, e in enumerate(log_entries):
        where = f"{log_name} entry {n}"
        if not isinstance(e, dict):
            raise LogEntryError(f"{where}: expected an object with 'qsl_idx' and 'data', got {type(e).__name__}")
        for key in ("qsl_idx", "data"):
            if key not in e:
                raise LogEntryError(f"{where}: missing field {key!r}")
        q = e["qsl_idx"]
        if isinstance(q, bool) or not isinstance(q, (int, np.integer)):
            raise LogEntryError(f"{where}: field 'qsl_idx' is {q!r}, not an integer")
        q = int(q)
        if not 0 <= q < num_rows:
            raise LogEntryError(f"{where}: field 'qsl_idx' = {q} is outside the dataset's {num_rows} rows")
        if q in seen:
            continue
        seen.add(q)
        idxs.append(q)
        ids.append(decode_hex_ids(e["data"], dt, f"{where} (qsl_idx {q})"))
    return LogSamples(idxs, ids, len(log_entries))


def all_entries(log_entries, num_rows: int, dtype=DEFAULT_DTYPE,
                log_name: str = "mlperf_log_accuracy.json") -> LogSamples:
    """Every entry in log order, repeats of a ``qsl_idx`` included (gpt-oss-120b's script scores
    them all). Checked as :func:`first_entries` checks them."""
    dt = resolve_dtype(dtype)
    first_entries(log_entries, num_rows, dt, log_name)  # validates the shape of every entry
    idxs = [int(e["qsl_idx"]) for e in log_entries]
    ids = [decode_hex_ids(e["data"], dt, f"{log_name} entry {n} (qsl_idx {q})")
           for n, (e, q) in enumerate(zip(log_entries, idxs))]
    return LogSamples(idxs, ids, len(log_entries))


@dataclass
class LogTexts:
    """Every log entry as text (a chat answer's UTF-8 content, as the qwen3-vl reference logs it)."""

    qsl_idxs: list[int]
    texts: list[str]
    entries: int


def text_entries(log_entries, num_rows: int, log_name: str = "mlperf_log_accuracy.json") -> LogTexts:
    """Every entry in log order, its hex `data` decoded as UTF-8 (entries checked as first_entries does)."""
    first_entries(log_entries, num_rows, np.uint8, log_name)
    idxs, texts = [], []
    for n, e in enumerate(log_entries):
        q = int(e["qsl_idx"])
        try:
            texts.append(bytes.fromhex(e["data"]).decode("utf-8"))
        except UnicodeDecodeError:
            raise LogEntryError(f"{log_name} entry {n} (qsl_idx {q}): field 'data' is not UTF-8 text") from None
        idxs.append(q)
    return LogTexts(idxs, texts, len(log_entries))


def decode_hex_ids(data, dtype, where: str) -> np.ndarray:
    """LoadGen's hex ``data`` as token ids (``np.frombuffer(bytes.fromhex(data), dtype)``)."""
    if not isinstance(data, str):
        raise LogEntryError(f"{where}: field 'data' must be a hex string, got {type(data).__name__}")
    try:
        raw = bytes.fromhex(data)
    except ValueError:
        raise LogEntryError(f"{where}: field 'data' is not hex") from None
    dt = np.dtype(dtype)
    if len(raw) % dt.itemsize:
        raise LogEntryError(f"{where}: field 'data' holds {len(raw)} bytes, not a whole number of "
                            f"{dt.name} token ids (is --dtype right?)")
    return np.frombuffer(raw, dtype=dt)


# --------------------------------------------------------------------------------------
# The dataset
# --------------------------------------------------------------------------------------

def check_columns(dataset, columns: Iterable[str], benchmark: str, dataset_name: str = "dataset") -> None:
    cols = [str(c) for c in getattr(dataset, "columns", [])]
    if not hasattr(dataset, "iloc"):
        raise DatasetColumnError(f"{dataset_name}: expected a pandas DataFrame, got {type(dataset).__name__}")
    missing = [c for c in columns if c not in cols]
    if missing:
        raise DatasetColumnError(f"{dataset_name}: {benchmark} needs column(s) {', '.join(map(repr, missing))}; "
                                 f"columns are {cols}")


def column_values(dataset, column: str, idxs: Sequence[int]) -> list:
    """``dataset[column]`` at rows ``idxs`` (row i is qsl_idx i, by position)."""
    col = dataset[column]
    return [col.iloc[i] for i in idxs]


def text_values(dataset, column: str, idxs: Sequence[int], dataset_name: str = "dataset") -> list[str]:
    out = column_values(dataset, column, idxs)
    for i, v in zip(idxs, out):
        if not isinstance(v, str):
            raise DatasetColumnError(f"{dataset_name} row {i}: column {column!r} must be text, "
                                     f"got {type(v).__name__}")
    return out


# --------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------

#: Entries decoded per batch_decode call (it decodes each on its own, so only peak memory changes).
DECODE_CHUNK = 256


def as_list(ids) -> list[int]:
    return ids.tolist() if hasattr(ids, "tolist") else list(ids)


def decode(tokenizer, token_ids: Sequence[Sequence[int]]) -> list[str]:
    """``tokenizer.batch_decode(ids, skip_special_tokens=True)``, as every script decodes."""
    if not len(token_ids):
        return []
    out: list[str] = []
    for i in range(0, len(token_ids), DECODE_CHUNK):
        chunk = [as_list(t) for t in token_ids[i:i + DECODE_CHUNK]]
        out.extend(tokenizer.batch_decode(chunk, skip_special_tokens=True))
    return out


_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=\S)")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: a break after . ! or ? followed by whitespace (stands in for
    ``nltk.sent_tokenize``, which needs a download)."""
    return [s for s in _SENT_RE.split(text.strip()) if s]


def sentences_newline(text: str) -> str:
    return "\n".join(split_sentences(text))


def postprocess_text(preds: Sequence[str], targets: Sequence[str]) -> tuple[list[str], list[str]]:
    """The scripts' ``postprocess_text``: strip, then one sentence per line."""
    return ([sentences_newline(p.strip()) for p in preds], [sentences_newline(t.strip()) for t in targets])


# --------------------------------------------------------------------------------------
# ROUGE
# --------------------------------------------------------------------------------------

def rouge_per_sample(predictions: Sequence[str], references: Sequence[str],
                     rouge_types: Iterable[str] = ROUGE_TYPES) -> dict[str, list[float]]:
    """Per-sample ROUGE F-measures (0..1), what ``evaluate``'s rouge returns with
    ``use_stemmer=True, use_aggregator=False`` (texts are taken as given)."""
    from rouge_score import rouge_scorer

    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    types = list(rouge_types)
    scorer = rouge_scorer.RougeScorer(types, use_stemmer=True)
    out: dict[str, list[float]] = {t: [] for t in types}
    for pred, ref in zip(predictions, references):
        s = scorer.score(ref, pred)  # score(target, prediction)
        for t in types:
            out[t].append(s[t].fmeasure)
    return out


def mean_percent(values: Sequence[float], ndigits: int = 4) -> float:
    """``round(np.mean(v) * 100, 4)``, the scripts' aggregation, as a Python float."""
    return float(round(np.mean(values) * 100, ndigits))


def rouge_means(predictions: Sequence[str], references: Sequence[str],
                rouge_types: Iterable[str] = ROUGE_TYPES) -> dict[str, float]:
    """Mean F-measure x 100 rounded to 4 decimals per ROUGE type (post-processed texts in)."""
    per = rouge_per_sample(predictions, references, rouge_types)
    return {t: mean_percent(v) for t, v in per.items()}


def rouge_with_rows(qsl_idxs: Sequence[int], predictions: Sequence[str], references: Sequence[str]
                    ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
    """:func:`rouge_means`, and each row's F-measures x 100 by qsl_idx (for ``_detail``)."""
    per = rouge_per_sample(predictions, references)
    rows = {int(q): {t: round(per[t][n] * 100, 4) for t in per} for n, q in enumerate(qsl_idxs)}
    return {t: mean_percent(v) for t, v in per.items()}, rows


def tokens_per_sample(gen_tok_len: int, gen_num: int) -> float:
    return round(gen_tok_len / gen_num, 1)


#: The printed result dict's keys, in the order MLPerf's llama2 evaluation prints them (exact_match: the
#: reasoning benchmarks' `{'exact_match': .., 'tokens_per_sample': ..}`).
RESULT_KEYS = ("exact_match", "rouge1", "rouge2", "rougeL", "rougeLsum", "gsm8k", "mbxp", "gen_len", "gen_num",
               "gen_tok_len", "tokens_per_sample")


def _plain(v):
    """A JSON or numpy number as a plain int or float (their repr is what the checker parses)."""
    import numbers

    return int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else float(v)


def accuracy_txt(scores: dict) -> str:
    """accuracy.txt as the LLM scripts make it: 'Results' and the printed result dict, a Python repr of
    plain numbers (`'rouge1': 44.4`, not `np.float64(44.4)`: the checker's patterns read that repr).
    The submission adds the log's `hash=` line, as MLCommons' truncation tool does."""
    d = {k: _plain(scores[k]) for k in RESULT_KEYS if scores.get(k) is not None}
    return f"\nResults\n\n{d!r}\n"

