"""Harness overhead, per client core: perfdag's LoadGen SUT vs a bare client loop on the same server.

Two cores, each against a zero-cost server so what is measured is the client side:
* triton-grpc: a CPU tritonserver serving the echo model (harness/serving/echo_model.py); bare
  loop: one thread + channel + stream per channel, tritonclient.
* openai-http: the echo OpenAI server (harness/serving/echo_openai.py, token ids returned as
  vLLM does); bare loop: one httpx.AsyncClient, every request streamed at once.
perfdag runs harness.loadgen.run_loadgen Offline with frontends x clients = channels. Rows:
streaming (one response per token: the Server path) and non-streaming (one response per sample).
For every cell: responses/s, the ratio perfdag / bare in the same run, and the client CPU per
response (us: user+sys of the client process(es), LoadGen included for perfdag). Then perfdag's
responses/s with 1, 2 and 4 frontends: how many frontends a token rate needs.

    python bench/harness_overhead.py [--samples 1000] [--tokens 16] [--clients 4] [--cores grpc,http]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.backends.torch.repo import render_torch_model_config
from harness.loadgen import run_loadgen  # noqa: E402
from harness.serving import cpu_server as CS
from harness.serving import ports as P
from harness.serving.contract import is_final, request_inputs, response_tokens
from harness.serving.pbtxt import write_model_repo  # noqa: E402

ECHO_PY = REPO / "harness" / "serving" / "echo_model.py"


def bare_loop(url: str, model: str, prompts: list[list[int]], channels: int, max_new_tokens: int,
              streaming: bool, timeout_s: float = 300.0) -> dict:
    """Send every prompt at once over ``channels`` streams; time to the last final response."""
    import tritonclient.grpc as grpcclient

    lock = threading.Lock()
    state = {"responses": 0, "remaining": len(prompts), "errors": []}
    done = threading.Event()

    def callback(result, error):
        try:
            if error is not None:
                state["errors"].append(str(error))
                done.set()
                return
            response_tokens(result)  # decode like the SUT does
            final = is_final(result)
            with lock:
                state["responses"] += 1
                if final:
                    state["remaining"] -= 1
                    if state["remaining"] == 0:
                        done.set()
        except Exception as exc:  # keep the reader thread alive
            state["errors"].append(repr(exc))
            done.set()

    outputs = [grpcclient.InferRequestedOutput("output_ids"), grpcclient.InferRequestedOutput("sequence_length")]
    clients = [grpcclient.InferenceServerClient(url) for _ in range(channels)]
    for c in clients:
        c.start_stream(callback=callback)
    # warm-up: one request per channel, not counted
    warm = threading.Event()
    warm_left = [channels]

    def warm_cb(result, error):
        with lock:
            p = result.get_response().parameters.get("triton_final_response") if result else None
            if error is not None or (p is not None and p.bool_param):
                warm_left[0] -= 1
                if warm_left[0] == 0:
                    warm.set()

    wclients = [grpcclient.InferenceServerClient(url) for _ in range(channels)]
    for c in wclients:
        c.start_stream(callback=warm_cb)
        c.async_stream_infer(model, request_inputs(prompts[0], max_new_tokens, None, streaming, exclude_input_in_output=True), outputs=outputs,
                             request_id="w", enable_empty_final_response=True)
    warm.wait(30)
    for c in wclients:
        c.stop_stream()
        c.close()

    shares = [prompts[i::channels] for i in range(channels)]

    def submit(k: int):
        c = clients[k]
        for j, ids in enumerate(shares[k]):
            c.async_stream_infer(model, request_inputs(ids, max_new_tokens, None, streaming, exclude_input_in_output=True), outputs=outputs,
                                 request_id=f"{k}-{j}", enable_empty_final_response=True)

    t0, cpu0 = time.monotonic(), _cpu(resource.RUSAGE_SELF)
    threads = [threading.Thread(target=submit, args=(k,)) for k in range(channels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = done.wait(timeout_s)
    elapsed = time.monotonic() - t0
    for c in clients:
        c.stop_stream(cancel_requests=not ok)
        c.close()
    if state["errors"] or not ok:
        raise RuntimeError(f"bare loop failed: {state['errors'][:3] or 'timeout'}")
    cpu = _cpu(resource.RUSAGE_SELF) - cpu0
    return {"seconds": elapsed, "samples_per_s": len(prompts) / elapsed, "responses_per_s": state["responses"] / elapsed,
            "responses": state["responses"], "cpu_us_per_response": cpu * 1e6 / max(1, state["responses"])}


def bare_http(url: str, prompts: list[list[int]], channels: int, max_new_tokens: int, streaming: bool) -> dict:
    """Every prompt at once through one httpx.AsyncClient (`channels` connections), SSE parsed."""
    import httpx

    from harness.serving.sse import DONE, SSEParser

    async def one(client, ids) -> int:
        body = {"prompt": ids, "max_tokens": max_new_tokens, "temperature": 0, "stream": streaming,
                "return_token_ids": True}
        if not streaming:
            r = await client.post(f"http://{url}/v1/completions", json=body)
            json.loads(r.text)
            return 1
        n = 0
        async with client.stream("POST", f"http://{url}/v1/completions", json=body) as r:
            parser = SSEParser()
            async for chunk in r.aiter_bytes():
                for data in parser.feed(chunk):
                    if data != DONE:
                        json.loads(data)
                        n += 1
        return n

    async def run():
        limits = httpx.Limits(max_connections=channels, max_keepalive_connections=channels)
        async with httpx.AsyncClient(limits=limits, timeout=300) as client:
            await asyncio.gather(*(one(client, p) for p in prompts[:channels]))  # warm-up
            t0, cpu0 = time.monotonic(), _cpu(resource.RUSAGE_SELF)
            counts = await asyncio.gather(*(one(client, p) for p in prompts))
            return time.monotonic() - t0, _cpu(resource.RUSAGE_SELF) - cpu0, sum(counts)

    elapsed, cpu, responses = asyncio.run(run())
    return {"seconds": elapsed, "samples_per_s": len(prompts) / elapsed, "responses_per_s": responses / elapsed,
            "responses": responses, "cpu_us_per_response": cpu * 1e6 / responses}


def _cpu(who) -> float:
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime


def perfdag_offline(url: str, model: str, prompts: list[list[int]], frontends: int, clients: int,
                    max_new_tokens: int, streaming: bool, out_dir: Path, protocol: str = "triton-grpc") -> dict:
    n = len(prompts)
    r = run_loadgen([url], model, prompts,
                    {"offline_expected_qps": 1, "min_duration_ms": 0, "min_query_count": n,
                     "performance_sample_count": n},
                    out_dir, scenario="Offline", frontends=frontends, clients_per_frontend=clients,
                    warmup_queries=frontends * clients, max_new_tokens=max_new_tokens, streaming=streaming,
                    request_timeout_s=120, progress=False, protocol=protocol,
                    api={"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"})
    cpu = r["harness"]["client_cpu_s"]  # LoadGen + driver + frontends, during the measured queries only
    done = r["measured"]["requests"]
    sps = r["samples_per_s"]  # LoadGen's: samples / (last completion - test start)
    responses_per_sample = max_new_tokens if streaming else 1
    responses = n * responses_per_sample
    return {"samples_per_s": sps, "responses_per_s": sps * responses_per_sample, "requests": done,
            "tokens_per_s": r["tokens_per_s"], "harness_samples_per_s": r["measured"]["samples_per_s"],
            "cpu_us_per_response": cpu * 1e6 / responses}


def _triton(root: Path, instances: int):
    repo = write_model_repo(root / "repo", {"echo": render_torch_model_config(
        "echo", decoupled=True, max_batch_size=64, engine_dir="unused", instance_count=instances)}, ECHO_PY.read_text())
    ports = P.free_ports(3)
    h = CS.start_tritonserver(repo, root / "server.log", grpc_port=ports[0], http_port=ports[1], metrics_port=ports[2])
    CS.wait_ready(h, timeout_s=120)
    return h.grpc_url, lambda: CS.stop_server(h, timeout=20)


def _echo_http(root: Path):
    from harness.serving.openai_client import probe

    port = P.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.echo_openai", "--port", str(port), "--token-ids"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        assert time.monotonic() < deadline and proc.poll() is None, "echo OpenAI server did not start"
        time.sleep(0.1)

    def stop():
        proc.terminate()
        proc.wait(10)
    return url, stop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=16, help="tokens per request")
    ap.add_argument("--clients", type=int, default=4, help="clients per frontend")
    ap.add_argument("--instances", type=int, default=1, help="echo Triton model instance count")
    ap.add_argument("--cores", default="grpc,http", help="which client cores to measure")
    ap.add_argument("--frontends", default="1,2,4", help="frontend counts for the scaling rows")
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell (best kept)")
    args = ap.parse_args()
    prompts = [[10 + i % 500, 40 + i % 7, 30, 31 + i % 3] for i in range(args.samples)]
    rows, scale = [], []
    with tempfile.TemporaryDirectory(prefix="perfdag_bench_") as tmp:
        root = Path(tmp)
        for core in args.cores.split(","):
            protocol = {"grpc": "triton-grpc", "http": "openai-http"}[core]
            url, stop = _triton(root / core, args.instances) if core == "grpc" else _echo_http(root / core)
            model = "echo" if core == "grpc" else ""
            try:
                for streaming in (True, False):
                    def bare():
                        if core == "grpc":
                            return bare_loop(url, model, prompts, args.clients, args.tokens, streaming)
                        return bare_http(url, prompts, args.clients, args.tokens, streaming)
                    b = max((bare() for _ in range(args.repeat)), key=lambda x: x["samples_per_s"])
                    pd = max((perfdag_offline(url, model, prompts, 1, args.clients, args.tokens, streaming,
                                              root / f"lg_{core}_{streaming}_{k}", protocol)
                              for k in range(args.repeat)), key=lambda x: x["samples_per_s"])
                    rows.append((core, "streaming" if streaming else "non-streaming", b, pd))
                for n in map(int, args.frontends.split(",")):
                    pd = perfdag_offline(url, model, prompts, n, args.clients, args.tokens, True,
                                         root / f"scale_{core}_{n}", protocol)
                    scale.append((core, n, pd))
            finally:
                stop()

    print(f"\nharness overhead: {args.samples} samples x {args.tokens} tokens, {args.clients} channels/connections "
          f"(perfdag: 1 frontend x {args.clients} clients); zero-cost servers\n")
    hdr = (f"{'core':<6} {'path':<14} {'bare resp/s':>12} {'perfdag resp/s':>15} {'ratio':>6}   "
           f"{'bare us/resp':>13} {'perfdag us/resp':>16}")
    print(hdr)
    print("-" * len(hdr))
    for core, name, b, pd in rows:
        print(f"{core:<6} {name:<14} {b['responses_per_s']:>12.0f} {pd['responses_per_s']:>15.0f} "
              f"{pd['responses_per_s'] / b['responses_per_s']:>6.2f}   {b['cpu_us_per_response']:>13.1f} "
              f"{pd['cpu_us_per_response']:>16.1f}")
    print("\nstreaming responses/s by frontend count (perfdag, LoadGen Offline):")
    for core, n, pd in scale:
        print(f"  {core:<5} {n} frontend(s) x {args.clients} clients: {pd['responses_per_s']:>8.0f} resp/s, "
              f"{pd['cpu_us_per_response']:.1f} us client CPU per response")
    print("\nus/resp: client CPU (user+sys) per response; perfdag's includes LoadGen and the driver. "
          "ratio = perfdag / bare, same server, same run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
