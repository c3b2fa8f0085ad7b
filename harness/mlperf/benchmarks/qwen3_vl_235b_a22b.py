"""qwen3-vl-235b-a22b: Shopify product catalogue (48,289 samples; Interactive: an 8,000-sample subset),
one chat completion per sample (system prompt, then a user message with the product's title,
description and candidate categories as text and its image as an `image_url` part), answered as
JSON {category, brand, is_secondhand}; scored by F1_HIERARCHICAL over the category path
(multimodal/qwen3-vl/ of mlcommons/inference at b66003e1: src/mlperf_inf_mm_q3vl/task.py,
evaluation.py, README.md; loadgen/mlperf.conf; tools/submission/submission_checker/constants.py).

Latency is end to end (mlperf.conf `use_token_latencies = 0`, Server `target_latency = 12000`;
README: Interactive 1.5 s at the 99th percentile; the checker's latency-constraint: Server 12 s,
Interactive 1.5 s). Interactive runs on its own dataset, the 8,000-row subset
`nvidia/Shopify-product-catalogue-8k`, with its own F1 reference (constants.py v6.1 accuracy-target
Interactive: 0.7878 x 0.99; accuracy-sample-count Interactive: 8000). Rules: no prefix caching, images as the dataset
holds them (never resized or re-encoded). New in v6.0; in v6.1 Offline is required and one of
Server or Interactive.
"""
import json

from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

#: The answer's JSON schema as the reference puts it in the system prompt (pydantic's
#: ProductMetadata.model_json_schema(), indent 2).
ANSWER_SCHEMA = {
    "additionalProperties": False,
    "description": "Json format for the expected responses from the VLM.",
    "properties": {
        "category": {"description": "The complete category of the product, e.g.,\n\"Clothing & Accessories > "
                                    "Clothing > Shirts > Polo Shirts\".\nEach categorical level is separated by "
                                    "\" > \".", "title": "Category", "type": "string"},
        "brand": {"description": "The brand of the product, e.g., \"giorgio armani\".", "title": "Brand",
                  "type": "string"},
        "is_secondhand": {"description": "True if the product is second-hand, False otherwise.",
                          "title": "Is Secondhand", "type": "boolean"},
    },
    "required": ["category", "brand", "is_secondhand"],
    "title": "ProductMetadata",
    "type": "object",
}

SYSTEM_PROMPT = f"""Please analyze the product from the user prompt
and provide the following fields in a valid JSON object:
- category
- brand
- is_secondhand

You must choose only one, which is the most appropriate, correct, and specifc
category out of the list of possible product categories.

The description of the product sometimes contains various types of source code
(e.g., JavaScript, CSS, HTML, etc.), where useful product information is embedded
somewhere inside the source code. For this task, you should extract the useful
product information from the source code and leverage it, and discard the
programmatic parts of the source code.

Your response should only contain a valid JSON object and nothing more, e.g.,
you should not fence the JSON object inside a ```json code block.
The JSON object should match the followng JSON schema:
```json
{json.dumps(ANSWER_SCHEMA, indent=2)}
```
"""


def user_text(title: str, description: str, categories) -> str:
    """The user message's text part, as the reference formats a row (`categories` as Python prints the list)."""
    return f"""The title of the product is the following:
```text
{title}
```

The description of the product is the following:
```text
{description}
```

The following are the possible product categories:
```json
{categories}
```
"""


BENCHMARK = Benchmark(
    name="qwen3-vl-235b-a22b", loadgen_model="qwen3-vl-235b-a22b",
    dataset="Shopify/product-catalogue (train+test at d5c517c5, 48,289 rows): product_title, product_description, "
            "potential_product_categories, product_image; ground_truth_category, ground_truth_brand, "
            "ground_truth_is_secondhand. Interactive: nvidia/Shopify-product-catalogue-8k (8,000 rows)",
    columns=("ground_truth_category", "ground_truth_brand", "ground_truth_is_secondhand",
             "potential_product_categories"),
    scorer="qwen3_vl_235b_a22b",
    # README "Sampling parameters": none sent, so the model's generation_config applies (temperature 0.7,
    # top_p 0.8, top_k 20, repetition_penalty 1.0); no max_tokens; no guided decoding.
    generation=Generation(max_output_tokens=0, greedy=False, stop="the model's EOS token (no max_tokens sent)",
                          prompt_format="chat: system prompt, then a user message with a text part and the product "
                                        "image as an image_url data URL (the dataset's bytes, base64)"),
    # constants.py v6.1 accuracy-target: Offline/Server ("F1_HIERARCHICAL", 0.7903 * 0.99); Interactive
    # (the 8k subset) 0.7878 * 0.99. brand_f1 and is_secondhand_f1 are printed beside it, not gated.
    metrics=(Metric("f1", 0.7903),),
    targets={"v6.0": ("99",), "v6.1": ("99",)},
    scenarios={"v6.0": ("Offline", "Server", "Interactive"), "v6.1": ("Offline", "Server", "Interactive")},
    latency_ms={},  # no TTFT/TPOT limits: target_latency_ms
    target_latency_ms={"Server": 12000.0, "Interactive": 1500.0},
    compliance=(), performance_sample_count=48289, dataset_size=48289,
    accuracy_sample_count=None,
    min_queries={"Offline": 1, "Server": 270336},
    aliases=("qwen3-vl-235b-a22b-99", "qwen3-vl"),
    layouts=("loadgen", "endpoints"),  # in the checker's ENDPOINTS_ALLOWED_MODELS (constants.py v6.1)
    scenario_datasets={"Interactive": (
        "nvidia/Shopify-product-catalogue-8k (8,000 rows of the catalogue, the same columns)", 8000,
        (Metric("f1", 0.7878),))},
    notes="every log entry scored; the log holds the answer's text; Interactive runs on the 8k subset with its "
          "own gate (0.7878 x 0.99)",
    api="chat", accuracy_log="text", system_prompt=SYSTEM_PROMPT, forbidden_prefix_caching=True,
)
