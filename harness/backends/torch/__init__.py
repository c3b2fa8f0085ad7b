"""The `torch` backend (default; CPU, also CUDA): modelopt quantization exported as an HF checkpoint,
a torch "engine" directory, and a Triton Python-backend model with in-flight batching, served by
the tritonserver inside the nvidia-pytriton wheel.

Modules: quantize (modelopt), engine (decode the export, rebuild the model), batcher (in-flight
batching), triton_model/model.py (the Triton glue), repo (config.pbtxt). Heavy imports (torch,
modelopt, transformers) happen inside the methods that build.
"""
from __future__ import annotations

import dataclasses
import os

from harness.backends.base import Backend, Checks, Key, LaunchStep, Step, Work
from harness.backends.torch.quantize import quantize_checkpoint
from harness.backends.torch.repo import fill_repos, render_repos
from harness.backends.vision import text_only_problems
from harness.cache.executed import normalise
from harness.cache.versions import versions
from harness.config.schema import CPU_QUANT_FORMATS, GPU_ONLY_QUANT_FORMATS
from harness.model.calibration import calibration_prompts
from harness.model.corpus import corpus_sha256
from harness.serving.agreement import Expected
from harness.serving.endpoints import endpoint_problems, parse_endpoints
from harness.serving.launcher import external_servers, launch
from harness.serving.layout import node_targets, place, placed
from harness.serving.ports import port_count_problems, server_ports
from harness.serving.triton.pbtxt import model_names
from harness.serving.pinned import pins_doc, pins_for
from harness.serving.private import BLOCKER, PLACEHOLDER, Plan, copies_of, wrap
from harness.serving.triton.server import backend_copies, cpu_spec, env_overlay_described, server_env

# Flags the torch backend understands beyond the typed fields (none yet): anything else in a flag
# dict is meant for TensorRT-LLM and would be silently ignored on CPU, so it is an error.
FLAGS: dict[str, tuple[str, ...]] = {"quantize": (), "build": (), "runtime": ()}


def num_servers(p) -> int:
    """The layout's servers, else triton.num_servers, else one."""
    if p.layout is not None:  # (a layout without servers is refused by backends/roles.py)
        return p.layout.roles["server"].count if "server" in p.layout.roles else 1
    n = p.triton.num_servers
    return int(n) if n is not None else 1


def problems(p) -> list[str]:
    b, q = p.build, p.quantize
    out = text_only_problems(p)
    if b.tp_size * b.pp_size != 1:
        out.append(f"build.tp_size/pp_size: the torch backend runs one device per engine (got tp {b.tp_size} x "
                   f"pp {b.pp_size}); use runtime.instances_per_server or triton.num_servers for data "
                   "parallelism, or build.backend=trtllm")
    if b.device == "cpu" and q.format in GPU_ONLY_QUANT_FORMATS:
        out.append(f"quantize.format: {q.format} needs a GPU (modelopt cannot run it on CPU); on CPU use one "
                   f"of {', '.join(CPU_QUANT_FORMATS)}")
    if q.kv_cache_dtype != "none":
        out.append(f"quantize.kv_cache_dtype: {q.kv_cache_dtype} KV cache is not implemented by the torch "
                   "backend; use none or build.backend=trtllm")
    if b.device == "cpu" and b.dtype == "float16":
        out.append("build.dtype: float16 is not supported on CPU by the torch backend; use float32 or bfloat16")
    ignored = {"runtime": ("num_gpus", "gpu_device_ids", "kv_cache_free_gpu_mem_fraction", "enable_kv_cache_reuse",
                           "enable_chunked_context", "max_tokens_in_paged_kv_cache")}
    for section, fields in ignored.items():
        for f in sorted(set(fields) & getattr(p, section).model_fields_set):
            out.append(f"{section}.{f}: the torch backend ignores it (TensorRT-LLM only); remove it, "
                       "or use build.backend=trtllm")
    for section, known in FLAGS.items():
        for key in getattr(p, section).flags:
            if key not in known:
                allowed = ", ".join(k for k in type(getattr(p, section)).model_fields if k != "flags")
                out.append(f"{section}.flags.{key}: not a flag the torch backend knows; it accepts the "
                           f"section's own keys ({allowed})")
    return out + endpoint_problems(p.triton.endpoints) + port_count_problems("triton.grpc_ports", p.triton.grpc_ports, num_servers(p), " (triton.num_servers)")


