"""The `openai` backend: an OpenAI-compatible server (trtllm-serve, vLLM, SGLang; `transformers serve`
on CPU), measured over HTTP by the LoadGen SUT's OpenAI core.

Quantize is the torch backend's (modelopt, exported as a Hugging Face checkpoint). BuildEngine:
for `transformers serve`, the torch engine's weights saved as a plain checkpoint (what actually
runs: plain `from_pretrained` mis-loads modelopt exports); for the GPU servers, which load
modelopt's export themselves, nothing to build (the artifact points at the checkpoint).
FillTritonRepo writes each server's configuration (trtllm-serve's --extra_llm_api_options YAML),
LaunchServers starts the servers (servers.py renders their argv).
"""
from __future__ import annotations

import os

import yaml

from harness.backends import torch as torch_backend
from harness.backends.base import Backend, Checks, Key, LaunchStep, Step, Work
from harness.backends.openai.endpoints import endpoint_problems, parse_endpoints
from harness.backends.openai.plain import WEIGHT_ONLY, write_plain_checkpoint, write_plain_multimodal
from harness.backends.openai.servers import dp_gpus, llm_api_options, served_name, server_argv, server_env
from harness.backends.vision import SERVED_BY, SPEECH_SERVED_BY, is_multimodal, is_speech, unquantized_problems
from harness.cache.executed import normalise
from harness.config.openai import TEXT_PROMPT_ROUTERS, through_router
from harness.config.openai import protocol as openai_protocol
from harness.mlperf import benchmarks
from harness.cache.versions import versions
from harness.backends.openai.disagg import render
from harness.backends.openai.layouts import (
    clash_problems,
    fixed_ports,
    launch_problems,
    layout_specs,
    port_clashes,
    port_names,
    port_needs,
)
from harness.errors import ServingError
from harness.serving.launcher import external_servers, launch, launch_in_order
from harness.serving.layout import LAUNCH_ORDER, node_targets, place
from harness.serving.ports import free_blocks, port_count_problems, server_ports
from harness.serving.spec import LaunchSpec

SERVER_PACKAGE = {"transformers": "transformers", "trtllm-serve": "tensorrt_llm", "vllm": "vllm",
                  "sglang": "sglang"}
# runtime fields transformers serve has no use for (setting one is a mistake, not a no-op)
TRANSFORMERS_IGNORES = ("num_gpus", "gpu_device_ids", "kv_cache_free_gpu_mem_fraction", "enable_kv_cache_reuse",
                        "enable_chunked_context", "max_tokens_in_paged_kv_cache", "instances_per_server",
                        "batch_scheduler_policy", "max_queue_delay_microseconds")


def num_servers(p) -> int:
    if p.openai.num_servers is not None:
        return p.openai.num_servers
    if p.openai.endpoints:
        return len(p.openai.endpoints)
    return 1 if p.loadgen.scenario == "Offline" else len(dp_gpus(p))


