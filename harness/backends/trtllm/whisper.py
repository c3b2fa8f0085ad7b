"""whisper's Triton form: TensorRT-LLM's Whisper example rendered from perfdag's params, and checked.

What NVIDIA's example runs (examples/models/core/whisper, triton_backend/all_models/whisper and the
backend's docs/whisper.md): `convert_checkpoint.py` turns OpenAI's checkpoint (`<model_dir>/<model_name>.pt`)
into an `encoder/` and a `decoder/` TensorRT-LLM checkpoint, `trtllm-build` builds one engine from each,
and Triton serves a Python BLS model `whisper_bls` (WAV samples and a text prefix in, TRANSCRIPTS out:
it computes float16 log-mel features and calls) a `tensorrt_llm` model holding both engines
(`gpt_model_path` the decoder, `encoder_model_path` the encoder).

Here: those three command lines, both config.pbtxt files, one request's input arrays for whisper_bls, and
what would stop them, as pure functions of the parameters (`trtllm_whisper` section). None of it has run:
there is no GPU here, and LoadGen's Triton cores speak the token-id contract, not audio, so FullRun refuses
this form (harness/backends/trtllm/__init__.py) and `python -m pipeline whisper-triton` writes it out.
Facts follow TensorRT-LLM's sources at the commits named in tests/golden/trtllm/whisper_upstream.json.
"""
from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from pathlib import Path

from harness.backends.trtllm.build import flag_value
from harness.mlperf import benchmarks
from harness.serving.triton import contract
from harness.serving.triton.contract import Tensor
from harness.serving.triton.pbtxt import check_model_config, render_model_config

BLS_MODEL, LLM_MODEL = "whisper_bls", "tensorrt_llm"
# convert_checkpoint.py's --model_name choices; the file it reads is <model_dir>/<model_name>.pt.
MODEL_NAMES = ("large-v3-turbo", "large-v3", "large-v2", "medium", "small", "base", "tiny", "medium.en", "small.en",
               "base.en", "tiny.en", "distil-large-v3", "distil-large-v2", "distil-medium.en", "distil-small.en")
MEL_128 = ("large-v3-turbo", "large-v3", "distil-large-v3")  # the rest have 80 mel bins (fbank.py takes 80 or 128)
# 30 s of 16 kHz audio at a 160-sample hop: the encoder's input frames, as the example builds both engines.
ENCODER_FRAMES = 3000
BLS_MAX_TOKENS = 50  # whisper_bls/1/model.py asks request_output_len 50 for every request; no input changes it
ASSETS = ("multilingual.tiktoken", "mel_filters.npz")  # read from whisper_bls/1/ by tokenizer.py and fbank.py
BLS_SOURCES = ("model.py", "fbank.py", "tokenizer.py")
DTYPE = "float16"  # fbank.py casts the features to half, and the tensorrt_llm model takes them as TYPE_FP16

# whisper_bls's tensors (its config.pbtxt). WAV_LENS is marked optional there, but model.py reads it for
# every request, so a client must send it.
BLS_INPUTS = (Tensor("TEXT_PREFIX", "TYPE_STRING", (1,)), Tensor("WAV", "TYPE_FP32", (-1,)),
              Tensor("WAV_LENS", "TYPE_INT32", (1,), optional=True))
BLS_OUTPUTS = (Tensor("TRANSCRIPTS", "TYPE_STRING", (1,)),)
# What whisper_bls sends the tensorrt_llm model, as its config.pbtxt declares them: the text contract's
# tensors (one definition, contract.py) with the encoder's between them, in the template's order.
_TEXT = {t.name: t for t in contract.INPUTS}
LLM_INPUTS = (
    _TEXT["input_ids"],
    Tensor("encoder_input_features", "TYPE_FP16", (-1, -1), optional=True, ragged=True),
    Tensor("encoder_output_lengths", "TYPE_INT32", (1,), optional=True, scalar=True),
    _TEXT["input_lengths"], _TEXT["request_output_len"],
    Tensor("decoder_input_ids", "TYPE_INT32", (-1,), optional=True, ragged=True),
    _TEXT["end_id"], _TEXT["pad_id"], _TEXT["streaming"],
)
LLM_OUTPUTS = contract.OUTPUTS
EXAMPLE = "params/examples/whisper-trtllm-h200.yaml"


