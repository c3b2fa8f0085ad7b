"""A tiny Whisper that `transformers serve` serves on `/v1/audio/transcriptions` on CPU: a
WhisperForConditionalGeneration from a seeded config, its processor (WhisperFeatureExtractor and a
byte-level BPE tokenizer trained here, with Whisper's special tokens) and a generation config whose
decoder prompt is the reference's ("<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"),
taught the shipped stand-in's clips (harness/data/standins/whisper/) by teacher forcing until it
transcribes them.

Its window is WINDOW_S seconds, not Whisper's 30: the feature extractor zero-pads every clip to it
(the benchmark's rule, at the stand-in's scale), and 8 s keep the encoder's 400 positions cheap to
train and serve on two CPU cores. Deterministic for a given seed and torch version (it trains on one thread).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from harness.model.progress import Steps
from harness.model.training import trainer

EOT, SOT, EN, TRANSCRIBE, TRANSLATE, NO_TIMESTAMPS = ("<|endoftext|>", "<|startoftranscript|>", "<|en|>",
                                                      "<|transcribe|>", "<|translate|>", "<|notimestamps|>")
SPECIALS = [EOT, SOT, EN, TRANSCRIBE, TRANSLATE, NO_TIMESTAMPS]
RATE = 16000
WINDOW_S = 4
MEL_BINS = 40


def train_tokenizer(texts: list[str], out_dir: Path, vocab_size: int):
    """A byte-level BPE over `texts` with Whisper's special tokens, as a WhisperTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import WhisperTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" " + t for t in texts], trainer=trainer)  # Whisper's text starts with a space
    path = out_dir / "tokenizer.json"
    tok.save(str(path))
    return WhisperTokenizerFast(tokenizer_file=str(path), unk_token=EOT, bos_token=EOT, eos_token=EOT,
                                pad_token=EOT, additional_special_tokens=SPECIALS[1:])


def build_tiny_whisper(out_dir: str | Path, clips: list[tuple], *, seed: int = 0, steps: int = 400,
                       learning_rate: float = 3e-3, vocab_size: int = 400,
                       log: Callable[[str], None] = print) -> dict:
    """Saves a Hugging Face directory (model, processor, generation config) taught `clips`: (16 kHz
    float32 samples, transcript) pairs."""
    import torch

    # One thread: the model is too small to gain from more, one trains the same on any host, and on a
    # loaded 2-core host two threads waiting on each other ran 10x slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _build(out_dir, clips, seed, steps, learning_rate, vocab_size, log)
    finally:
        torch.set_num_threads(threads)


def _build(out_dir, clips, seed, steps, learning_rate, vocab_size, log) -> dict:
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tok = train_tokenizer([t for _, t in clips], out, vocab_size)
    features = WhisperFeatureExtractor(feature_size=MEL_BINS, sampling_rate=RATE, chunk_length=WINDOW_S)
    WhisperProcessor(feature_extractor=features, tokenizer=tok).save_pretrained(out)
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    prompt = [ids[SOT], ids[EN], ids[TRANSCRIBE], ids[NO_TIMESTAMPS]]

    torch.manual_seed(seed)
    positions = WINDOW_S * RATE // features.hop_length // 2  # the encoder's, after its stride-2 conv
    config = WhisperConfig(vocab_size=len(tok), num_mel_bins=MEL_BINS, d_model=64, encoder_layers=2,
                           decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                           encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=positions,
                           max_target_positions=64, pad_token_id=ids[EOT], bos_token_id=ids[EOT],
                           eos_token_id=ids[EOT], decoder_start_token_id=ids[SOT], begin_suppress_tokens=None,
                           suppress_tokens=None, forced_decoder_ids=None)
    model = WhisperForConditionalGeneration(config)
    # Whisper's generate builds the decoder prompt from these (set as kwargs: attributes set on the
    # model's own config afterwards are not saved)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids[SOT], eos_token_id=ids[EOT], pad_token_id=ids[EOT], bos_token_id=ids[EOT],
        max_length=config.max_target_positions, is_multilingual=True, lang_to_id={EN: ids[EN]}, language="en",
        task_to_id={"transcribe": ids[TRANSCRIBE], "translate": ids[TRANSLATE]}, task="transcribe",
        no_timestamps_token_id=ids[NO_TIMESTAMPS],
        # one decoding pass per clip: with a window under 30 s, Whisper's segment loop decodes the padding
        # again as a second segment and appends what it hears there
        force_unique_generate_call=True)

    mels = features([a for a, _ in clips], sampling_rate=RATE, return_tensors="pt").input_features
    targets = [prompt + tok.encode(" " + t, add_special_tokens=False) + [ids[EOT]] for _, t in clips]
    width = max(map(len, targets))
    labels = torch.full((len(targets), width), -100, dtype=torch.long)
    for i, t in enumerate(targets):
        labels[i, :len(t)] = torch.tensor(t)
    decoder_in = labels[:, :-1].clamp(min=0)
    loss_labels = labels[:, 1:].clone()
    loss_labels[:, :len(prompt) - 1] = -100  # the prompt is given, not learnt
    losses = _train(model, mels, decoder_in, loss_labels, steps, learning_rate, seed, log)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    return {"family": "whisper", "parameters": sum(p.numel() for p in model.parameters()), "vocab_size": len(tok),
            "clips": len(clips), "window_s": WINDOW_S, "first_loss": losses[0] if losses else None,
            "final_loss": losses[-1] if losses else None, "train_seconds": round(time.monotonic() - t0, 2)}


def _train(model, mels, decoder_in, labels, steps: int, lr: float, seed: int, log) -> list[float]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    train_step = trainer(model, lr, steps)
    losses: list[float] = []
    batch = min(8, len(mels))
    with Steps("training tiny whisper", steps, log) as progress:
        for _ in range(steps):
            pick = torch.randperm(len(mels), generator=gen)[:batch]
            out = model(input_features=mels[pick], decoder_input_ids=decoder_in[pick])
            losses.append(train_step(torch.nn.functional.cross_entropy(out.logits.transpose(1, 2), labels[pick],
                                                                       ignore_index=-100)))
            progress.advance(losses[-1])
    if losses:
        log(f"tiny whisper: trained {steps} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return losses