def problems(p) -> list[str]:
    o, b, q = p.openai, p.build, p.quantize
    out = []
    for section in ("quantize", "build", "runtime"):
        for key in getattr(p, section).flags:
            out.append(f"{section}.flags.{key}: the openai backend takes no flags; use the section's keys "
                       "(or openai.extra_args / openai.llm_api_options)")
    if p.model.checkpoint == "builtin-vl" and o.server != "transformers":
        out.append(SERVED_BY)
    if p.model.checkpoint == "builtin-whisper" and o.server != "transformers":
        out.append(SPEECH_SERVED_BY)
    if openai_protocol(p) == "openai-transcription" and o.server in ("trtllm-serve", "sglang") and not o.endpoints:
        out.append(f"openai.server: {o.server} has no /v1/audio/transcriptions here; serve Whisper with vllm "
                   "(GPU) or transformers (CPU)")
    if openai_protocol(p) == "openai-transcription" and o.server == "transformers" and o.continuous_batching:
        out.append("openai.continuous_batching: transformers serve transcribes only without it (its "
                   "/v1/audio/transcriptions answers 400 'requires sequential generation'); set it false")
    out += unquantized_problems(p)  # Quantize is the torch backend's for every server
    if o.server == "transformers":
        if q.format not in WEIGHT_ONLY:
            out.append(f"quantize.format: {q.format} quantizes activations, which a plain checkpoint cannot carry; "
                       f"transformers serve runs {', '.join(WEIGHT_ONLY)}")
        if b.tp_size * b.pp_size != 1:
            out.append("build.tp_size/pp_size: transformers serve runs one device per server; use 1")
        if q.kv_cache_dtype != "none":
            out.append("quantize.kv_cache_dtype: transformers serve keeps a full-precision KV cache; use none")
        if b.device == "cpu" and b.dtype == "float16":
            out.append("build.dtype: float16 is not supported on CPU; use float32 or bfloat16")
        for f in sorted(set(TRANSFORMERS_IGNORES) & p.runtime.model_fields_set):
            out.append(f"runtime.{f}: transformers serve ignores it; remove it")
        if o.prompt == "token_ids":
            out.append("openai.prompt: transformers serve refuses token-id prompts ('prompt must be a string'); "
                       "use auto or text")
        if o.output_tokens == "server":
            out.append("openai.output_tokens: transformers serve returns no token ids; use auto or retokenize")
        if o.llm_api_options:
            out.append("openai.llm_api_options: only trtllm-serve reads it; remove it")
    else:
        if b.device != "cuda" and not o.endpoints:  # perfdag launches it
            out.append(f"build.device: {o.server} runs on NVIDIA GPUs; set build.device=cuda "
                       "(on CPU use openai.server=transformers)")
        if o.llm_api_options and o.server != "trtllm-serve":
            out.append(f"openai.llm_api_options: only trtllm-serve reads it, not {o.server}; use openai.extra_args")
        ws = b.tp_size * b.pp_size
        if p.runtime.num_gpus % ws:
            out.append(f"runtime.num_gpus: {p.runtime.num_gpus} is not a multiple of tp*pp={ws}")
    if p.layout is not None:
        out += launch_problems(p) + clash_problems(p)
        if o.prompt == "token_ids" and through_router(p) and o.server in TEXT_PROMPT_ROUTERS:
            out.append(f"openai.prompt: {o.server}'s router refuses token-id prompts (sglang-router: 422, smg: 400); "
                       "use auto or text")
    elif not o.endpoints:
        out += port_count_problems("openai.ports", o.ports, num_servers(p))
    return out + endpoint_problems(o.endpoints) + prefix_caching_problems(p)


def prefix_caching_problems(p) -> list[str]:
    """A benchmark whose rules forbid prefix caching (qwen3-vl): the server options that would turn it
    back on behind runtime.enable_kv_cache_reuse=false (which rules.py checks) are refused too."""
    name = benchmarks.canonical_name(p.loadgen.mlperf_model)
    if not name or not benchmarks.REGISTRY[name].forbidden_prefix_caching:
        return []
    o, out = p.openai, []
    why = f"{name}'s rules forbid prefix caching"
    for a in o.extra_args:
        flag = str(a).split("=", 1)[0]
        if flag == "--enable-prefix-caching":
            out.append(f"openai.extra_args: {a} turns prefix caching on and {why}; remove it")
        elif flag == "--mm-processor-kwargs":  # README: no pixel budgets, images as the dataset has them
            out.append(f"openai.extra_args: {flag} may resize images and {name}'s rules forbid it; remove it")
    reuse = (o.llm_api_options.get("kv_cache_config") or {}).get("enable_block_reuse")
    if o.server == "trtllm-serve" and reuse:
        out.append(f"openai.llm_api_options.kv_cache_config.enable_block_reuse: {why}; set it false or remove it")
    return out


def request_model(p, model_dir: str) -> str:
    """The model name requests carry: served_name, except transformers serve's transcriptions, whose form
    must name the path it was launched with (it loads the model a transcription form names)."""
    if p.openai.server == "transformers" and openai_protocol(p) == "openai-transcription" and not p.openai.model:
        return model_dir
    return served_name(p)