def asks_for_it(p) -> bool:
    """The parameters ask for whisper's Triton form: the whisper benchmark on build.backend=trtllm."""
    return p.build.backend == "trtllm" and benchmarks.canonical_name(p.loadgen.mlperf_model) == "whisper"


def _file_problems(field: str, value: str | None, what: str, names: tuple[str, ...] = ()) -> list[str]:
    if value is None:
        return [f"trtllm_whisper.{field}: not set; give {what}"]
    path = Path(value).expanduser()
    if not names:
        return [] if path.is_file() else [f"trtllm_whisper.{field}: {value} is not a file; give {what}"]
    if not path.is_dir():
        return [f"trtllm_whisper.{field}: {value} is not a directory; give {what}"]
    missing = [n for n in names if not (path / n).is_file()]
    return [f"trtllm_whisper.{field}: {value} lacks {', '.join(missing)}; give {what}"] if missing else []


def problems(p) -> list[str]:
    """What keeps the parameters from rendering whisper's Triton form (one 'field: what; fix' line each)."""
    w = p.trtllm_whisper
    if w is None:
        return [f"trtllm_whisper: not set; whisper on build.backend=trtllm needs trtllm_whisper.checkpoint (OpenAI's "
                f"<name>.pt), .assets_dir and .bls_model_dir (see {EXAMPLE})"]
    out = _file_problems("checkpoint", w.checkpoint, "OpenAI's Whisper checkpoint file, e.g. /models/whisper/large-v3.pt")
    if w.checkpoint is not None:
        path = Path(w.checkpoint)
        if path.suffix != ".pt" or path.stem not in MODEL_NAMES:
            out.append(f"trtllm_whisper.checkpoint: {path.name} is not <model_name>.pt, which convert_checkpoint.py "
                       f"reads; name it one of {', '.join(n + '.pt' for n in MODEL_NAMES)}")
    out += _file_problems("assets_dir", w.assets_dir, f"a directory holding {' and '.join(ASSETS)} (OpenAI whisper's "
                          "assets)", ASSETS)
    out += _file_problems("bls_model_dir", w.bls_model_dir, "TensorRT-LLM's triton_backend/all_models/whisper/whisper_bls/1 "
                          f"(it holds {', '.join(BLS_SOURCES)})", BLS_SOURCES)
    b, r = p.build, p.runtime
    if b.device != "cuda":
        out.append(f"build.device: {b.device}; TensorRT-LLM's Whisper engines run only on NVIDIA GPUs; set build.device=cuda")
    if b.dtype != DTYPE:
        out.append(f"build.dtype: {b.dtype}; whisper_bls computes float16 log-mel features (fbank.py) and the tensorrt_llm "
                   "model takes them as TYPE_FP16; set build.dtype=float16")
    if p.quantize.format != "none":
        out.append(f"quantize.format: {p.quantize.format}; convert_checkpoint.py quantizes Whisper itself (weight-only); "
                   "set quantize.format=none and trtllm_whisper.weight_only_precision to int8 or int4")
    if (b.tp_size, b.pp_size, r.num_gpus) != (1, 1, 1):
        out.append(f"build.tp_size/pp_size, runtime.num_gpus: {b.tp_size}/{b.pp_size}, {r.num_gpus}; TensorRT-LLM's "
                   "Whisper example and its Triton model run on one GPU; set all three to 1")
    if p.harness.stream:
        out.append("harness.stream: true; whisper_bls is rendered non-decoupled (NVIDIA's docs leave its streaming mode "
                   "a TODO); remove it")
    if w.decoder_max_seq_len < w.decoder_max_input_len + BLS_MAX_TOKENS:
        out.append(f"trtllm_whisper.decoder_max_seq_len: {w.decoder_max_seq_len} leaves fewer than the {BLS_MAX_TOKENS} "
                   f"tokens whisper_bls asks for after a {w.decoder_max_input_len}-token prompt "
                   "(trtllm_whisper.decoder_max_input_len); raise it to at least "
                   f"{w.decoder_max_input_len + BLS_MAX_TOKENS}")
    if w.max_beam_width > 1:
        out.append(f"trtllm_whisper.max_beam_width: {w.max_beam_width}; whisper_bls sends no beam_width, so requests "
                   "decode greedily whatever the engine allows; set 1")
    if p.triton.endpoints:
        out.append("triton.endpoints: whisper's Triton form is rendered, not served or measured; remove it")
    return out


