"""Engine throughput: the CPU default engine served by a real tritonserver vs HF `generate`.

1. Builds (or reuses) the CPU default engine through the real pipeline: ``luigi --module
   pipeline BuildEngine --local-scheduler`` with ``PERFDAG_ARTIFACTS`` set to ``--artifacts``
   (``PrepareModel -> Quantize -> BuildEngine``, params/default.yaml: the tiny Llama, int8
   weight-only, fp32 torch engine, max_batch_size 32).
2. Baseline: the *same engine model* (``harness.backends.torch.engine.load_torch_engine``, i.e. the
   int8 weights dequantized as the server runs them) with Hugging Face ``generate``, greedy,
   one request at a time, same prompts and token count, same torch thread count as the
   served model (``--threads``).  Runs before the server starts so nothing competes.
3. Renders a Triton repo for the engine (``render_torch_model_config``, decoupled=True, the
   engine's max_batch_size; the in-flight-batching Python-backend model), starts
   tritonserver on free ports, waits for readiness, and for each concurrency C drives it
   closed-loop: C client threads, each with its own gRPC channel and stream, each sending its
   next prompt when the previous one's final response arrived.  Tokens are counted as
   received (``sequence_length`` of every response).  Streaming (one response per token) and
   non-streaming (one response with all tokens, same decoupled model) are both measured.
   The server is always stopped by its pid (try/finally; SIGTERM is turned into an exception).

Every request generates exactly ``--new-tokens`` tokens: no ``end_id`` is sent to the server
and HF gets ``min_new_tokens`` = ``max_new_tokens``.  Prompts: the first ``--requests`` of
the builtin dataset (``harness.model.datasets.load_dataset("builtin", ...)``, 5-40 tokens).

    python bench/engine_throughput.py [--requests 128] [--new-tokens 32] [--artifacts artifacts]
                                      [--concurrency 1,8,32] [--threads 1] [--no-nonstreaming]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def machine() -> dict:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch
    import transformers

    return {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "cpu": cpu,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version()}


# ------------------------------------------------------------------------------- engine

def build_engine(artifacts: Path, params_file: str, overrides: str) -> Path:
    """Runs the real pipeline (luigi CLI, local scheduler) and returns the engine directory."""
    from datetime import datetime, timezone

    run_id = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}-bench{os.getpid()}"
    env = dict(os.environ, PERFDAG_ARTIFACTS=str(artifacts), PERFDAG_RUN_ID=run_id)
    luigi_bin = Path(sys.executable).parent / "luigi"
    cmd = ([str(luigi_bin)] if luigi_bin.is_file() else [sys.executable, "-m", "luigi"]) + [
        "--module", "pipeline", "BuildEngine", "--local-scheduler", "--params-file", params_file]
    if overrides:
        cmd += ["--overrides", overrides]
    print("$ PERFDAG_ARTIFACTS=" + str(artifacts) + " " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:])
        raise SystemExit(f"BuildEngine failed (exit {r.returncode})")
    # Where that engine is: the same task's content-hashed artifact directory.
    os.environ["PERFDAG_ARTIFACTS"] = str(artifacts)
    os.environ["PERFDAG_RUN_ID"] = run_id
    from pipeline import (
        BuildEngine,  # pipeline first: it imports tasks (circular otherwise)
    )

    task = BuildEngine(params_file=params_file, overrides=overrides)
    manifest = task.manifest()
    if manifest is None:
        raise SystemExit(f"BuildEngine reported success but {task.artifact_dir} has no manifest")
    try:  # the pipeline's own record of this invocation: each stage built or reused
        run = json.loads((artifacts / "runs" / run_id / "run.json").read_text())
        how = ", ".join(f"{e['stage']} {e['status']}" for e in run["stages"].values())
    except (OSError, ValueError, KeyError):
        how = "no run record"
    print(f"BuildEngine {task.key[:16]} in {time.monotonic() - t0:.1f}s ({how})", flush=True)
    return task.artifact_dir / manifest.get("engine", "engine")


# ------------------------------------------------------------------------------- HF baseline

def hf_one_at_a_time(engine_dir: Path, prompts: list[list[int]], new_tokens: int, threads: int) -> dict:
    import torch

    from harness.backends.torch.engine import load_torch_engine

    torch.set_num_threads(threads)
    model, _ = load_torch_engine(engine_dir)
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = model.generation_config.eos_token_id

    def gen(ids):
        x = torch.tensor([ids], dtype=torch.long)
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad)
        return out.shape[1] - x.shape[1]

    with torch.inference_mode():
        gen(prompts[0])  # warm-up
        lat, tokens = [], 0
        t0 = time.perf_counter()
        for ids in prompts:
            s = time.perf_counter()
            tokens += gen(ids)
            lat.append(time.perf_counter() - s)
        elapsed = time.perf_counter() - t0
    return {"tokens": tokens, "seconds": elapsed, "tok_s": tokens / elapsed,
            "mean_latency_ms": 1e3 * statistics.mean(lat)}


# ------------------------------------------------------------------------------- served

def served(url: str, model: str, prompts: list[list[int]], new_tokens: int, concurrency: int,
           streaming: bool, timeout_s: float = 120.0) -> dict:
    """Closed loop: `concurrency` clients (own channel + stream each) pull prompts from one queue."""
    import tritonclient.grpc as grpcclient

    from harness.serving.triton.contract import is_final, request_inputs, response_tokens

    work: "queue.SimpleQueue[list[int]]" = queue.SimpleQueue()
    for ids in prompts:
        work.put(ids)
    outputs = [grpcclient.InferRequestedOutput("output_ids"), grpcclient.InferRequestedOutput("sequence_length")]
    lock = threading.Lock()
    stats = {"tokens": 0, "responses": 0, "lat": [], "ttft": [], "errors": []}
    start = threading.Barrier(concurrency + 1)

    def worker(k: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        resp: queue.SimpleQueue = queue.SimpleQueue()
        client.start_stream(callback=lambda result, error: resp.put((time.perf_counter(), result, error)))
        try:
            # warm-up request on this channel, not counted
            for phase in ("warm", "run"):
                if phase == "run":
                    start.wait()
                while True:
                    if phase == "warm":
                        ids = prompts[k % len(prompts)]
                    else:
                        try:
                            ids = work.get_nowait()
                        except queue.Empty:
                            break
                    t0 = time.perf_counter()
                    client.async_stream_infer(model, request_inputs(ids, new_tokens, None, streaming, exclude_input_in_output=True), outputs=outputs,
                                              request_id=f"{k}-{phase}", enable_empty_final_response=True)
                    ntok = nresp = 0
                    first = None
                    while True:
                        t, result, error = resp.get(timeout=timeout_s)
                        if error is not None:
                            raise RuntimeError(str(error))
                        n = response_tokens(result).size
                        if n:
                            ntok += n
                            nresp += 1
                            if first is None:
                                first = t
                        if is_final(result):
                            break
                    if phase == "warm":
                        break
                    with lock:
                        stats["tokens"] += ntok
                        stats["responses"] += nresp
                        stats["lat"].append(t - t0)
                        stats["ttft"].append((first or t) - t0)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            stats["errors"].append(f"client {k}: {type(exc).__name__}: {exc}")
            start.abort()
        finally:
            try:
                client.stop_stream(cancel_requests=True)
                client.close()
            except Exception:
                pass

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(concurrency)]
    for t in threads:
        t.start()
    try:
        start.wait(timeout=timeout_s)
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    for t in threads:
        t.join(timeout_s * 4)
    elapsed = time.perf_counter() - t0
    if stats["errors"]:
        raise RuntimeError("; ".join(stats["errors"][:3]))
    if len(stats["lat"]) != len(prompts):
        raise RuntimeError(f"only {len(stats['lat'])}/{len(prompts)} requests finished")
    return {"tokens": stats["tokens"], "seconds": elapsed, "tok_s": stats["tokens"] / elapsed,
            "responses": stats["responses"], "mean_latency_ms": 1e3 * statistics.mean(stats["lat"]),
            "mean_ttft_ms": 1e3 * statistics.mean(stats["ttft"])}


def start_server(engine_dir: Path, workdir: Path, threads: int):
    from harness.backends.torch.repo import MODEL_PY, render_torch_model_config
    from harness.serving import ports as P
    from harness.serving.triton import cpu_server as CS
    from harness.serving.triton.pbtxt import write_model_repo

    cfg = json.loads((engine_dir / "config.json").read_text())
    name = "tensorrt_llm"
    repo = write_model_repo(workdir / "repo", {name: render_torch_model_config(
        name, decoupled=True, max_batch_size=int(cfg["max_batch_size"]), engine_dir=engine_dir,
        num_threads=threads, device="cpu")}, MODEL_PY.read_text())
    ports = P.free_ports(3)
    h = CS.start_tritonserver(repo, workdir / "server.log", grpc_port=ports[0], http_port=ports[1],
                             metrics_port=ports[2], die_with_parent=True)
    return h, name


# ------------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=128, help="prompts per measurement (builtin dataset)")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens generated per request")
    ap.add_argument("--artifacts", default=str(REPO / "artifacts"), help="PERFDAG_ARTIFACTS for the build")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the served model (num_threads) and of the HF baseline")
    ap.add_argument("--params-file", default="params/default.yaml")
    ap.add_argument("--overrides", default="")
    ap.add_argument("--no-nonstreaming", action="store_true", help="skip the non-streaming pass")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    artifacts = Path(args.artifacts).expanduser().resolve()

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    t_start = time.monotonic()
    mach = machine()
    engine_dir = build_engine(artifacts, args.params_file, args.overrides)
    engine_cfg = json.loads((engine_dir / "config.json").read_text())
    from harness.model.datasets import load_dataset

    samples = load_dataset("builtin", None, engine_dir, args.requests, engine_cfg.get("max_input_len") or 128)
    prompts = [s.input_ids for s in samples]
    lens = [len(p) for p in prompts]
    print(f"engine {engine_dir}\n  quantization {engine_cfg['quantization']['format']}, dtype {engine_cfg['dtype']}, "
          f"max_batch_size {engine_cfg['max_batch_size']}, {engine_cfg['model']['num_parameters'] / 1e6:.2f}M params; "
          f"{len(prompts)} prompts of {min(lens)}-{max(lens)} tokens (mean {statistics.mean(lens):.1f}), "
          f"{args.new_tokens} new tokens each", flush=True)

    load0 = os.getloadavg()
    hf = hf_one_at_a_time(engine_dir, prompts, args.new_tokens, args.threads)
    print(f"HF generate one at a time: {hf['tok_s']:.0f} tok/s ({hf['seconds']:.1f}s)", flush=True)

    from harness.serving.triton import cpu_server as CS

    rows = []
    with tempfile.TemporaryDirectory(prefix="perfdag_engine_bench_") as tmp:
        h, model = start_server(engine_dir, Path(tmp), args.threads)
        try:
            print(f"tritonserver pid {h.pid} gRPC {h.grpc_url}", flush=True)
            t0 = time.monotonic()
            CS.wait_ready(h, timeout_s=180)
            print(f"ready in {time.monotonic() - t0:.1f}s", flush=True)
            for c in levels:
                st = served(h.grpc_url, model, prompts, args.new_tokens, c, streaming=True)
                ns = None if args.no_nonstreaming else served(h.grpc_url, model, prompts, args.new_tokens, c,
                                                              streaming=False)
                rows.append((c, st, ns))
                print(f"  concurrency {c}: streaming {st['tok_s']:.0f} tok/s"
                      + ("" if ns is None else f", non-streaming {ns['tok_s']:.0f} tok/s"), flush=True)
        finally:
            CS.stop_server(h, timeout=20)
            print(f"tritonserver pid {h.pid} stopped", flush=True)
    load1 = os.getloadavg()

    print(f"\nengine throughput: {len(prompts)} requests x {args.new_tokens} new tokens, tiny Llama "
          f"({engine_cfg['quantization']['format']}, {engine_cfg['dtype']}), torch threads {args.threads}")
    print(f"machine: nproc {mach['nproc']} (usable {mach['affinity']}), {mach['cpu']}, torch {mach['torch']}, transformers "
          f"{mach['transformers']}, python {mach['python']}; load avg {load0[0]:.2f} -> {load1[0]:.2f}")
    print(f"baseline: HF generate on the same engine model (load_torch_engine), one request at a time: "
          f"{hf['tok_s']:.0f} tok/s, {hf['mean_latency_ms']:.0f} ms/request\n")
    hdr = (f"{'concurrency':>11} {'served stream tok/s':>20} {'served non-stream tok/s':>24} "
           f"{'HF 1-at-a-time tok/s':>21} {'ratio stream':>13} {'ratio non-stream':>17} "
           f"{'stream lat ms':>14} {'TTFT ms':>8}")
    print(hdr)
    print("-" * len(hdr))
    for c, st, ns in rows:
        nst = "-" if ns is None else f"{ns['tok_s']:.0f}"
        nsr = "-" if ns is None else f"{ns['tok_s'] / hf['tok_s']:.2f}"
        print(f"{c:>11} {st['tok_s']:>20.0f} {nst:>24} {hf['tok_s']:>21.0f} {st['tok_s'] / hf['tok_s']:>13.2f} "
              f"{nsr:>17} {st['mean_latency_ms']:>14.0f} {st['mean_ttft_ms']:>8.1f}")
    print("\nratio = served tok/s / HF one-at-a-time tok/s. Tokens counted as received by the clients; closed "
          "loop: each client sends its next prompt when the previous one's final response arrived. "
          "lat/TTFT: streaming, per request, client side.")
    print(f"total wall {time.monotonic() - t_start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
