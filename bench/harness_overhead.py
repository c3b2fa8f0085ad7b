"""Harness overhead: what perfdag's LoadGen SUT sustains vs a bare tritonclient loop.

Both drive the same tritonserver (CPU) serving the zero-cost echo model
(``harness/serving/echo_model.py``) with the same number of gRPC channels, the same
prompts and the same requests (TRT-LLM tensor contract, ``request_output_len`` tokens):

* bare: one process, one thread + channel + stream per channel; every request is sent at
  once (as LoadGen's Offline query) and the clock stops at the last final response;
* perfdag: :func:`harness.loadgen.run_loadgen` Offline (LoadGen's own samples/s), with
  frontends x clients_per_frontend = channels.

Rows: streaming (one response per token: the Server/Interactive path) and non-streaming
(one response per sample: the Offline path).  responses/s counts every gRPC response.
The model costs nothing, so these numbers are the ceiling of the client side plus Triton's
Python backend on this machine, not of any model.

    python bench/harness_overhead.py [--samples 1000] [--tokens 16] [--frontends 1] [--clients 4]
"""
from __future__ import annotations

import argparse
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

    t0 = time.monotonic()
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
    return {"seconds": elapsed, "samples_per_s": len(prompts) / elapsed, "responses_per_s": state["responses"] / elapsed,
            "responses": state["responses"]}


def perfdag_offline(url: str, model: str, prompts: list[list[int]], frontends: int, clients: int,
                    max_new_tokens: int, streaming: bool, out_dir: Path) -> dict:
    n = len(prompts)
    r = run_loadgen([url], model, prompts,
                    {"offline_expected_qps": 1, "min_duration_ms": 0, "min_query_count": n,
                     "performance_sample_count": n},
                    out_dir, scenario="Offline", frontends=frontends, clients_per_frontend=clients,
                    warmup_queries=frontends * clients, max_new_tokens=max_new_tokens, streaming=streaming,
                    request_timeout_s=120, progress=False)
    done = r["measured"]["requests"]
    sps = r["samples_per_s"]  # LoadGen's: samples / (last completion - test start)
    responses_per_sample = max_new_tokens if streaming else 1
    return {"samples_per_s": sps, "responses_per_s": sps * responses_per_sample, "requests": done,
            "tokens_per_s": r["tokens_per_s"], "harness_samples_per_s": r["measured"]["samples_per_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=16, help="request_output_len")
    ap.add_argument("--frontends", type=int, default=1)
    ap.add_argument("--clients", type=int, default=4, help="clients per frontend")
    ap.add_argument("--instances", type=int, default=1, help="echo model instance count")
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell (best kept)")
    args = ap.parse_args()
    channels = args.frontends * args.clients
    prompts = [[10 + i % 500, 40 + i % 7, 30, 31 + i % 3] for i in range(args.samples)]

    with tempfile.TemporaryDirectory(prefix="perfdag_bench_") as tmp:
        root = Path(tmp)
        repo = write_model_repo(root / "repo", {"echo": render_torch_model_config(
            "echo", decoupled=True, max_batch_size=64, engine_dir="unused", instance_count=args.instances)},
            ECHO_PY.read_text())
        ports = P.free_ports(3)
        h = CS.start_tritonserver(repo, root / "server.log", grpc_port=ports[0], http_port=ports[1],
                                 metrics_port=ports[2])
        rows = []
        try:
            CS.wait_ready(h, timeout_s=120)
            for streaming in (True, False):
                bare = max((bare_loop(h.grpc_url, "echo", prompts, channels, args.tokens, streaming)
                            for _ in range(args.repeat)), key=lambda x: x["samples_per_s"])
                pd = max((perfdag_offline(h.grpc_url, "echo", prompts, args.frontends, args.clients, args.tokens,
                                          streaming, root / f"lg_{streaming}_{k}") for k in range(args.repeat)),
                         key=lambda x: x["samples_per_s"])
                rows.append(("streaming" if streaming else "non-streaming", bare, pd))
        finally:
            CS.stop_server(h, timeout=20)

    print(f"\nharness overhead: {args.samples} samples x {args.tokens} tokens, {channels} gRPC channels "
          f"(perfdag: {args.frontends} frontend(s) x {args.clients} clients), echo model x{args.instances}\n")
    hdr = (f"{'path':<14} {'bare resp/s':>12} {'perfdag resp/s':>15} {'ratio':>6}   "
           f"{'bare samples/s':>15} {'perfdag samples/s':>18} {'ratio':>6}")
    print(hdr)
    print("-" * len(hdr))
    for name, bare, pd in rows:
        print(f"{name:<14} {bare['responses_per_s']:>12.0f} {pd['responses_per_s']:>15.0f} "
              f"{pd['responses_per_s'] / bare['responses_per_s']:>6.2f}   "
              f"{bare['samples_per_s']:>15.1f} {pd['samples_per_s']:>18.1f} "
              f"{pd['samples_per_s'] / bare['samples_per_s']:>6.2f}")
    print("\nperfdag samples/s is LoadGen's (Offline: samples / time to the last completion); "
          "ratio = perfdag / bare.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