def notes(p) -> list[str]:
    if p.dataset.max_new_tokens != BLS_MAX_TOKENS:
        return [f"dataset.max_new_tokens: {p.dataset.max_new_tokens}, but whisper_bls asks {BLS_MAX_TOKENS} tokens per "
                "clip whatever a client sends (MLCommons' reference allows 200): a long clip's transcript is cut there"]
    return []


def n_mels(p) -> int:
    return 128 if Path(p.trtllm_whisper.checkpoint).stem in MEL_128 else 80


def convert_checkpoint_argv(p, output_dir) -> list[str]:
    """`python3 convert_checkpoint.py ...` (run in TensorRT-LLM's examples/models/core/whisper)."""
    w = p.trtllm_whisper
    ckpt = Path(w.checkpoint)
    argv = ["python3", "convert_checkpoint.py", "--model_dir", os.fspath(ckpt.parent), "--model_name", ckpt.stem,
            "--dtype", DTYPE, "--output_dir", os.fspath(output_dir)]
    if w.weight_only_precision != "none":
        argv += ["--use_weight_only", "--weight_only_precision", w.weight_only_precision]
    return argv


def _build(checkpoint_dir, output_dir, sizes: list[tuple[str, int]], plugins: list[tuple[str, str]]) -> list[str]:
    argv = ["trtllm-build", "--checkpoint_dir", os.fspath(checkpoint_dir), "--output_dir", os.fspath(output_dir)]
    argv += [a for name, value in sizes for a in (f"--{name}", str(int(value)))]
    for name, value in plugins:
        rendered, err = flag_value(name, value)  # perfdag's table of trtllm-build's plugin flags and their values
        if err:
            raise ValueError(f"trtllm-build --{name}: {err}")
        argv += [f"--{name}", rendered]
    return argv


def encoder_build_argv(p, checkpoint_dir, output_dir) -> list[str]:
    """The encoder engine: the example's flags (no GEMM or MoE plugin, BERT attention in float16)."""
    return _build(os.path.join(os.fspath(checkpoint_dir), "encoder"), os.path.join(os.fspath(output_dir), "encoder"),
                  [("max_batch_size", p.build.max_batch_size), ("max_input_len", ENCODER_FRAMES),
                   ("max_seq_len", ENCODER_FRAMES)],
                  [("moe_plugin", "disable"), ("gemm_plugin", "disable"), ("bert_attention_plugin", DTYPE)])


def decoder_build_argv(p, checkpoint_dir, output_dir) -> list[str]:
    """The decoder engine: cross-attending to ENCODER_FRAMES frames; paged KV cache and removed input
    padding (trtllm-build's defaults) are what in-flight batching under Triton needs."""
    w = p.trtllm_whisper
    return _build(os.path.join(os.fspath(checkpoint_dir), "decoder"), os.path.join(os.fspath(output_dir), "decoder"),
                  [("max_beam_width", w.max_beam_width), ("max_batch_size", p.build.max_batch_size),
                   ("max_seq_len", w.decoder_max_seq_len), ("max_input_len", w.decoder_max_input_len),
                   ("max_encoder_input_len", ENCODER_FRAMES)],
                  [("moe_plugin", "disable"), ("gemm_plugin", DTYPE), ("bert_attention_plugin", DTYPE),
                   ("gpt_attention_plugin", DTYPE)])


def _bool(value: bool) -> str:
    return "true" if value else "false"


def llm_model_config(p, engine_dir) -> str:
    """config.pbtxt of the tensorrt_llm model with both engines (the parameters NVIDIA's docs fill for whisper)."""
    r, w = p.runtime, p.trtllm_whisper
    engine_dir = os.fspath(engine_dir)
    params = {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": os.path.join(engine_dir, "decoder"),
        "encoder_model_path": os.path.join(engine_dir, "encoder"),
        "max_beam_width": str(w.max_beam_width),
        "batch_scheduler_policy": r.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": repr(float(r.kv_cache_free_gpu_mem_fraction)),
        "cross_kv_cache_fraction": repr(float(w.cross_kv_cache_fraction)),
        "exclude_input_in_output": _bool(r.exclude_input_in_output),
        "enable_chunked_context": _bool(r.enable_chunked_context),
        "enable_kv_cache_reuse": _bool(r.enable_kv_cache_reuse),
    }
    if r.max_tokens_in_paged_kv_cache is not None:
        params["max_tokens_in_paged_kv_cache"] = str(r.max_tokens_in_paged_kv_cache)
    for key in ("tokenizer_dir", "xgrammar_tokenizer_info_path", "guided_decoding_backend"):  # read with no default
        params[key] = ""
    return render_model_config(LLM_MODEL, backend="tensorrtllm", max_batch_size=p.build.max_batch_size,
                               decoupled=False, parameters=params, max_queue_delay_us=r.max_queue_delay_microseconds,
                               inputs=LLM_INPUTS, outputs=LLM_OUTPUTS)


