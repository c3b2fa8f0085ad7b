"""Synthetic qwen3-vl rows and answers with the edge cases MLCommons' evaluation.py meets: empty and
over-long category paths, separators with odd spacing, unicode brands, missing and extra fields,
answers that are not JSON, lax booleans, repeated qsl_idx. Seeded: the same rows every time."""
from __future__ import annotations

import json
import random

LEVELS = ["Home & Garden", "Kitchen", "Cookware", "Pans", "Électronique", "Clothing", "Shirts", "Polo Shirts"]
BRANDS = ["Adidas", "giorgio armani", "Müller", "無印良品", "Zoë & Co", "", "  Nike "]


def rows_and_log(n_rows: int = 300, n_entries: int = 420, seed: int = 7) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n_rows):
        depth = rng.choice([1, 2, 3, 4, 6])
        path = " > ".join(rng.sample(LEVELS, depth)) if rng.random() > 0.03 else ""
        cands = [path] + [" > ".join(rng.sample(LEVELS, rng.randint(1, 4))) for _ in range(rng.randint(1, 5))]
        rows.append({"ground_truth_category": path, "ground_truth_brand": rng.choice(BRANDS),
                     "ground_truth_is_secondhand": rng.random() < 0.3, "potential_product_categories": cands})
    log = []
    for k in range(n_entries):
        q = k if k < n_rows else rng.randrange(n_rows)
        log.append({"seq_id": k, "qsl_idx": q, "data": _answer(rng, rows[q]).encode("utf-8").hex()})
    return rows, log


def _answer(rng, row) -> str:
    kind = rng.random()
    truth = row["ground_truth_category"]
    levels = truth.split(" > ")
    if kind < 0.35:
        cat = truth
    elif kind < 0.5:
        cat = " > ".join(levels[:max(1, len(levels) - 1)] + ["Other"])
    elif kind < 0.6:
        cat = ">".join(levels) if rng.random() < 0.5 else "  >  ".join(levels)  # odd separator spacing
    elif kind < 0.65:
        cat = ""
    elif kind < 0.7:
        cat = " > ".join(levels + LEVELS * 3)  # over-long
    else:
        cat = rng.choice(row["potential_product_categories"])
    brand = row["ground_truth_brand"]
    brand = rng.choice([brand, brand.upper(), brand + "s", brand[:-1], "Adodas", " " + brand + " ", "Muller"])
    second = rng.choice([True, False, "true", "no", 1, 0, "maybe"])
    doc = {"category": cat, "brand": brand, "is_secondhand": second}
    r = rng.random()
    if r < 0.05:
        return "not json at all"
    if r < 0.08:
        doc.pop(rng.choice(["category", "brand", "is_secondhand"]))  # a missing field
    elif r < 0.1:
        doc["extra"] = 1  # a field the schema forbids
    elif r < 0.13:
        return "```json\n" + json.dumps(doc) + "\n```"  # fenced: not JSON
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5)