def decoupled(p) -> bool:
    """Server and Interactive stream tokens (TTFT matters); Offline takes whole responses: a Triton
    model is decoupled (one response per token) or not. A streamed Offline run
    (harness.stream) is decoupled too."""
    return p.loadgen.scenario != "Offline" or bool(p.harness.stream)


class Quantize(Step):
    """modelopt PTQ, exported as a Hugging Face checkpoint (the openai backend shares it)."""

    def key(self, w: Work) -> Key:
        # calibration, the agreement measurement and the export call are perfdag's own code; prompts
        # come from the shipped corpus; backends that export alike share the checkpoint
        return Key(reads=("quantize", "build.device"), tools=versions("nvidia-modelopt", "torch", "transformers"),
                   code=("harness.model.calibration", "harness.model.tokenizer",
                         "harness.model.corpus", "harness.backends.torch.quantize",
                         "harness.backends.checkpoint", "harness.backends.mtq_config", "harness.backends.moe",
                         "harness.backends.export_checks"),
                   inputs={"calibration_corpus_sha256": corpus_sha256(), "export": "hf"})

    def run(self, w: Work) -> dict:
        q, src = w.params.quantize, w.inputs["model"]
        if q.format == "none":
            # Nothing to transform: point at the upstream checkpoint instead of copying it.
            return {"checkpoint": os.path.relpath(src, w.final_dir), "quantization": {"format": "none"}}
        prompts = calibration_prompts(src, q.calib_size, q.calib_max_len)
        info = quantize_checkpoint(src, w.out_dir / "checkpoint", q.format, prompts, device=w.params.build.device,
                                   log=w.log)
        w.log(f"Quantize {q.format}: greedy token agreement with the unquantized model "
              f"{info.get('greedy_token_agreement', float('nan')):.3f}")
        return {"checkpoint": "checkpoint", "quantization": info}


class Build(Step):
    """The torch engine: dequantized weights plus activation-quantization scales, and its limits."""

    def key(self, w: Work) -> Key:
        return Key(reads=("build",), tools=versions("torch", "transformers"),
                   code=("harness.backends.torch.engine", "harness.backends.checkpoint", "harness.backends.moe"))

    def run(self, w: Work) -> dict:
        from harness.backends.torch.engine import (
            build_torch_engine,  # lazy: keeps torch off the no-op path (keys, status)
        )
        b = w.params.build
        config = build_torch_engine(w.inputs["checkpoint"], w.out_dir / "engine", dtype=b.dtype, device=b.device,
                                    max_batch_size=b.max_batch_size, max_num_tokens=b.max_num_tokens,
                                    max_seq_len=b.max_seq_len, max_input_len=b.max_input_len)
        return {"engine": "engine", "engine_config": config}


class Configure(Step):
    """One Triton repository per server: a Python-backend model per engine instance."""

    def key(self, w: Work) -> Key:
        # The served model is perfdag's: the Triton glue, the batcher and the engine loader.
        return Key(reads=("runtime", "triton.model_name", "build.backend", "build.tp_size", "build.pp_size"),
                   code=("harness/backends/torch/triton_model/model.py", "harness.backends.torch.batcher",
                         "harness.serving.triton.python_model", "harness.backends.torch.engine",
                         "harness.backends.checkpoint", "harness.backends.moe"),
                   executed={"repos": self.render(w)},
                   inputs={"decoupled": decoupled(w.params), "num_servers": num_servers(w.params)})

    def render(self, w: Work) -> dict[str, dict[str, str]]:
        # A model directory is <root>/FillTritonRepo/<key16>/server_<i>/<model>: four levels down.
        return render_repos(w.params, os.path.join("..", "..", "..", "..", w.rel("engine")),
                            num_servers=num_servers(w.params), decoupled=decoupled(w.params))

    def run(self, w: Work) -> dict:
        return {"layout": fill_repos(w.out_dir, self.render(w), decoupled=decoupled(w.params))}


#: triton.protocol -> (the serving protocol, the port its clients use)
TRITON_PROTOCOLS = {"grpc": ("triton-grpc", "grpc"), "generate": ("triton-generate", "http")}


