"""The torch backend's "engine": a directory a plain PyTorch model is rebuilt from.

Reads a plain HF checkpoint or a modelopt HF export. Plain `from_pretrained` on a modelopt
export is wrong, silently: transformers logs "Unknown quantization type ... skip" and loads
int8/fp8 codes as floats without their scales. So the export's tensors are decoded here and
each quantized nn.Linear becomes a `QuantLinear` reproducing modelopt's fake-quant numerics.

Exports of modelopt 0.37 (TensorRT-LLM 1.1/1.2's) and 0.47 have the same tensor layout. A
Mixtral export holds one tensor set per expert (`block_sparse_moe.experts.K.w1`...); under
transformers 5, whose Mixtral stores experts fused, the engine model gets per-expert linears
(harness/backends/moe.py) so each expert keeps its own scales.

Engine directory:
  weights.safetensors  dequantized weights (engine dtype) + per-layer `input_scale` and
                       `pre_quant_scale` (the activation quantization modelopt applies)
  hf_config.json       the HF model config (config.json is the engine's own)
  generation_config.json, tokenizer files (when the checkpoint has them)
  config.json          {backend, dtype, device, limits, quantization: {...}, model: {...}}
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from torch import nn

from harness.backends.checkpoint import TOKENIZER_FILES, hf_dtype_kwargs
from harness.backends.moe import unfused_shell
from harness.errors import BuildError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# hf_quant_config.json quant_algo -> (format, weight code dtype, activation quantization)
EXPORT_ALGOS = {
    "W8A16": ("int8", torch.int8, None),
    "W8A8_SQ_PER_CHANNEL": ("int8_sq", torch.int8, "int8"),
    "FP8": ("fp8", torch.float8_e4m3fn, "fp8"),
    "W4A16_AWQ": ("int4_awq", torch.uint8, None),
}
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max, modelopt's e4m3 bound
INT8_MAX = 127.0


class EngineBuildError(BuildError, ValueError):
    """The engine cannot be built as requested; the message names the field and the fix."""


# ---------------------------------------------------------------- activation fake quant

def fake_quant_int8(x: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    """modelopt `_tensor_quant` (8 bit, signed, narrow_range=False): bounds [-128, 127], in fp32."""
    scale = INT8_MAX / amax.float()
    q = torch.clamp((x.float() * scale).round_(), -INT8_MAX - 1, INT8_MAX)
    return (q / scale).to(x.dtype)


def fake_quant_fp8(x: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    """modelopt `_fp8_eager`: scale to the e4m3 range, clamp, cast to fp8 and back, in fp32."""
    scale = FP8_MAX / amax.float()
    q = (x.float() * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (q.float() * (1 / scale)).to(x.dtype)


class QuantLinear(nn.Module):
    """nn.Linear with modelopt's activation path: x * pre_quant_scale -> fake quant -> x @ W^T.

    The weight is already dequantized (codes x scales) at build time, so it equals modelopt's
    fake-quantized weight; only the activations are quantized at run time.
    """

    def __init__(self, in_features, out_features, bias, act_quant, has_pre_quant_scale, dtype):
        super().__init__()
        self.in_features, self.out_features, self.act_quant = in_features, out_features, act_quant
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.pre_quant_scale = (nn.Buffer(torch.empty(in_features, dtype=dtype))
                                if has_pre_quant_scale else None)
        # amax = input_scale * bound (modelopt exports input_scale = amax / bound).
        self.input_scale = nn.Buffer(torch.empty((), dtype=torch.float32)) if act_quant else None

    def forward(self, x):
        if self.pre_quant_scale is not None:
            x = x * self.pre_quant_scale
        if self.act_quant == "int8":
            x = fake_quant_int8(x, self.input_scale * INT8_MAX)
        elif self.act_quant == "fp8":
            x = fake_quant_fp8(x, self.input_scale * FP8_MAX)
        return nn.functional.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in={self.in_features}, out={self.out_features}, act={self.act_quant}, "
                f"pre_quant_scale={self.pre_quant_scale is not None}")


# ---------------------------------------------------------------- reading checkpoints

def read_quant_config(ckpt: Path) -> dict | None:
    """modelopt's quantization section (hf_quant_config.json, else config.json), None if plain."""
    hq = ckpt / "hf_quant_config.json"
    if hq.is_file():
        q = json.loads(hq.read_text()).get("quantization") or {}
        return q if q.get("quant_algo") else None
    q = json.loads((ckpt / "config.json").read_text()).get("quantization_config")
    if not q:
        return None
    if q.get("quant_method") != "modelopt":
        raise EngineBuildError(
            f"checkpoint {ckpt} is quantized with quant_method={q.get('quant_method')!r}; the torch "
            f"engine reads only modelopt exports (quantize.format) or unquantized checkpoints")
    return {"quant_algo": q.get("quant_algo"), "exclude_modules": q.get("ignore", []),
            "group_size": q.get("group_size")}


