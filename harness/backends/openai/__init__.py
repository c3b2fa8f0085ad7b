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
from pathlib import Path

import yaml

from harness.backends.base import Backend
from harness.backends.openai.endpoints import endpoint_problems, parse_endpoints
from harness.backends.openai.plain import WEIGHT_ONLY, write_plain_checkpoint
from harness.backends.openai.servers import dp_gpus, llm_api_options, served_name, server_argv, server_env
from harness.backends.torch import TorchBackend
from harness.cache.executed import normalise
from harness.cache.versions import versions
from harness.serving.launcher import external_servers, launch
from harness.serving.ports import server_ports
from harness.serving.spec import LaunchSpec

SERVER_PACKAGE = {"transformers": "transformers", "trtllm-serve": "tensorrt_llm", "vllm": "vllm",
                  "sglang": "sglang"}
# runtime fields transformers serve has no use for (setting one is a mistake, not a no-op)
TRANSFORMERS_IGNORES = ("num_gpus", "gpu_device_ids", "kv_cache_free_gpu_mem_fraction", "enable_kv_cache_reuse",
                        "enable_chunked_context", "max_tokens_in_paged_kv_cache", "instances_per_server",
                        "batch_scheduler_policy", "max_queue_delay_microseconds")


class OpenAIBackend(Backend):
    name = "openai"
    protocol = "openai-http"
    server_section = "openai"

    def problems(self, p) -> list[str]:
        o, b, q = p.openai, p.build, p.quantize
        out = []
        for section in ("quantize", "build", "runtime"):
            for key in getattr(p, section).flags:
                out.append(f"{section}.flags.{key}: the openai backend takes no flags; use the section's keys "
                           "(or openai.extra_args / openai.llm_api_options)")
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
            if b.device != "cuda":
                out.append(f"build.device: {o.server} runs on NVIDIA GPUs; set build.device=cuda "
                           "(on CPU use openai.server=transformers)")
            if o.llm_api_options and o.server != "trtllm-serve":
                out.append(f"openai.llm_api_options: only trtllm-serve reads it, not {o.server}; use openai.extra_args")
            ws = b.tp_size * b.pp_size
            if p.runtime.num_gpus % ws:
                out.append(f"runtime.num_gpus: {p.runtime.num_gpus} is not a multiple of tp*pp={ws}")
        if o.ports and not o.endpoints and len(o.ports) != self.num_servers(p):
            out.append(f"openai.ports: {len(o.ports)} ports for {self.num_servers(p)} server(s); give one per server "
                       "or none to pick free ports")
        return out + endpoint_problems(o.endpoints)

    # --- Quantize: modelopt, exported as an HF checkpoint (the torch backend's) ----------------
    def quantize_tools(self, p):
        return TorchBackend().quantize_tools(p)

    def quantize_code(self, p):
        return TorchBackend().quantize_code(p)

    def quantize(self, src, out_dir, p, log, final_dir):
        return TorchBackend().quantize(src, out_dir, p, log, final_dir)

    # --- BuildEngine ------------------------------------------------------------------------
    def build_tools(self, p):
        return versions("torch", "transformers") if p.openai.server == "transformers" else {}

    def build_code(self, p):
        if p.openai.server != "transformers":
            return ()
        return ("harness.backends.openai.plain",) + TorchBackend().build_code(p)  # the torch engine, saved plain

    def build(self, checkpoint: Path, out_dir: Path, p, log, final_dir: Path | None = None) -> dict:
        b = p.build
        if p.openai.server != "transformers":  # the server loads modelopt's export itself
            return {"engine": os.path.relpath(checkpoint, final_dir), "pass_through": True}

        config = write_plain_checkpoint(checkpoint, out_dir / "engine", dtype=b.dtype, device=b.device,
                                        max_batch_size=b.max_batch_size, max_num_tokens=b.max_num_tokens,
                                        max_seq_len=b.max_seq_len, max_input_len=b.max_input_len)
        log(f"BuildEngine: plain checkpoint of the torch engine ({config['quantization']['format']}) for "
            "transformers serve")
        return {"engine": "engine", "engine_config": config}

    # --- FillTritonRepo (each server's configuration) ---------------------------------------
    def repo_reads(self, p):
        return ("openai.server", "openai.llm_api_options", "runtime", "quantize.kv_cache_dtype", "model.name")

    def num_servers(self, p) -> int:
        if p.openai.num_servers is not None:
            return p.openai.num_servers
        if p.openai.endpoints:
            return len(p.openai.endpoints)
        return 1 if p.loadgen.scenario == "Offline" else len(dp_gpus(p))

    def render_repos(self, p, engine_rel: str, decoupled: bool) -> dict[str, dict[str, str]]:
        name = "extra_llm_api_options.yaml" if p.openai.server == "trtllm-serve" else "server.yaml"
        doc = llm_api_options(p) if p.openai.server == "trtllm-serve" else {"server": p.openai.server}
        text = yaml.safe_dump(doc, sort_keys=True)
        return {f"server_{i}": {name: text} for i in range(self.num_servers(p))}

    def fill(self, engine_dir: Path, engine_rel: str, out_dir: Path, p, decoupled: bool) -> dict:
        for repo, files in self.render_repos(p, engine_rel, decoupled).items():
            (out_dir / repo).mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (out_dir / repo / name).write_text(text)
        return {"servers": [{"repo": repo, "models": [served_name(p)]} for repo in self.render_repos(p, "", decoupled)],
                "decoupled": decoupled, "model": engine_rel, "server": p.openai.server}

    # --- LaunchServers ----------------------------------------------------------------------
    def launch_reads(self, p):  # its own section, never triton.*: another endpoint is another server
        return ("openai.bind", "openai.ports", "openai.endpoints", "openai.binary")

    def serving_tools(self, p):
        return versions(SERVER_PACKAGE[p.openai.server], "httpx")

    def _specs(self, p, repo_dir: str, model_dir: str, ports, root: str):
        gpus = dp_gpus(p)
        specs = []
        for i in range(self.num_servers(p)):
            cfg = os.path.join(repo_dir, f"server_{i}", "extra_llm_api_options.yaml") \
                if p.openai.server == "trtllm-serve" else None
            from harness.backends.openai.servers import served_name
            specs.append(LaunchSpec(index=i, argv=server_argv(p, model_dir, ports[i], config_path=cfg),
                                    host=p.openai.bind, ports={"serve": ports[i]}, models=(served_name(p),),
                                    env=server_env(p, gpus[i % len(gpus)]), protocol=self.protocol,
                                    mode=p.openai.server, repo=os.path.join(repo_dir, f"server_{i}"), cwd=root))
        return specs

    def launch_executed(self, p, repo_rel: str) -> dict:
        if p.openai.endpoints:
            return {}
        ports = p.openai.ports or ["<port>"] * self.num_servers(p)
        specs = self._specs(p, f"<root>/{repo_rel}", "<model>", ports, "<root>")
        return normalise({"argv": [s.argv for s in specs], "env": [s.env for s in specs], "cwd": "<root>"})

    def launch(self, repo_rel: str, layout: dict, out_dir: Path, p, *, root: Path, on_spawn, log) -> list[dict]:
        o = p.openai
        if o.endpoints:
            return external_servers(parse_endpoints(o.endpoints), [served_name(p)], o.ready_timeout_s,
                                    protocol=self.protocol)
        ports = [t[0] for t in server_ports(self.num_servers(p), o.bind, o.ports, per_server=1)]
        specs = self._specs(p, os.path.join(str(root), repo_rel), os.path.join(str(root), layout["model"]), ports,
                            str(root))
        return launch(specs, out_dir, ready_timeout_s=o.ready_timeout_s, warmup_prompt=[1, 2, 3, 4],
                      streaming=layout["decoupled"], on_spawn=on_spawn, log=log, names={str(root): "<root>"})
