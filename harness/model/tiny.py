"""The built-in tiny Llama: a BPE tokenizer and a seeded Llama trained briefly on shipped text.

A random model's near-flat logits flip under any quantization, so it is trained until its
next-token distributions are peaked like a real model's. Deterministic for a given seed,
torch version and thread count.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from harness.cpus import apply_torch_threads
from harness.model.corpus import corpus_lines, standin_rows
from harness.model.messages import messages_text
from harness.model.progress import Steps
from harness.model.training import trainer

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
# A plain chat template, so an OpenAI server answers chat completions with the tiny model: each
# message as "role: text" (text parts of a list content), an assistant's tool calls as
# `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (the Qwen form, which TOOL_CALL_TEMPLATE
# reads back): a replayed conversation shows the model the calls in the form it answers with.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] %}{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{% if m['tool_calls'] is defined and m['tool_calls'] %}{% for c in m['tool_calls'] %}"
    "<tool_call>{\"name\": {{ c['function']['name'] | tojson }}, \"arguments\": {% if c['function']['arguments'] is string %}"
    "{{ c['function']['arguments'] }}{% else %}{{ c['function']['arguments'] | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


#: How `transformers serve` reads the tiny model's tool calls (its response parser, the Qwen form):
#: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, repeated; the rest is content. Set on
#: the tokenizer only when a taught stand-in answers with tool calls (qwen3.6-27b).
TOOL_CALL_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "assistant:",  # where CHAT_TEMPLATE's generation prompt ends
    "fields": {
        "tool_calls": {"open_pattern": r"\s*<tool_call>", "close": "</tool_call>", "repeats": True,
                       "content": "json", "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"\s*</s>", "content": "text"},
    },
}


def tool_call_text(name: str, arguments) -> str:
    """A call as CHAT_TEMPLATE renders it and TOOL_CALL_TEMPLATE reads it back (what a taught answer
    is): `arguments` as the JSON text a recorded call holds, or an object to write as JSON."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return '<tool_call>{"name": ' + json.dumps(name) + ', "arguments": ' + args + "}</tool_call>"


def train_tokenizer(vocab_size: int, out_dir: Path, extra_texts: list[str] = (), corpus: bool = True,
                    response_template: dict | None = None):
    """A byte-level BPE tokenizer trained on the shipped corpus (and the taught stand-in texts),
    saved as a HF fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([*(corpus_lines() if corpus else []), *extra_texts], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>", chat_template=CHAT_TEMPLATE,
                                   **({"response_template": response_template} if response_template else {}))
    fast.save_pretrained(out_dir)
    return fast


def build_tiny_llama(cfg, out_dir: str | Path, log: Callable[[str], None] = print, rows: list[dict] | None = None) -> dict:
    """Trains tokenizer + model per `cfg` (schema.TinyModel) and saves a normal HF directory. `rows`:
    what it is taught (default: the stand-ins `cfg.teach` names), each {"input" or "messages",
    "canonical_solution"}."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM


    apply_torch_threads()  # the CPUs this process may use, not the machine's
    out_dir = Path(out_dir)
    t0 = time.monotonic()
    rows = [r for b in cfg.teach for r in standin_rows(b)] if rows is None else rows
    lines = corpus_lines() if cfg.corpus else []
    # a chat row's words train the tokenizer; its prompt is rendered once the tokenizer exists
    texts = [messages_text(r["messages"]) if "messages" in r else r["input"] for r in rows]
    tools = any("<tool_call>" in r["canonical_solution"] for r in rows)
    tok = train_tokenizer(cfg.vocab_size, out_dir, [t + r["canonical_solution"] for t, r in zip(texts, rows)],
                          corpus=cfg.corpus, response_template=TOOL_CALL_TEMPLATE if tools else None)
    # A chat row is taught after the prompt the server renders from its messages (the chat template's).
    lessons = [(tok.apply_chat_template(r["messages"], tokenize=False, add_generation_prompt=True)
                if "messages" in r else r["input"], r["canonical_solution"]) for r in rows]
    ids = [i for line in lines for i in [tok.bos_token_id, *tok.encode(line), tok.eos_token_id]]
    # A question and its answer are encoded apart, as the dataset's prompt and the model's output
    # are: the model learns the very tokens it must produce after the prompt, then EOS.
    for _ in range(cfg.teach_repeats if lessons else 0):
        for prompt, answer in lessons:
            ids += [tok.bos_token_id, *tok.encode(prompt), *tok.encode(answer), tok.eos_token_id]
    data = torch.tensor(ids, dtype=torch.long)

    torch.manual_seed(cfg.seed)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads, max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False, dtype="float32")
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"tiny llama: {n_params / 1e6:.2f}M parameters, {len(tok)} tokens vocab, {len(ids)} training tokens")

    losses = _train(model, data, cfg, log)
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    return {"parameters": n_params, "vocab_size": len(tok), "train_tokens": len(ids),
            "final_loss": losses[-1] if losses else None, "first_loss": losses[0] if losses else None,
            "train_seconds": round(time.monotonic() - t0, 2)}


def _train(model, data, cfg, log) -> list[float]:
    import torch

    if cfg.train_steps == 0:
        return []
    gen = torch.Generator().manual_seed(cfg.seed)
    train_step = trainer(model, cfg.learning_rate, cfg.train_steps)
    losses = []
    span = cfg.train_seq_len
    with Steps("training tiny llama", cfg.train_steps, log) as steps:
        for _ in range(cfg.train_steps):
            starts = torch.randint(0, len(data) - span, (cfg.train_batch_size,), generator=gen)
            batch = torch.stack([data[s:s + span] for s in starts])
            # HF shifts the labels by one itself: labels == inputs is the causal LM loss.
            losses.append(train_step(model(input_ids=batch, labels=batch).loss))
            steps.advance(losses[-1])
    log(f"trained {cfg.train_steps} steps: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return losses