class Launch(LaunchStep):
    """CPU tritonservers (pytriton's binary) on the repositories, or external endpoints."""

    def protocol_for(self, params) -> str:
        return TRITON_PROTOCOLS[params.triton.protocol][0]

    def gpus(self, params) -> int:
        return 0  # the torch engine serves on CPU

    def expected(self, p) -> Expected:
        t, proto = p.triton, self.protocol_for(p)
        names = tuple(model_names(t.model_name, p.runtime.instances_per_server))
        if t.endpoints:
            return Expected(external=True, protocol=proto, models=names, endpoints=tuple(parse_endpoints(t.endpoints)))
        return Expected(external=False, protocol=proto, models=names, bind=None if p.layout else t.bind,
                        ports=tuple(t.grpc_ports), port_field="grpc_port")

    def key(self, w: Work) -> Key:
        # triton.protocol and layout are keyed only when set: at their defaults the servers and records are
        # those of before they existed, so their artifacts keep their keys
        chosen = ("triton.protocol",) if w.params.triton.protocol != "grpc" else ()
        layout = ("layout",) if w.params.layout is not None else ()
        return Key(reads=("triton.bind", "triton.grpc_ports", "triton.endpoints", "triton.binary", *chosen, *layout),
                   tools=versions("nvidia-pytriton", "tritonclient"), executed=self._executed(w))

    def _specs(self, p, repo: str, servers, ports, cwd, env, shm=None, plans=None):
        # Each server runs from its private directory (serving/private.py): its repository and the Python
        # backend copied there, the engine pinned where the repository's relative path expects it.
        binary = None if p.triton.binary == "auto" else p.triton.binary
        protocol, serve = TRITON_PROTOCOLS[p.triton.protocol]
        specs = [cpu_spec(i, f"{PLACEHOLDER}/{repo}/{srv['repo']}", srv["models"], ports[i], bind=p.triton.bind,
                          backend_dir=f"{PLACEHOLDER}/backend", cwd=cwd, env=env, shm=shm, binary=binary,
                          protocol=protocol, serve=serve)
                 for i, srv in enumerate(servers)]
        return [dataclasses.replace(s, argv=wrap(s.argv), private=plans[i] if plans else None)
                for i, s in enumerate(specs)]

    def _executed(self, w: Work) -> dict:
        p, t = w.params, w.params.triton
        if t.endpoints:
            return {}  # nothing is launched; the endpoints are keyed as parameters
        names = model_names(t.model_name, p.runtime.instances_per_server)
        n = num_servers(p)
        ports = [(t.grpc_ports[i] if t.grpc_ports else "<grpc_port>", "<http_port>", "<metrics_port>")
                 for i in range(n)]
        specs = self._specs(p, w.rel("repo"), [{"repo": f"server_{i}", "models": names} for i in range(n)], ports,
                            "<root>", env={}, shm="<shm>")
        return normalise({"argv": [s.argv for s in specs], "cwd": PLACEHOLDER, "env": env_overlay_described()})

    def _plans(self, w: Work) -> list[Plan]:
        """Each server's private directory: its repository and the Python backend, copied; the engine, pinned."""
        root, repo = str(w.root), str(w.inputs["repo"])
        pins = pins_for(root, w.verified, copied=(repo,))
        backend = backend_copies()
        return [Plan(root=root, copies=(*copies_of(repo, w.verified[repo], root, srv["repo"]), *backend), pins=pins,
                     empty=(f"backend/python/{BLOCKER}",)) for srv in w.layout["servers"]]

    def run(self, w: Work) -> dict:
        p, t, root = w.params, w.params.triton, w.root
        if t.endpoints:
            names = model_names(t.model_name, p.runtime.instances_per_server)
            return {"servers": external_servers(parse_endpoints(t.endpoints), names, t.ready_timeout_s,
                                                protocol=self.protocol_for(p))}
        ports = server_ports(len(w.layout["servers"]), t.bind, t.grpc_ports)
        plans = self._plans(w)
        specs = self._specs(p, w.rel("repo"), w.layout["servers"], ports, str(root), server_env(), plans=plans)
        if p.layout is not None:  # data-parallel servers over the allocation's nodes
            specs = placed(specs, place(p.layout), node_targets(p.layout, t.bind, "triton.bind"))
        return {"servers": launch(specs, w.out_dir, root=w.root, ready_timeout_s=t.ready_timeout_s, warmup_prompt=[1, 2, 3, 4],
                                  streaming=w.layout["decoupled"], on_spawn=w.on_spawn, log=w.log,
                                  names={str(root): "<root>"}),
                "loaded": pins_doc((p for plan in plans for p in plan.pins), root)}


class TorchBackend(Backend):
    name = "torch"
    quantize = Quantize()
    build = Build()
    configure = Configure()
    launch = Launch()

    def check(self, p) -> Checks:
        return Checks(problems(p), [])