class Build(Step):
    """For `transformers serve`, the torch engine's weights saved as a plain checkpoint (what actually
    runs); for the GPU servers, which load modelopt's export themselves, nothing (it points at it)."""

    def key(self, w: Work) -> Key:
        if w.params.openai.server != "transformers":
            return Key(reads=("build",))
        torch_build = torch_backend.Build().key(w)  # the torch engine, saved plain
        return Key(reads=("build",), tools=versions("torch", "transformers"),
                   code=("harness.backends.openai.plain", "harness.backends.vision") + torch_build.code)

    def run(self, w: Work) -> dict:
        p, b, checkpoint = w.params, w.params.build, w.inputs["checkpoint"]
        if p.openai.server != "transformers":  # the server loads modelopt's export itself
            return {"engine": os.path.relpath(checkpoint, w.final_dir), "pass_through": True}
        if is_multimodal(checkpoint) or is_speech(checkpoint):  # no torch engine for images or audio: the
            speech = is_speech(checkpoint)                         # checkpoint itself, in build.dtype
            config = write_plain_multimodal(checkpoint, w.out_dir / "engine", dtype=b.dtype, speech=speech)
            w.log(f"BuildEngine: the {'speech-to-text' if speech else 'vision-language'} checkpoint "
                  f"({config['architecture']}, {b.dtype}) for transformers serve")
            return {"engine": "engine", "engine_config": config}
        config = write_plain_checkpoint(checkpoint, w.out_dir / "engine", dtype=b.dtype, device=b.device,
                                        max_batch_size=b.max_batch_size, max_num_tokens=b.max_num_tokens,
                                        max_seq_len=b.max_seq_len, max_input_len=b.max_input_len)
        w.log(f"BuildEngine: plain checkpoint of the torch engine ({config['quantization']['format']}) for "
              "transformers serve")
        return {"engine": "engine", "engine_config": config}


class Configure(Step):
    """Each server's configuration (trtllm-serve's --extra_llm_api_options YAML)."""

    def key(self, w: Work) -> Key:
        return Key(reads=("openai.server", "openai.llm_api_options", "runtime", "quantize.kv_cache_dtype",
                          "model.name", "openai.model"),
                   executed={"repos": self.render(w.params)},
                   inputs={"num_servers": num_servers(w.params)})  # no `decoupled`: a Triton notion; an
                   # OpenAI server answers streamed and whole requests alike, so Offline and Server share it

    def render(self, p) -> dict[str, dict[str, str]]:
        name = "extra_llm_api_options.yaml" if p.openai.server == "trtllm-serve" else "server.yaml"
        doc = llm_api_options(p) if p.openai.server == "trtllm-serve" else {"server": p.openai.server}
        text = yaml.safe_dump(doc, sort_keys=True)
        return {f"server_{i}": {name: text} for i in range(num_servers(p))}

    def run(self, w: Work) -> dict:
        p, repos = w.params, self.render(w.params)
        for repo, files in repos.items():
            (w.out_dir / repo).mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (w.out_dir / repo / name).write_text(text)
        return {"layout": {"servers": [{"repo": repo, "models": [served_name(p)]} for repo in repos],
                           "model": w.rel("engine"), "server": p.openai.server}}