def bls_model_config(p, engine_dir) -> str:
    """config.pbtxt of whisper_bls: n_mels from the checkpoint's name, the encoder engine as NVIDIA's docs fill
    engine_dir, KIND_CPU instances (the model puts its own tensors on the GPU)."""
    w = p.trtllm_whisper
    params = {"n_mels": str(n_mels(p)), "engine_dir": os.path.join(os.fspath(engine_dir), "encoder"),
              "zero_pad": _bool(w.zero_pad)}
    return render_model_config(BLS_MODEL, backend="python", max_batch_size=p.build.max_batch_size, decoupled=False,
                               parameters=params, inputs=BLS_INPUTS, outputs=BLS_OUTPUTS, instance_count=w.bls_instances)


def model_configs(p, engine_dir) -> dict[str, str]:
    """{model name: config.pbtxt}, each parsed as Triton's ModelConfig before it is returned."""
    configs = {BLS_MODEL: bls_model_config(p, engine_dir), LLM_MODEL: llm_model_config(p, engine_dir)}
    for name, text in configs.items():
        check_model_config(text, expected_name=name, source=f"{name}/config.pbtxt")
    return configs


def render(p, *, checkpoint_dir, engine_dir) -> dict:
    """Everything this form runs, as data: the three commands and the repository's configs."""
    return {"convert_checkpoint": convert_checkpoint_argv(p, checkpoint_dir),
            "trtllm_build": {"encoder": encoder_build_argv(p, checkpoint_dir, engine_dir),
                             "decoder": decoder_build_argv(p, checkpoint_dir, engine_dir)},
            "configs": model_configs(p, engine_dir)}


def write(p, out_dir) -> dict:
    """Writes OUT/commands.sh and OUT/model_repo/ (both configs; whisper_bls/1/ with NVIDIA's model files and the
    assets copied from the configured directories), engines expected in OUT/engines. Built beside OUT and renamed
    into place, so OUT either does not exist or is whole; an existing OUT is refused (FileExistsError)."""
    out = Path(out_dir).absolute()
    if out.exists():
        raise FileExistsError(out)
    w = p.trtllm_whisper
    done = render(p, checkpoint_dir=out / "checkpoint", engine_dir=out / "engines")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, text in done["configs"].items():
            (tmp / "model_repo" / name / "1").mkdir(parents=True)
            (tmp / "model_repo" / name / "config.pbtxt").write_text(text)
        for src, names in ((w.bls_model_dir, BLS_SOURCES), (w.assets_dir, ASSETS)):
            for n in names:
                shutil.copyfile(Path(src).expanduser() / n, tmp / "model_repo" / BLS_MODEL / "1" / n)
        lines = ["#!/bin/sh", "# whisper's Triton form, rendered by perfdag (python -m pipeline whisper-triton); "
                 "not run by it.", "# Run the first line in TensorRT-LLM's examples/models/core/whisper.", "set -e"]
        lines += [shlex.join(done["convert_checkpoint"]), shlex.join(done["trtllm_build"]["encoder"]),
                  shlex.join(done["trtllm_build"]["decoder"])]
        (tmp / "commands.sh").write_text("\n".join(lines) + "\n")
        os.rename(tmp, out)  # fails if OUT appeared meanwhile: nothing is mixed into it
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out": os.fspath(out), "models": list(done["configs"]), "commands": out / "commands.sh"}


def bls_request_arrays(wav, text_prefix: str = "") -> dict:
    """One clip as whisper_bls takes it: 16 kHz float32 samples, their count, and the decoder prompt ('' lets the
    model use <|startoftranscript|><|en|><|transcribe|><|notimestamps|>); batch dimension first."""
    import numpy as np

    samples = np.asarray(wav, dtype=np.float32).reshape(1, -1)
    return {"TEXT_PREFIX": np.array([[text_prefix.encode()]], dtype=object), "WAV": samples,
            "WAV_LENS": np.array([[samples.shape[1]]], dtype=np.int32)}
