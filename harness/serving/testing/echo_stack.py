"""Stands in for a GPU serving stack's programs where there is no GPU (tests of layouts on CPU): the
command lines perfdag renders for vLLM's `vllm serve` and `vllm-router`, and for `trtllm-serve` and
`trtllm-serve disaggregated -c CONFIG`, start the echo server and the echo router on the host and port
they name (the trtllm-serve router's from its config file, as the real one reads them), so a layout
launches, is measured and is stopped through perfdag's real code, with only the GPU-only programs
replaced. Which flags those programs' own parsers
accept is checked elsewhere (tests/test_serving_roles.py, against their sources).

    python -m harness.serving.testing.echo_stack vllm serve MODEL --host H --port P [...]
    python -m harness.serving.testing.echo_stack vllm-router --host H --port P [...] --prefill URL --decode URL
    python -m harness.serving.testing.echo_stack trtllm-serve MODEL --host H --port P [...]
    python -m harness.serving.testing.echo_stack trtllm-serve disaggregated -c CONFIG [...]
    python -m harness.serving.testing.echo_stack trtllm-llmapi-launch PROGRAM [...]
    python -m harness.serving.testing.echo_stack sglang -m sglang.launch_server --host H --port P [...]

A vLLM worker binds its KV connector's ports as vLLM does (the NIXL side channel per tp rank from
VLLM_NIXL_SIDE_CHANNEL_PORT, Mooncake's bootstrap server on VLLM_MOONCAKE_BOOTSTRAP_PORT, answering
/query), and an SGLang prefill worker its bootstrap port, so two instances given one port clash here as
they would there. Workers answer /v1/models and the info routes the real routers ask before routing.
Every process prints its NCCL_, UCX_ and NIXL_ settings with its rank and node.

An instance over several nodes runs as one srun step: under `trtllm-llmapi-launch`, MPI rank 0 runs
PROGRAM (the server) and every other rank joins and waits, as TensorRT-LLM's workers do; a
`vllm serve ... --headless` node waits likewise. Each waiting rank says where it runs, then lives
until it is signalled (the step ends when any of its tasks does).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _address(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def _server(host: str, port: int, *extra: str) -> list[str]:
    """The echo server on host:port (a worker of the stack); with ECHO_STACK_RECORD_DIR, each chat request
    it answers recorded in <dir>/<port>.jsonl (which worker a router sent what to)."""
    record = os.environ.get("ECHO_STACK_RECORD_DIR")
    return [sys.executable, "-m", "harness.serving.testing.echo_openai", "--host", host, "--port", str(port),
            "--token-delay-ms", os.environ.get("ECHO_STACK_TOKEN_DELAY_MS", "1"), *extra,
            *(["--record", os.path.join(record, f"{port}.jsonl")] if record else [])]


def _router(host: str, port: int, context: list[str], generation: list[str]) -> list[str]:
    """The echo router on host:port over these workers (host:port each)."""
    return [sys.executable, "-m", "harness.serving.testing.echo_router", "--host", host, "--port", str(port),
            "--context", *context, "--generation", *generation]


def _vllm_kv_ports(args) -> list[str]:
    """vLLM's KV connector binds its ports from the environment (defaults as vLLM's): the NIXL side channel
    at VLLM_NIXL_SIDE_CHANNEL_PORT + tp rank, Mooncake's bootstrap server at VLLM_MOONCAKE_BOOTSTRAP_PORT."""
    import json

    connector = json.loads(args.kv_transfer_config).get("kv_connector") if args.kv_transfer_config else None
    if connector == "NixlConnector":
        base = int(os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600"))
        return [a for k in range(args.tensor_parallel_size) for a in ("--hold", str(base + k))]
    if connector == "MooncakeConnector":
        return ["--mooncake-bootstrap", os.environ.get("VLLM_MOONCAKE_BOOTSTRAP_PORT", "8998")]
    return []


def _shown_env() -> str:
    """The NCCL, UCX and NIXL settings this process got (a role's env reaches every rank)."""
    return " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "UCX_", "NIXL_")))


def _wait_as_rank(what: str) -> None:
    """A rank that is not the serving one: joins (says where), then waits to be signalled."""
    import signal

    print(f"echo_stack: {what} rank {os.environ.get('SLURM_PROCID', '?')} on {os.environ.get('SLURMD_NODENAME', '?')} "
          f"env [{_shown_env()}]", flush=True)
    print(f"echo_stack: {what} rank {os.environ.get('SLURM_PROCID', '?')} on {os.environ.get('SLURMD_NODENAME', '?')} "
          "joined", flush=True)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    while True:
        signal.pause()


def main(argv: list[str]) -> None:
    program, rest = argv[0], argv[1:]
    print(f"echo_stack: {program} on {os.environ.get('SLURMD_NODENAME', '?')} with CUDA_VISIBLE_DEVICES="
          f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)  # where it runs, on which GPUs
    print(f"echo_stack: {program} rank {os.environ.get('SLURM_PROCID', '0')} on {os.environ.get('SLURMD_NODENAME', '?')} "
          f"env [{_shown_env()}]", flush=True)
    if program == "trtllm-llmapi-launch":
        if os.environ.get("SLURM_PROCID", "0") != "0":
            _wait_as_rank("trtllm-llmapi-launch")
        os.execvp(rest[0], rest)
    if program == "vllm" and "--headless" in rest:
        _wait_as_rank("vllm --headless")
    ap = argparse.ArgumentParser(prog=program)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--served-model-name", default="")
    if program == "vllm":
        if rest[:1] != ["serve"]:
            sys.exit(f"echo_stack vllm: only `vllm serve MODEL ...` is stood in for, not {rest[:1]}")
        ap.add_argument("--kv-transfer-config", default="")
        ap.add_argument("--tensor-parallel-size", type=int, default=1)
        args, _ = ap.parse_known_args(rest[2:])
        run = _server(args.host, args.port, "--metrics", "vllm", "--model", args.served_model_name, "--owned-by",
                      "vllm", *_vllm_kv_ports(args))  # /metrics with vLLM's request phases
    elif program == "sglang":  # `<python> -m sglang.launch_server ...`, perfdag's openai.binary standing in
        ap.add_argument("--disaggregation-bootstrap-port", type=int, default=None)
        args, _ = ap.parse_known_args(rest[2:] if rest[:2] == ["-m", "sglang.launch_server"] else rest)
        boot = ["--hold", str(args.disaggregation_bootstrap_port)] if args.disaggregation_bootstrap_port else []
        run = _server(args.host, args.port, "--model", args.served_model_name, "--owned-by", "sglang", *boot)
    elif program == "vllm-router":
        ap.add_argument("--prefill", action="append", default=[])
        ap.add_argument("--decode", action="append", default=[])
        args, _ = ap.parse_known_args(rest)
        if not (args.prefill and args.decode):
            sys.exit("echo_stack vllm-router: the echo router needs --prefill and --decode workers")
        run = _router(args.host, args.port, [*map(_address, args.prefill)], [*map(_address, args.decode)])
    elif program == "trtllm-serve" and rest[:1] == ["disaggregated"]:
        import yaml

        cfg = argparse.ArgumentParser(prog="trtllm-serve disaggregated")
        cfg.add_argument("-c", "--config_file", required=True)
        doc = yaml.safe_load(Path(cfg.parse_known_args(rest[1:])[0].config_file).read_text())
        run = _router(doc["hostname"], doc["port"], doc["context_servers"]["urls"], doc["generation_servers"]["urls"])
    elif program == "trtllm-serve":
        import yaml

        ap.add_argument("--extra_llm_api_options", default=None)
        args, _ = ap.parse_known_args(rest[1:])
        options = yaml.safe_load(Path(args.extra_llm_api_options).read_text()) if args.extra_llm_api_options else {}
        perf = ["--metrics", "trtllm"] if (options or {}).get("return_perf_metrics") else []  # as trtllm-serve
        run = _server(args.host, args.port, "--token-ids", *perf)  # it returns token ids (detokenize: false)
    else:
        sys.exit(f"echo_stack: no stand-in for {program!r} (vllm, vllm-router, sglang, trtllm-serve)")
    os.execv(run[0], run)  # the stand-in is the process perfdag started: signals and records reach it


if __name__ == "__main__":
    main(sys.argv[1:])
