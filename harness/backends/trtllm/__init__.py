"""The `trtllm` (GPU) backend: TensorRT-LLM engines served by Triton's tensorrtllm backend.

Everything that decides *what* runs is a pure function of the resolved `Params`, tested on CPU:

- `quant`   modelopt preset + KV-cache config, checkpoint export plan (TRTLLM_CHECKPOINT_FLAGS)
- `build`   the `trtllm-build` argv, what it would reject or silently change
- `engine_check`  the built engine's config.json against what was asked
- `layout`  data-parallel ranks, their GPUs, and how they are spread over tritonserver processes
- `repo`    the `tensorrt_llm` model's config.pbtxt (TRTLLM_RUNTIME_FLAGS)
- `launch`  tritonserver / mpirun command lines
- `rules`   cross-field validation for build.backend == trtllm

The calls that need a GPU (`quantize_for_trtllm`, `run_trtllm_build`, the server processes) are
thin wrappers around those plans. No luigi imports.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

from harness.backends.base import Backend, Checks, Key, LaunchStep, Step, Work
from harness.backends.trtllm import build as trtllm_build  # trtllm_version: read at call time
from harness.backends.trtllm.build import (
    build_problems,
    engine_key_tools,
    run_trtllm_build,
    trtllm_build_args,
)
from harness.backends.trtllm.common import TrtllmError, raise_if
from harness.backends.trtllm.engine_check import check_engine_config
from harness.backends.trtllm.launch import pick_ports, serving_key_tools, tritonserver_commands
from harness.backends.trtllm.layout import num_servers, server_layout
from harness.backends.trtllm.quant import checkpoint_config_problems, export_plan, quantize_for_trtllm
from harness.backends.trtllm.repo import fill_trtllm_repos, render_server_repos
from harness.backends.trtllm import whisper
from harness.backends.trtllm.rules import trtllm_notes, trtllm_problems
from harness.backends.vision import text_only_problems
from harness.cache.executed import normalise
from harness.cache.versions import versions
from harness.model.calibration import calibration_prompts
from harness.model.corpus import corpus_sha256
from harness.serving.agreement import Expected
from harness.serving.endpoints import parse_endpoints
from harness.serving.launcher import external_servers, launch
from harness.serving.ports import free_port, port_count_problems
from harness.serving.pinned import pins_doc, pins_for
from harness.serving.private import PLACEHOLDER, Plan, copies_of, wrap
from harness.serving.triton.pbtxt import model_names

__all__ = ["TrtllmBackend", "TrtllmError"]


WHISPER_RENDERED_ONLY = (
    "build.backend: trtllm for whisper is rendered and checked, not run (no GPU has run it, and LoadGen's Triton cores "
    "send token ids, not audio); write its commands and model repository with `python -m pipeline whisper-triton`, "
    "and measure whisper with build.backend=openai (vLLM)")


@lru_cache(maxsize=1)
def engine_key_tools_cached() -> dict:
    """TensorRT-LLM version + GPU architecture (runs nvidia-smi: once per process)."""
    return engine_key_tools()


def decoupled(p) -> bool:
    """Server and Interactive stream tokens: the tensorrt_llm model is decoupled; Offline: not. A streamed Offline run
    (harness.stream) is decoupled too."""
    return p.loadgen.scenario != "Offline" or bool(p.harness.stream)


class Quantize(Step):
    """modelopt PTQ exported as a TensorRT-LLM checkpoint, sharded for tp x pp and cast to the dtype."""

    def key(self, w: Work) -> Key:
        # perfdag's own part of the checkpoint: the presets in modelopt's running shape, unfused
        # transformers-5 experts, and the source's RoPE written after export (then checked); the export
        # modelopt runs (presets, exporter and its arguments) is keyed as what it is handed.
        # modelopt's TensorRT-LLM exporter imports tensorrt_llm when it is installed.
        p = w.params
        return Key(reads=("quantize", "build.device", "build.tp_size", "build.pp_size", "build.dtype"),
                   tools={**versions("nvidia-modelopt", "torch", "transformers"), "tensorrt_llm": trtllm_build.trtllm_version()},
                   code=("harness.model.calibration", "harness.model.tokenizer",
                         "harness.model.corpus", "harness.backends.mtq_config",
                         "harness.backends.moe", "harness.backends.export_checks", "harness.backends.checkpoint"),
                   executed={"export": export_plan(p)},
                   inputs={"calibration_corpus_sha256": corpus_sha256(), "export": "trtllm-checkpoint"})

    def run(self, w: Work) -> dict:
        p, src = w.params, w.inputs["model"]
        plan = export_plan(p)
        prompts = calibration_prompts(src, plan["calib_size"], plan["calib_max_len"])
        info = quantize_for_trtllm(src, w.out_dir / "checkpoint", p, prompts, log=w.log)
        raise_if(checkpoint_config_problems(w.out_dir / "checkpoint", p))
        return {"checkpoint": "checkpoint", "quantization": info, "export": plan}


class Build(Step):
    """trtllm-build; an engine is never reused across TensorRT-LLM versions or GPU generations."""

    def key(self, w: Work) -> Key:
        return Key(reads=("build",), tools=engine_key_tools_cached(),
                   executed={"argv": trtllm_build_args(w.params, "<checkpoint>", "<engine>")})

    def run(self, w: Work) -> dict:
        p, checkpoint = w.params, w.inputs["checkpoint"]
        raise_if(build_problems(p))
        # Cheap, before a build of hours: the checkpoint still says what the source model is.
        raise_if(checkpoint_config_problems(checkpoint, p))
        args = trtllm_build_args(p, checkpoint, w.out_dir / "engine")
        run_trtllm_build(args, w.out_dir / "trtllm-build.log")
        raise_if(check_engine_config(w.out_dir / "engine", p, engine_key_tools_cached()))
        return {"engine": "engine", "trtllm_build_args": args}


class Configure(Step):
    """The tensorrt_llm model's repositories, one per tritonserver process."""

    def key(self, w: Work) -> Key:
        return Key(reads=("runtime", "triton.model_name", "build.backend", "build.tp_size", "build.pp_size"),
                   executed={"repos": render_server_repos(w.params, w.rel("engine"), decoupled=decoupled(w.params))},
                   inputs={"decoupled": decoupled(w.params), "num_servers": num_servers(w.params)})

    def run(self, w: Work) -> dict:  # tritonserver runs in the root: the engine by its path from there
        return {"layout": fill_trtllm_repos(w.out_dir, w.rel("engine"), w.params, decoupled=decoupled(w.params))}


