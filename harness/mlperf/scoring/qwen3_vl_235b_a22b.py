"""qwen3-vl-235b-a22b (Shopify product catalogue): `multimodal/qwen3-vl/src/mlperf_inf_mm_q3vl/
evaluation.py` of mlcommons/inference at b66003e1, reproduced.

- The log holds each answer's UTF-8 text (the reference SUT logs `message.content`), every entry
  scored (no de-duplication). An answer is validated as JSON against the product schema (category,
  brand: strings; is_secondhand: bool; no other field; pydantic's lax JSON mode, as the script's
  pydantic model). An answer that does not validate becomes: a category of as many padding levels
  as the truth has (so no level matches, but each counts as predicted), a padding brand, and a
  random is_secondhand.
- `f1` (F1_HIERARCHICAL, the gated metric): over all entries, levels split on " > " and stripped;
  the matching levels are the longest common prefix; hP = matches / predicted levels, hR = matches /
  true levels, F1 = 2 hP hR / (hP + hR). An empty path is one empty level (split never returns
  nothing), so "" against "" matches one level, as in the script.
- `brand_f1`: the share of entries whose brand matches the truth with rapidfuzz's ratio > 90
  (stripped, lower-cased). `is_secondhand_f1`: scikit-learn's f1_score(truth, predicted).
- The random draws are the script's: numpy's default_rng(seed) (`--random-seed`, 12345) draws one
  seed per chunk of entries, chunks being len // min(CPUs, 4) entries; each chunk's own generator
  draws, per entry in order, is_secondhand for an unparsable answer, then the random baseline's
  category and is_secondhand. The chunking depends on the host's CPU count in the script; perfdag
  takes 4 (`jobs`), what the script uses on any host with 4 or more CPUs (documented deviation).
  The random baselines are given under `_detail`; the random brand baseline is not (the script draws
  it from a Python set's order, which changes with PYTHONHASHSEED).
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.mlperf.scoring.common import LogEntryError, column_values

try:  # the `vl` extra: what the script itself uses
    from rapidfuzz import fuzz
    from sklearn.metrics import f1_score
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise LogEntryError(f"scoring qwen3-vl needs {exc.name}: pip install -e '.[vl]'") from None

REQUIRED_COLUMNS = ("ground_truth_category", "ground_truth_brand", "ground_truth_is_secondhand",
                    "potential_product_categories")
METRICS = ("f1", "brand_f1", "is_secondhand_f1")
#: The log holds text, every entry is scored.
LOG = "text"
EVERY_ENTRY = True
SEPARATOR = " > "
CATEGORY_PAD = "<|__PRED_CATEGORY_PAD__|>"
BRAND_PAD = "<|__PRED_BRAND_PAD__|>"
BRAND_THRESHOLD = 90
DEFAULT_SEED = 12345
JOBS = 4


class ProductAnswer(BaseModel):
    """The answer the system prompt asks for (the reference's ProductMetadata: no other field)."""

    model_config = ConfigDict(extra="forbid")
    category: str
    brand: str
    is_secondhand: bool


def hierarchical_counts(predicted: str, truth: str) -> tuple[int, int, int]:
    """(matching leading levels, predicted levels, true levels)."""
    pred = [c.strip() for c in predicted.split(SEPARATOR)]
    true = [c.strip() for c in truth.split(SEPARATOR)]
    match = 0
    for p, t in zip(pred, true):
        if p != t:
            break
        match += 1
    return match, len(pred), len(true)


def hierarchical_f1(pairs) -> float:
    inter = n_pred = n_true = 0
    for p, t in pairs:
        i, a, b = hierarchical_counts(p, t)
        inter, n_pred, n_true = inter + i, n_pred + a, n_true + b
    hp = inter / n_pred if n_pred else 0.0
    hr = inter / n_true if n_true else 0.0
    return 0.0 if hp + hr == 0 else 2 * hp * hr / (hp + hr)


def brand_score(pairs) -> float:
    hits = [fuzz.ratio(t.strip().lower(), p.strip().lower()) > BRAND_THRESHOLD for p, t in pairs]
    return sum(hits) / len(hits)


def parse_answer(text: str) -> ProductAnswer | None:
    try:
        return ProductAnswer.model_validate_json(text)
    except ValidationError:
        return None


def score(samples, dataset, tokenizer=None, *, dataset_name: str = "dataset", random_seed: int = DEFAULT_SEED,
          jobs: int = JOBS, **_) -> dict:
    """`samples.texts`: each log entry's answer (text), `samples.qsl_idxs` its row."""
    idxs = samples.qsl_idxs
    cats = column_values(dataset, "ground_truth_category", idxs)
    brands = column_values(dataset, "ground_truth_brand", idxs)
    second = column_values(dataset, "ground_truth_is_secondhand", idxs)
    options = column_values(dataset, "potential_product_categories", idxs)
    size = max(len(idxs) // max(1, min(jobs, JOBS)), 1)
    seeds = np.random.default_rng(seed=random_seed).integers(0, 2**32, size=len(range(0, len(idxs), size)))
    cat_pairs, brand_pairs, second_pairs, rand_cat, rand_second = [], [], [], [], []
    unparsable = 0
    for c, start in enumerate(range(0, len(idxs), size)):
        rng = np.random.default_rng(seeds[c])
        for k in range(start, min(start + size, len(idxs))):
            answer = parse_answer(samples.texts[k])
            if answer is None:
                unparsable += 1
                answer = ProductAnswer(category=SEPARATOR.join([CATEGORY_PAD] * len(cats[k].split(SEPARATOR))),
                                       brand=BRAND_PAD, is_secondhand=rng.choice([True, False], size=1).tolist()[0])
            cat_pairs.append((answer.category, cats[k]))
            second_pairs.append((answer.is_secondhand, second[k]))
            brand_pairs.append((answer.brand, brands[k]))
            rand_cat.append((rng.choice(_options(options[k])), cats[k]))
            rand_second.append((rng.choice([True, False]), second[k]))
    return {"f1": hierarchical_f1(cat_pairs), "brand_f1": brand_score(brand_pairs),
            "is_secondhand_f1": float(f1_score([t for _, t in second_pairs], [p for p, _ in second_pairs])),
            "_detail": {"unparsable": unparsable, "entries": len(idxs),
                        "random_f1": hierarchical_f1(rand_cat),
                        "random_is_secondhand_f1": float(f1_score([t for _, t in rand_second],
                                                                  [p for p, _ in rand_second]))}}


def _options(value) -> list:
    """potential_product_categories as a list (a JSON string in a jsonl or CSV dataset)."""
    return json.loads(value) if isinstance(value, str) else list(value)


def accuracy_txt(result: dict) -> str:
    """accuracy.txt as the script writes it (the checker reads F1_HIERARCHICAL from `{"f1": x}`)."""
    data = json.dumps({"f1": result["f1"]}, sort_keys=True)
    return f"Results\n\n{data}\n\nhash={hashlib.sha256(data.encode()).hexdigest()}"


def endpoints_score(result: dict) -> tuple[float, None]:
    """The endpoints layout's score: the category F1 as a fraction (endpoints' ShopifyCategoryF1Scorer,
    what the checker compares with F1_HIERARCHICAL's gate)."""
    return float(result["f1"]), None
