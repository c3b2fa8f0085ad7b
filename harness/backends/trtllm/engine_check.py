"""The built engine's config.json against what was asked: trtllm-build silently overrides settings,
so BuildEngine compares what it got (sizes, mapping, quantization, plugin switches, version)
with the parameters before the engine is published."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from harness.backends.trtllm.build import BUILD_FLAGS, flag_value
from harness.backends.trtllm.quant import export_plan


def load_engine_config(engine_dir_or_config) -> dict:
    if isinstance(engine_dir_or_config, Mapping):
        return dict(engine_dir_or_config)
    p = Path(engine_dir_or_config)
    return json.loads((p / "config.json" if p.is_dir() else p).read_text())


def check_engine_config(engine_dir_or_config, params, tools: Mapping[str, str] | None = None) -> list[str]:
    """Differences between an engine's config.json and the parameters (empty: it is the engine asked for).

    Layout (tensorrt_llm.builder.EngineConfig): {"version", "pretrained_config": {"dtype", "mapping":
    {"world_size", "tp_size", "pp_size"}, "quantization": {"quant_algo", "kv_cache_quant_algo"}},
    "build_config": {"max_batch_size", "max_num_tokens", "max_seq_len", "max_input_len", "kv_cache_type",
    "plugin_config": {...}}}.
    """

    cfg = load_engine_config(engine_dir_or_config)
    b = params.build
    pre, bc = cfg.get("pretrained_config", {}), cfg.get("build_config", {})
    mapping, quant, plugins = pre.get("mapping", {}), pre.get("quantization", {}), bc.get("plugin_config", {})
    out = []

    def diff(where, got, want):
        if got != want:
            out.append(f"engine {where}: {got!r}, asked {want!r}; rebuild the engine (BuildEngine) with these parameters")

    for key in ("max_batch_size", "max_num_tokens", "max_seq_len", "max_input_len"):
        diff(f"build_config.{key}", bc.get(key), getattr(b, key))
    diff("pretrained_config.mapping.tp_size", mapping.get("tp_size"), b.tp_size)
    diff("pretrained_config.mapping.pp_size", mapping.get("pp_size"), b.pp_size)
    if "world_size" in mapping:
        diff("pretrained_config.mapping.world_size", mapping["world_size"], b.tp_size * b.pp_size)
    plan = export_plan(params)
    diff("pretrained_config.dtype", pre.get("dtype"), plan["kwargs"]["dtype"])
    diff("pretrained_config.quantization.quant_algo", quant.get("quant_algo"), plan["quant_algo"])
    diff("pretrained_config.quantization.kv_cache_quant_algo", quant.get("kv_cache_quant_algo"),
         plan["kv_cache_quant_algo"])
    if "kv_cache_type" in bc:
        diff("build_config.kv_cache_type", str(bc["kv_cache_type"]).upper(), "PAGED")
    for name in sorted(b.flags):
        spec = BUILD_FLAGS.get(name)
        value = flag_value(name, b.flags[name])[0] if spec else None  # None: invalid, reported elsewhere
        if spec is None or value is None or name not in plugins:
            continue
        if spec.kind == "switch":
            diff(f"build_config.plugin_config.{name}", plugins[name], value == "enable")
        elif spec.kind == "plugin":
            diff(f"build_config.plugin_config.{name}", plugins[name], None if value == "disable" else value)
        elif spec.kind == "int":
            diff(f"build_config.plugin_config.{name}", plugins[name], int(value))
    want_version = (tools or {}).get("tensorrt_llm")
    if want_version and want_version != "absent" and cfg.get("version") not in (None, want_version):
        out.append(f"engine version: built by TensorRT-LLM {cfg.get('version')}, this host has {want_version}; "
                   "engines do not load across versions, rebuild")
    return out