class Launch(LaunchStep):
    """tritonserver (mpirun for tp*pp > 1) with the tensorrtllm backend, or external endpoints."""

    def expected(self, p) -> Expected:
        t = p.triton
        names = tuple(model_names(t.model_name, p.runtime.instances_per_server))
        if t.endpoints:
            return Expected(external=True, protocol=self.protocol, models=names,
                            endpoints=tuple(parse_endpoints(t.endpoints)))
        return Expected(external=False, protocol=self.protocol, models=tuple(m for plan in server_layout(p)
                                                                            for m in plan.models),
                        bind=t.bind, ports=tuple(t.grpc_ports), port_field="grpc_port")

    def key(self, w: Work) -> Key:
        return Key(reads=("triton.bind", "triton.grpc_ports", "triton.endpoints", "triton.binary"),
                   tools={**serving_key_tools(), **versions("tritonclient")}, executed=self._executed(w))

    def _executed(self, w: Work) -> dict:
        p = w.params
        if p.triton.endpoints:
            return {}
        ports = [(g, "<http_port>", "<metrics_port>") for g in
                 (p.triton.grpc_ports or ["<grpc_port>"] * len(server_layout(p)))]
        specs = tritonserver_commands(p, f"{PLACEHOLDER}/{w.rel('repo')}", ports, cwd="<root>")
        return normalise({"argv": [wrap(s.argv) for s in specs], "env": [s.env for s in specs], "cwd": PLACEHOLDER})

    def run(self, w: Work) -> dict:
        p, t, root = w.params, w.params.triton, w.root
        if t.endpoints:
            return {"servers": external_servers(parse_endpoints(t.endpoints),
                                                model_names(t.model_name, p.runtime.instances_per_server),
                                                t.ready_timeout_s)}
        # Each server runs from its private directory (serving/private.py): its repository copied there, the
        # engine pinned at the relative path the repository names from there (where it runs).
        repo = str(w.inputs["repo"])
        pins = pins_for(root, w.verified, copied=(repo,))
        specs = tritonserver_commands(p, f"{PLACEHOLDER}/{w.rel('repo')}", pick_ports(p, free_port), cwd=str(root))
        plans = [Plan(root=str(root), copies=tuple(copies_of(repo, w.verified[repo], root, f"server_{s.index}")),
                      pins=pins) for s in specs]
        specs = [dataclasses.replace(s, argv=wrap(s.argv), private=plan) for s, plan in zip(specs, plans)]
        return {"servers": launch(specs, w.out_dir, root=w.root, ready_timeout_s=t.ready_timeout_s,
                                  warmup_prompt=[1, 2, 3, 4], streaming=w.layout["decoupled"], on_spawn=w.on_spawn,
                                  log=w.log, names={str(root): "<root>"}),
                "loaded": pins_doc(pins, root)}


class TrtllmBackend(Backend):
    name = "trtllm"
    quantize = Quantize()
    build = Build()
    configure = Configure()
    launch = Launch()

    def check(self, p) -> Checks:
        if whisper.asks_for_it(p):  # its own engines and models: the LLM checks below do not apply
            return Checks(whisper.problems(p) + [WHISPER_RENDERED_ONLY], whisper.notes(p))
        if p.trtllm_whisper is not None:
            return Checks(["trtllm_whisper: read only for loadgen.mlperf_model=whisper; remove it"], [])
        generate = ["triton.protocol: generate is offered with build.backend=torch only so far; use grpc"] \
            if p.triton.protocol != "grpc" else []
        # its servers follow runtime/triton, not a layout's roles: a layout would be silently ignored
        layout = ["layout: the trtllm backend does not launch serving layouts yet (issue 34); remove the layout "
                  "section (build.backend=torch launches data-parallel servers over nodes)"] if p.layout else []
        return Checks(text_only_problems(p) + trtllm_problems(p) + generate + layout + port_count_problems("triton.grpc_ports", p.triton.grpc_ports, num_servers(p), " (triton.num_servers)"), trtllm_notes(p))
