"""qwen3-vl-235b-a22b's dataset as Hugging Face publishes it (Shopify/product-catalogue, and the 8k subset
nvidia/Shopify-product-catalogue-8k: parquet, columns product_title, product_description,
potential_product_categories, product_image (the Image feature: {"bytes", "path"}), ground_truth_category,
ground_truth_brand, ground_truth_is_secondhand) -> perfdag's qwen3-vl JSON lines: the columns the scorer
reads, and `messages`, the chat MLCommons' reference sends for the row (multimodal/qwen3-vl task.py at
b66003e1), `input` (its text) and `output` (the truths as the answer JSON).

The image is sent as the reference sends it: decoded (PIL) and saved again in its own format, base64, as
`data:image/<FORMAT>;base64,...` with PIL's format name (JPEG, PNG), so the bytes are the reference's, not
the file's. A directory is read train files first, then the others (the reference loads "train+test").
"""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from harness.converters import parquet_files, read_parquet, write_jsonl
from harness.errors import InputError
from harness.mlperf.benchmarks.qwen3_vl_235b_a22b import SYSTEM_PROMPT, user_text

DESCRIPTION = "the Shopify product catalogue parquet (Hugging Face) -> perfdag's qwen3-vl JSON lines with the reference's chat"
COLUMNS = ("product_title", "product_description", "potential_product_categories", "product_image",
           "ground_truth_category", "ground_truth_brand", "ground_truth_is_secondhand")


def image_url(value, where: str) -> str:
    """The image as the reference sends it: PIL-decoded, saved again in its format, a base64 data URL."""
    from PIL import Image, UnidentifiedImageError  # heavy: only where images are converted

    data = value.get("bytes") if isinstance(value, dict) else value
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise InputError(f"{where}: product_image holds no image bytes (the Image feature's 'bytes')")
    try:
        img = Image.open(io.BytesIO(data))
        fmt = img.format
        buf = io.BytesIO()
        img.save(buf, format=fmt)
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise InputError(f"{where}: product_image is not an image PIL reads ({e})") from None
    return f"data:image/{fmt};base64,{base64.b64encode(buf.getvalue()).decode()}"


def _rows(src: Path):
    for path in parquet_files(src):
        df = read_parquet(path)
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise InputError(f"{path}: no column(s) {', '.join(missing)}; the catalogue's parquet has "
                             f"{', '.join(COLUMNS)}")
        for i, r in enumerate(df.to_dict("records")):
            where = f"{path}, row {i}"
            cats = [str(c) for c in r["potential_product_categories"]]  # a list, as the reference prints it
            text = user_text(r["product_title"], r["product_description"], cats)
            second = bool(r["ground_truth_is_secondhand"])
            answer = json.dumps({"category": r["ground_truth_category"], "brand": r["ground_truth_brand"],
                                 "is_secondhand": second})
            yield {"product_title": r["product_title"], "product_description": r["product_description"],
                   "potential_product_categories": cats, "ground_truth_category": r["ground_truth_category"],
                   "ground_truth_brand": r["ground_truth_brand"], "ground_truth_is_secondhand": second,
                   "input": text, "canonical_solution": answer, "output": answer,
                   "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                                {"role": "user", "content": [
                                    {"type": "text", "text": text},
                                    {"type": "image_url", "image_url": {"url": image_url(r["product_image"], where)}}]}]}


def convert(src: Path, out: Path) -> dict:
    return {"rows": write_jsonl(out, _rows(src)), "files": [str(p) for p in parquet_files(src)]}
