"""Writes the qwen3-vl-235b-a22b stand-in (harness/data/standins/qwen3-vl-235b-a22b.jsonl): 16 products
in the benchmark's format, each a small PNG drawn here (a seeded colour and shape) with a title,
description and candidate categories, and the ground truths the scorer reads. Each row also carries
`messages`, the chat the reference sends for it (system prompt, then the user text and the image as a
data URL of the PNG's exact bytes), `input` (the user text, for prompt-length statistics) and
`canonical_solution` and `output` (the JSON answer: the reference perfdag's jsonl reader wants). Deterministic: run it again and nothing changes.

    python -m harness.data.make_vl_standin
"""
from __future__ import annotations

import base64
import io
import json
import random
from pathlib import Path

from harness.mlperf.benchmarks.qwen3_vl_235b_a22b import SYSTEM_PROMPT, user_text

OUT = Path(__file__).resolve().parent / "standins" / "qwen3-vl-235b-a22b.jsonl"
SEED = 31
COLOURS = {"red": (200, 30, 30), "green": (30, 160, 60), "blue": (40, 60, 200), "yellow": (230, 210, 40)}
KINDS = {"mug": "Home & Garden > Kitchen & Dining > Tableware > Drinkware > Mugs",
         "shirt": "Apparel & Accessories > Clothing > Shirts & Tops",
         "lamp": "Home & Garden > Lighting > Lamps",
         "ball": "Sporting Goods > Athletics > Soccer > Soccer Balls"}
BRANDS = ["Acme", "Nordlys", "Kōbō", "Zeta & Sons"]


def png(colour: tuple[int, int, int], kind: str, size: int = 32) -> bytes:
    """A small PNG: a coloured shape on white (PIL, no metadata, so the bytes are the same every run)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(img)
    box = (6, 6, size - 6, size - 6)
    {"mug": d.rectangle, "shirt": d.polygon, "lamp": d.ellipse, "ball": d.ellipse}[kind](
        [(6, 10), (26, 10), (22, 28), (10, 28)] if kind == "shirt" else box, fill=colour)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def rows() -> list[dict]:
    rng = random.Random(SEED)
    out = []
    for i in range(16):
        colour, kind = list(COLOURS)[i % 4], list(KINDS)[(i // 4 + i) % 4]
        brand, second = BRANDS[i % 4], i % 3 == 0
        truth = KINDS[kind]
        cands = [truth] + [KINDS[k] for k in KINDS if k != kind]
        rng.shuffle(cands)
        title = f"{colour.title()} {kind} by {brand}" + (" (pre-owned)" if second else "")
        desc = f"<p>A {colour} {kind}.</p>" + ("<script>var used = true;</script>" if second else "")
        text = user_text(title, desc, cands)
        image = base64.b64encode(png(COLOURS[colour], kind)).decode()
        answer = json.dumps({"category": truth, "brand": brand, "is_secondhand": second})
        out.append({"product_title": title, "product_description": desc, "potential_product_categories": cands,
                    "ground_truth_category": truth, "ground_truth_brand": brand, "ground_truth_is_secondhand": second,
                    "input": text, "canonical_solution": answer, "output": answer,
                    "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                                 {"role": "user", "content": [
                                     {"type": "text", "text": text},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}]}]})
    return out


def main() -> None:
    OUT.write_text("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows()), encoding="utf-8")
    print(OUT)


if __name__ == "__main__":
    main()