def _read_safetensors(ckpt: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    files = sorted(ckpt.glob("*.safetensors"))
    if not files:
        raise EngineBuildError(f"quantized checkpoint {ckpt} has no *.safetensors files")
    sd = {}
    for f in files:
        sd.update(load_file(str(f)))
    return sd


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of modelopt `pack_int4_in_uint8` (2D): byte [o//2, i] holds rows 2k (low) and 2k+1 (high)."""
    p = packed.view(torch.uint8).T.to(torch.int16)            # [in, out/2]
    lo, hi = p & 0x0F, (p >> 4) & 0x0F
    codes = torch.stack([lo, hi], dim=-1).reshape(p.shape[0], -1)  # [in, out]
    codes = torch.where(codes >= 8, codes - 16, codes)          # two's complement nibble
    return codes.T.contiguous()                                 # [out, in]


def dequantize(name: str, fmt: str, w: torch.Tensor, scale: torch.Tensor, group_size: int | None) -> torch.Tensor:
    """Exported codes x weight_scale, in fp32 (the value modelopt's weight fake quant produces)."""
    if fmt in ("int8", "int8_sq"):          # int8 [out, in], per-output-channel scale [out]
        return w.float() * scale.float()[:, None]
    if fmt == "fp8":                        # e4m3 [out, in], per-tensor scale []
        return w.float() * scale.float()
    codes = unpack_int4(w).float()          # int4 [out, in]; scale [out, in/group]
    group = group_size or codes.shape[1] // scale.shape[1]
    if scale.shape != (codes.shape[0], codes.shape[1] // group):
        raise EngineBuildError(f"{name}: int4 weight_scale shape {tuple(scale.shape)} does not fit weight "
                               f"{tuple(codes.shape)} with group_size {group}; the export looks corrupt")
    return codes * scale.float().repeat_interleave(group, dim=1)


def _decode_export(ckpt: Path, quant: dict, dtype: torch.dtype):
    """Returns (format, engine state dict, per-layer summary) for a modelopt export."""
    algo = quant.get("quant_algo")
    if algo not in EXPORT_ALGOS:
        raise EngineBuildError(
            f"checkpoint {ckpt} uses modelopt quant_algo={algo!r}, which the CPU torch engine does not "
            f"implement; re-quantize with quantize.format in {sorted(f for f, _, _ in EXPORT_ALGOS.values())} "
            f"(or none), or use the trtllm backend on a GPU")
    if quant.get("kv_cache_quant_algo"):
        raise EngineBuildError(f"checkpoint {ckpt} has kv_cache_quant_algo={quant['kv_cache_quant_algo']!r}; "
                               f"the torch engine keeps the KV cache in the engine dtype: set quantize.kv_cache_dtype='none'")
    fmt, code_dtype, act = EXPORT_ALGOS[algo]
    src = _read_safetensors(ckpt)
    prefixes = sorted(k[: -len(".weight_scale")] for k in src if k.endswith(".weight_scale"))
    sd, layers = {}, {}
    for p in prefixes:
        w, scale = src.pop(f"{p}.weight"), src.pop(f"{p}.weight_scale")
        if f"{p}.weight_scale_2" in src:
            raise EngineBuildError(f"{p} has weight_scale_2 (two-level scaling, e.g. NVFP4/W4A8), which "
                                   f"quant_algo={algo} should not have; the torch engine cannot decode it")
        if w.dtype != code_dtype:
            raise EngineBuildError(f"{p}.weight is {w.dtype} but quant_algo={algo} stores {code_dtype}")
        sd[f"{p}.weight"] = dequantize(p, fmt, w, scale, quant.get("group_size")).to(dtype)
        pqs, ins = src.pop(f"{p}.pre_quant_scale", None), src.pop(f"{p}.input_scale", None)
        if act and ins is None:
            raise EngineBuildError(f"{p} has no input_scale but quant_algo={algo} quantizes activations")
        if pqs is not None:
            sd[f"{p}.pre_quant_scale"] = pqs.to(dtype)
        if act:
            sd[f"{p}.input_scale"] = ins.float().reshape(())
        granularity = ("per_tensor" if scale.dim() == 0 else "per_channel" if scale.dim() == 1
                       else f"per_group_{sd[f'{p}.weight'].shape[1] // scale.shape[1]}")
        layers[p] = {"weight": fmt.split("_")[0], "weight_scale": granularity,
                     "input": act, "pre_quant_scale": pqs is not None}
    leftover = [k for k in src if k.rsplit(".", 1)[-1] in ("input_scale", "pre_quant_scale", "k_scale", "v_scale")]
    if leftover:
        raise EngineBuildError(f"checkpoint {ckpt} has quantization tensors the torch engine does not handle: "
                               f"{leftover[:4]}")
    for k, v in src.items():  # unquantized tensors (embeddings, norms, lm_head)
        sd[k] = v.to(dtype) if v.is_floating_point() else v
    return fmt, sd, layers


def _check_request(hf_cfg, dtype, device, max_batch_size, max_num_tokens, max_seq_len, max_input_len):
    if dtype not in DTYPES:
        raise EngineBuildError(f"build.dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if device not in ("cpu", "cuda"):
        raise EngineBuildError(f"build.device={device!r} is not supported; use 'cpu' or 'cuda'")
    if device == "cuda" and not torch.cuda.is_available():
        raise EngineBuildError("build.device='cuda' but torch sees no CUDA device; set build.device='cpu'")
    if device == "cuda" and dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
        raise EngineBuildError("build.dtype='bfloat16' is not supported by this GPU; use float16 or float32")
    if max_batch_size < 1:
        raise EngineBuildError(f"build.max_batch_size={max_batch_size} must be >= 1")
    limit = getattr(hf_cfg, "max_position_embeddings", None)
    if limit and max_seq_len > limit:
        raise EngineBuildError(f"build.max_seq_len={max_seq_len} exceeds the model's max_position_embeddings="
                               f"{limit}; lower build.max_seq_len to <= {limit}")
    if max_input_len >= max_seq_len:
        raise EngineBuildError(f"build.max_input_len={max_input_len} must be < build.max_seq_len={max_seq_len} "
                               f"to leave room for output tokens; lower max_input_len or raise max_seq_len")
    if max_num_tokens < max_input_len:
        raise EngineBuildError(f"build.max_num_tokens={max_num_tokens} is smaller than build.max_input_len="
                               f"{max_input_len}, so a full-length prompt could never be scheduled; "
                               f"raise max_num_tokens to >= {max_input_len}")


def _hf_config_dict(ckpt: Path) -> dict:
    d = json.loads((ckpt / "config.json").read_text())
    d.pop("quantization_config", None)  # the engine's weights are plain floats now
    return d


def _config_from_dict(d: dict):
    from transformers import AutoConfig
    d = dict(d)
    return AutoConfig.for_model(d.pop("model_type"), **d)


def build_torch_engine(checkpoint_dir, out_dir, *, dtype: str = "float32", max_batch_size: int,
                       max_num_tokens: int, max_seq_len: int, max_input_len: int, device: str = "cpu") -> dict:
    """Decodes `checkpoint_dir` (plain HF or modelopt export) into an engine directory; returns its config."""
    from safetensors.torch import save_file

    ckpt, out = Path(checkpoint_dir), Path(out_dir)
    if not (ckpt / "config.json").is_file():
        raise EngineBuildError(f"checkpoint directory {ckpt} has no config.json")
    hf_dict = _hf_config_dict(ckpt)
    hf_cfg = _config_from_dict(hf_dict)
    _check_request(hf_cfg, dtype, device, max_batch_size, max_num_tokens, max_seq_len, max_input_len)
    tdtype = DTYPES[dtype]

    quant = read_quant_config(ckpt)
    if quant is None:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(str(ckpt), **hf_dtype_kwargs(tdtype))
        sd, fmt, layers = model.state_dict(), "none", {}
        n_params = sum(p.numel() for p in model.parameters())
    else:
        fmt, sd, layers = _decode_export(ckpt, quant, tdtype)
        n_params = None
    # safetensors refuses aliased tensors (tied embeddings); the tie is restored at load.
    seen, weights = set(), {}
    for k, v in sd.items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        weights[k] = v.contiguous()
    if n_params is None:
        n_params = sum(v.numel() for k, v in weights.items() if not k.endswith(("input_scale", "pre_quant_scale")))

    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "weights.safetensors"))
    (out / "hf_config.json").write_text(json.dumps(hf_dict, indent=2))
    for name in (*TOKENIZER_FILES, "generation_config.json"):
        if (ckpt / name).is_file():
            shutil.copy2(ckpt / name, out / name)

    config = {
        "backend": "torch", "dtype": dtype, "device": device,
        "max_batch_size": max_batch_size, "max_num_tokens": max_num_tokens,
        "max_seq_len": max_seq_len, "max_input_len": max_input_len,
        "quantization": {
            "format": fmt,
            "quant_algo": quant and quant.get("quant_algo"),
            "group_size": quant and quant.get("group_size"),
            "exclude_modules": (quant or {}).get("exclude_modules", []),
            "quantized_layers": len(layers),
            "layers": layers,
        },
        "model": {
            "architecture": (hf_dict.get("architectures") or [None])[0],
            "model_type": hf_dict.get("model_type"),
            "num_parameters": n_params,
            "vocab_size": hf_cfg.vocab_size,
            "hidden_size": hf_cfg.hidden_size,
            "num_hidden_layers": hf_cfg.num_hidden_layers,
            "max_position_embeddings": getattr(hf_cfg, "max_position_embeddings", None),
        },
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return config


def _no_init():
    try:  # transformers-internal; without it we only lose time
        from transformers.initialization import no_init_weights
        return no_init_weights()
    except ImportError:
        import contextlib
        return contextlib.nullcontext()


def _module_path(key: str, modules: dict) -> str:
    """A checkpoint tensor name in this model's module naming: a Mixtral export names the MoE block
    `block_sparse_moe` (transformers 4), which transformers 5 calls `mlp`."""
    owner = key.rpartition(".")[0]
    if owner in modules or ".block_sparse_moe." not in key:
        return key
    alt = key.replace(".block_sparse_moe.", ".mlp.")
    return alt if alt.rpartition(".")[0] in modules else key


def load_torch_engine(engine_dir, device: str = "cpu"):
    """Rebuilds the model from an engine directory; returns (model in eval mode, engine config)."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    eng = Path(engine_dir)
    config = json.loads((eng / "config.json").read_text())
    if config.get("backend") != "torch":
        raise EngineBuildError(f"{eng} is a {config.get('backend')!r} engine, not a torch engine")
    dtype = DTYPES[config["dtype"]]
    hf_cfg = _config_from_dict(json.loads((eng / "hf_config.json").read_text()))
    sd = load_file(str(eng / "weights.safetensors"), device=device)
    with _no_init():  # random init of weights that are replaced right away is slow on big models
        model = AutoModelForCausalLM.from_config(hf_cfg, **hf_dtype_kwargs(dtype))
        if any(".experts.0.w1." in k for k in sd):  # per-expert weights; this transformers fuses them
            unfused_shell(model)
    modules = dict(model.named_modules())
    sd = {_module_path(k, modules): v for k, v in sd.items()}

    for name, info in config["quantization"]["layers"].items():
        name = _module_path(name + ".weight", modules).removesuffix(".weight")
        parent, _, child = name.rpartition(".")
        lin = model.get_submodule(name)
        model.get_submodule(parent).register_module(child, QuantLinear(
            lin.in_features, lin.out_features, lin.bias is not None, info["input"],
            info["pre_quant_scale"], dtype))

    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    tied = {"lm_head.weight"} if getattr(hf_cfg, "tie_word_embeddings", False) else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise EngineBuildError(f"{eng}/weights.safetensors does not match the model: missing {missing[:4]}, "
                               f"unexpected {unexpected[:4]}; rebuild the engine")
    if tied:
        model.tie_weights()
    return model.to(device).eval(), config
