"""A tiny vision-language model that `transformers serve` serves with images on CPU: LLaVA (a CLIP
vision tower, a projector and a Llama), from a seeded config, with a processor whose chat template
puts the image where the user message has it.

LLaVA rather than the benchmark's own Qwen3-VL: transformers' Qwen2/3-VL processors need a video
processor, which needs torchvision (not in perfdag's CPU environment); LLaVA's processor takes PIL's
CLIP image processor alone. The weights are untrained: its answers are not the products' (see
docs/mlperf.md: the accuracy path is shown on scored synthetic logs and on the truths).
"""
from __future__ import annotations

from pathlib import Path

from harness.model.tiny import train_tokenizer

IMAGE_TOKEN = "<image>"
VL_STANDIN = "qwen3-vl-235b-a22b"  # the benchmark whose shipped stand-in its tokenizer is trained on
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {% if m['content'] is string %}{{ m['content'] }}"
            "{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}" + IMAGE_TOKEN +
            "{% elif p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")


def build_tiny_llava(out_dir: str | Path, texts: list[str] = (), seed: int = 0, image_size: int = 32) -> Path:
    """Tokenizer (trained on `texts`), processor and a seeded LLaVA saved as a Hugging Face directory."""
    import torch  # heavy: only where a model is built
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(512, out, list(texts) or ["a product"], corpus=False)
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    images = CLIPImageProcessorPil(size={"shortest_edge": image_size},
                                   crop_size={"height": image_size, "width": image_size})
    LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=8, vision_feature_select_strategy="default",
                   chat_template=TEMPLATE, image_token=IMAGE_TOKEN, num_additional_image_tokens=1).save_pretrained(out)
    torch.manual_seed(seed)
    cfg = LlavaConfig(
        vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                       image_size=image_size, patch_size=8, projection_dim=32),
        text_config=LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                                bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id),
        image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN), vision_feature_select_strategy="default",
        vision_feature_layer=-1)
    model = LlavaForConditionalGeneration(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out)
    return out