class Launch(LaunchStep):
    """The OpenAI-compatible servers (servers.py renders their argv), or external endpoints."""

    protocol = "openai-http"
    section = "openai"

    def protocol_for(self, params) -> str:
        return openai_protocol(params)  # completions or chat: how servers are warmed up and measured

    def gpus(self, params) -> int:  # transformers serve runs on CPU here (runtime.num_gpus is refused with it)
        return 0 if params.openai.server == "transformers" else params.runtime.num_gpus

    def serves_elsewhere(self, params) -> bool:  # an OpenAI server started elsewhere loads its own model
        return bool(params.openai.endpoints)

    def key(self, w: Work) -> Key:
        # its own section, never triton.*: another endpoint is another server
        layout = ("layout",) if w.params.layout is not None else ()  # keyed only when set: keys of before stay
        return Key(reads=("openai.bind", "openai.ports", "openai.endpoints", "openai.binary", *layout),
                   tools=versions(SERVER_PACKAGE[w.params.openai.server], "httpx"), executed=self._executed(w),
                   # chat servers are warmed up through chat; completions keys stay as they were
                   inputs={"protocol": proto} if (proto := self.protocol_for(w.params)) != self.protocol else {})

    def _specs(self, p, repo_dir: str, model_dir: str, ports, root: str):
        gpus = dp_gpus(p)
        specs = []
        for i in range(num_servers(p)):
            cfg = os.path.join(repo_dir, f"server_{i}", "extra_llm_api_options.yaml") \
                if p.openai.server == "trtllm-serve" else None
            specs.append(LaunchSpec(index=i, argv=server_argv(p, model_dir, ports[i], config_path=cfg),
                                    host=p.openai.bind, ports={"serve": ports[i]}, models=(request_model(p, model_dir),),
                                    env=server_env(p, gpus[i % len(gpus)]), protocol=self.protocol_for(p),
                                    mode=p.openai.server, repo=os.path.join(repo_dir, f"server_{i}"), cwd=root))
        return specs

    def _executed(self, w: Work) -> dict:
        p = w.params
        if p.openai.endpoints:
            return {}
        if p.layout is not None:  # nodes' addresses and ports are known at launch only
            hosts = [f"<node{k}>" for k in range(p.layout.nodes)]
            instances = place(p.layout)
            ports = {name: f"<{name}_port>" for name in port_names(p, instances)}
            rendered = render(p, instances, hosts, ports, "<layout>", "<model>")
            return normalise({"layout": rendered, "cwd": "<root>"})
        ports = p.openai.ports or ["<port>"] * num_servers(p)
        specs = self._specs(p, f"<root>/{w.rel('repo')}", "<model>", ports, "<root>")
        return normalise({"argv": [s.argv for s in specs], "env": [s.env for s in specs], "cwd": "<root>"})

    def run(self, w: Work) -> dict:
        p, o, root = w.params, w.params.openai, w.root
        if o.endpoints:
            return {"servers": external_servers(parse_endpoints(o.endpoints), [served_name(p)], o.ready_timeout_s,
                                                protocol=self.protocol_for(p))}
        if p.layout is not None:
            return {"servers": self._launch_layout(w)}
        ports = [t[0] for t in server_ports(num_servers(p), o.bind, o.ports, per_server=1)]
        specs = self._specs(p, os.path.join(str(root), w.rel("repo")), os.path.join(str(root), w.layout["model"]),
                            ports, str(root))
        return {"servers": launch(specs, w.out_dir, ready_timeout_s=o.ready_timeout_s, warmup_prompt=[1, 2, 3, 4],
                                  streaming=False, on_spawn=w.on_spawn, log=w.log,
                                  names={str(root): "<root>"})}

    def _launch_layout(self, w: Work) -> list[dict]:
        """The layout's instances on their nodes of the Slurm allocation, workers ready before the
        router; each role's config files written under this artifact's `layout/`. No two instances on a
        node may share a port (checked before anything starts)."""
        p, o, root = w.params, w.params.openai, str(w.root)
        targets, instances = node_targets(p.layout, o.bind, "openai.bind"), place(p.layout)
        needs = port_needs(p, instances)
        probe = render(p, instances, [t[1] for t in targets], {n: f"<{n}>" for n in needs}, "<layout>", "<model>")
        bases = free_blocks(list(needs.values()), o.bind, taken=fixed_ports(p, instances, probe))
        ports = dict(zip(needs, bases))
        specs, rendered = layout_specs(p, instances, targets, ports, str(w.out_dir),
                                       os.path.join(root, w.layout["model"]), root, self.protocol_for(p))
        clashes = port_clashes(p, instances, rendered, ports)
        if clashes:
            raise ServingError("; ".join(clashes))
        for r in rendered:
            for name, doc in r["files"].items():
                (w.out_dir / "layout" / r["name"]).mkdir(parents=True, exist_ok=True)
                (w.out_dir / "layout" / r["name"] / name).write_text(yaml.safe_dump(doc, sort_keys=True))
        groups = [[s for s in specs if s.role in stage] for stage in LAUNCH_ORDER]
        return launch_in_order(groups, w.out_dir, ready_timeout_s=o.ready_timeout_s, warmup_prompt=[1, 2, 3, 4],
                               streaming=False, on_spawn=w.on_spawn, log=w.log, names={root: "<root>"})


class OpenAIBackend(Backend):
    name = "openai"
    quantize = torch_backend.Quantize()  # modelopt, exported as an HF checkpoint: the torch backend's
    build = Build()
    configure = Configure()
    launch = Launch()

    def check(self, p) -> Checks:
        return Checks(problems(p), [])

    def serving_stack(self, p) -> str:
        return p.openai.server
