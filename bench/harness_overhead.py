"""Client cost per streamed response: perfdag's LoadGen SUT against bare client loops, same server.

Servers cost (almost) nothing, so what differs is the client: the echo Triton model
(harness/serving/testing/echo_model.py) on a CPU tritonserver, and the echo OpenAI server
(harness/serving/testing/echo_openai.py, token ids as vLLM returns them); the same tritonserver over
HTTP through Triton's generate extension (`--protocols generate`: perfdag's triton-generate core
against the gRPC stream core on one server). Each server runs in two modes: burst
(a request's responses sent at once, so one read carries many) and paced (`--pace-ms` per token,
one response per read). Bare loops (bench/bare_clients.py): tritonclient.grpc.aio, a raw grpc.aio loop
(templated request bytes, raw output bytes: the cheapest a gRPC client gets), aiohttp and
httpx (aiohttp alone for generate_stream), each on uvloop (perfdag's frontends' loop) and on asyncio's own; tritonclient's threaded
streams. For chat completions (`--protocols chat`: perfdag's chat core, the same echo
server's /v1/chat/completions), aiohttp on each loop. For transcriptions (`--protocols transcription`:
perfdag's transcription core, the echo transcription server, harness/serving/testing/echo_transcription.py,
16 words per clip as vLLM streams them), aiohttp posting the same multipart forms on each loop; a
response is an event with text, or an answer not streamed.

Method (the same for every client):
* the same prompts, `--tokens` tokens per request, `--in-flight` requests outstanding over
  `--conns` streams / clients (perfdag: 1 frontend x conns clients, harness max_in_flight);
* a response is a message that carried tokens (a usage-only SSE event is not one);
* each run is a fresh process; its CPU is the whole process tree's (RUSAGE_CHILDREN of the bench
  after the run was reaped: perfdag's caller, driver and frontends), and the cost per response
  is the difference of a `--small` and a `--large` run over the difference of their responses,
  so start-up and warm-up cancel;
* a round runs every (client, size, mode, server) once in a shuffled order; ratios perfdag / best
  bare are formed within a round; min / median / max over `--rounds`;
* the 1-minute load average is recorded at start and before each round; at 1 or more the bench
  refuses to start (a shared machine's figures do not reproduce) unless `--allow-load`.

    python bench/harness_overhead.py [--rounds 5] [--protocols grpc,http,generate] [--modes stream,nostream]
                                     [--servers burst,paced] [--pace-ms 1] [--tokens-per-chunk 1]
    python bench/harness_overhead.py --scaling 1,2 [--protocols grpc,http]   # throughput by frontends
    python bench/harness_overhead.py --tcp [--protocols grpc,http]   # also client perfdag-tcp: its frontend on
                                     # "another node" (a client host on this one), fed over a TCP link
    python bench/harness_overhead.py --table bench/results/<file>.json       # a results file's table

Raw results: bench/results/harness_overhead-<UTC time>.json (every run, every round).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.overhead_table import summarise, table  # noqa: E402  (REPO on the path first)
RESULTS = REPO / "bench" / "results"
ECHO_PY = REPO / "harness" / "serving" / "testing" / "echo_model.py"
TRITON_MODELS = {"burst": "echo", "paced": "echo_paced"}  # the echo model in each server mode
# the bench's protocols: Triton over gRPC, the OpenAI echo server, Triton's generate extension (HTTP)
PERFDAG_PROTOCOLS = {"grpc": "triton-grpc", "http": "openai-http", "generate": "triton-generate",
                     "chat": "openai-chat", "transcription": "openai-transcription"}
OPENAI = ("http", "chat", "transcription")  # the protocols the echo OpenAI servers answer
MAX_LOAD = 1.0  # the 1-minute load average at or above which a run's figures are not a result


def prompts_for(n: int) -> list[list[int]]:
    return [[10 + i % 500, 40 + i % 7, 30, 31 + i % 3] for i in range(n)]


# ------------------------------------------------------------------ one run (a child process)

def worker(spec: dict) -> dict:
    if spec.get("tree"):
        sys.path.insert(0, spec["tree"])  # that checkout's harness/, ahead of this one's
    prompts = prompts_for(spec["n"])
    if spec["client"] in ("perfdag", "perfdag-before", "perfdag-tcp"):
        return perfdag_run(spec, prompts)
    from bench.bare_clients import LOOPS

    out = LOOPS[spec["protocol"]][spec["client"]](
        spec["url"], prompts, spec["in_flight"], spec["tokens"], spec["streaming"], spec["warm"],
        conns=spec["conns"], model=spec.get("model", "echo"))
    out.pop("ttft_ns")
    out["n_tokens_distinct"] = sorted(set(out.pop("n_tokens").values()))  # every request's count, deduplicated
    return out


def perfdag_run(spec: dict, prompts) -> dict:
    import inspect

    from harness.loadgen import run_loadgen

    n = len(prompts)
    extra = {}
    if "max_in_flight" in inspect.signature(run_loadgen).parameters:  # not in a --before tree
        extra["max_in_flight"] = spec["in_flight"]
    api = {"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"}
    if spec["client"] == "perfdag-tcp":  # harness.client_nodes' path: the frontend behind a TCP link
        extra["remote"] = [{"node": "bench-link", "frontends": list(range(spec.get("frontends", 1))),
                            "argv": [sys.executable, "-m", "harness.loadgen.client_host"]}]
        extra["listen"] = "127.0.0.1"
    if spec["protocol"] == "chat":  # the bare chat loop's user messages, encoded once as the core sends them
        from bench.bare_clients import chat_text
        from harness.serving.openai.chat import sample_part

        extra["prompt_texts"] = [sample_part([{"role": "user", "content": chat_text(p)}]) for p in prompts]
        api = {"kind": "vllm", "log": "text"}
    if spec["protocol"] == "transcription":  # each prompt's clip, uploaded as the bare loop uploads it
        from bench.bare_clients import transcription_clip

        from harness.model.tiny_whisper import train_tokenizer

        extra["prompt_texts"] = [str(transcription_clip(p)) for p in prompts]
        # an answer not streamed has no token count: the core counts with a tokenizer (one made here)
        tok = Path(tempfile.mkdtemp(prefix="perfdag_bench_tok_"))
        train_tokenizer([f"w{k}" for k in range(20)], tok, 300).save_pretrained(tok)
        api = {"kind": "vllm", "log": "labels", "tokenizer": str(tok)}
    with tempfile.TemporaryDirectory(prefix="perfdag_bench_lg_") as out:
        t0 = time.monotonic()
        r = run_loadgen([spec["url"]], spec.get("model", "echo") if spec["protocol"] not in OPENAI else "", prompts,
                        {"offline_expected_qps": 1, "min_duration_ms": 0, "min_query_count": n,
                         "performance_sample_count": n},
                        out, scenario="Offline", frontends=spec.get("frontends", 1), clients_per_frontend=spec["conns"],
                        warmup_queries=spec["warm"], max_new_tokens=spec["tokens"],
                        streaming=spec["streaming"], request_timeout_s=120, progress=False,
                        protocol=PERFDAG_PROTOCOLS[spec["protocol"]], api=api, **extra)
        wall = time.monotonic() - t0
    m = r["measured"]
    h = r["harness"]
    per_chunk = spec.get("per_chunk", 1)  # every request's tokens come in whole chunks (checked at start)
    return {"responses": m["tokens"] // per_chunk if spec["streaming"] else m["requests"], "tokens": m["tokens"],
            "requests": m["requests"], "seconds": n / r["samples_per_s"], "wall_s": wall,
            "samples_per_s": r["samples_per_s"], "client_bound": r.get("client_bound"),
            "peak_in_flight": h.get("peak_in_flight"), "client_cpu": h.get("client_cpu")}


def run_child(spec: dict) -> dict:
    """Runs `spec` in a fresh process; adds the CPU its whole process tree used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    tree = spec.get("tree") or str(REPO)  # perfdag-before: another perfdag checkout's harness/
    env = {**os.environ, "PYTHONPATH": tree + os.pathsep + str(REPO)}
    p = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"run {spec} failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["elapsed_s"] = time.monotonic() - t0
    out["load1"] = os.getloadavg()[0]
    return {**spec, **out}


# ------------------------------------------------------------------ servers

def start_triton(root: Path, pace_ms: float, per_chunk: int = 1) -> tuple[dict, callable]:
    """One CPU tritonserver serving the echo model burst ("echo") and paced ("echo_paced"), each
    response carrying `per_chunk` tokens; its URLs per protocol (grpc, generate) and server mode."""
    from harness.backends.torch.repo import render_torch_model_config
    from harness.serving import ports as P
    from harness.serving.triton import cpu_server as CS
    from harness.serving.triton.pbtxt import write_model_repo

    configs = {name: render_torch_model_config(
        name, decoupled=True, max_batch_size=64, engine_dir="unused", instance_count=1,
        extra_parameters={"tokens_per_response": str(per_chunk),
                          **({"token_delay_ms": str(pace_ms)} if server == "paced" else {})})
        for server, name in TRITON_MODELS.items()}
    repo = write_model_repo(root / "repo", configs, ECHO_PY.read_text())
    ports = P.free_ports(3)
    h = CS.start_tritonserver(repo, root / "server.log", grpc_port=ports[0], http_port=ports[1], metrics_port=ports[2])
    CS.wait_ready(h, timeout_s=120)
    http = f"{h.spec.host}:{ports[1]}"
    return ({"grpc": {server: h.grpc_url for server in TRITON_MODELS},
             "generate": {server: http for server in TRITON_MODELS}}, lambda: CS.stop_server(h, timeout=20))


def start_echo(module: str, *flags: str) -> tuple[str, subprocess.Popen]:
    """One echo server, `python -m <module> --port P <flags>`, once it answers: its URL and process."""
    from harness.serving import ports as P
    from harness.serving.openai.client import probe

    port = P.free_port()
    proc = subprocess.Popen([sys.executable, "-m", module, "--port", str(port), *flags], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            proc.wait(10)
            raise RuntimeError(f"{module} did not start")
        time.sleep(0.1)
    return url, proc


def _start_echo_pair(module: str, delay_flag: str, pace_ms: float, *flags: str) -> tuple[dict, callable]:
    """Two echo servers: burst, and paced (`delay_flag` `pace_ms`); their URLs by server, and what stops both."""
    procs, urls = [], {}

    def stop():
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
    try:
        for server, delay in (("burst", 0.0), ("paced", pace_ms)):
            urls[server], proc = start_echo(module, delay_flag, str(delay), *flags)
            procs.append(proc)
    except RuntimeError:
        stop()
        raise
    return urls, stop


def start_echo_http(root: Path, pace_ms: float, per_chunk: int = 1) -> tuple[dict, callable]:
    """Two echo OpenAI servers: burst, and paced at `pace_ms` per token; `per_chunk` tokens per event."""
    urls, stop = _start_echo_pair("harness.serving.testing.echo_openai", "--token-delay-ms", pace_ms, "--token-ids",
                                  "--tokens-per-chunk", str(per_chunk))
    return {"http": urls, "chat": urls}, stop  # chat completions: the same echo server


def start_echo_transcription(pace_ms: float) -> tuple[dict, callable]:
    """Two echo transcription servers (vLLM's events): burst, and paced at `pace_ms` per word."""
    urls, stop = _start_echo_pair("harness.serving.testing.echo_transcription", "--word-delay-ms", pace_ms,
                                  "--words", "16")
    return {"transcription": urls}, stop


# ------------------------------------------------------------------ rounds and summary

def bare_loops(proto: str) -> tuple[str, ...]:
    from bench.bare_clients import LOOPS
    return tuple(LOOPS[proto])


def scaling(args, urls) -> list[dict]:
    """perfdag's streamed responses/s against harness.frontends (one large run each, rounds
    interleaved, burst servers); CPU per response of the whole run, start-up included."""
    runs = []
    for rnd in range(args.rounds):
        cells = [(p, f) for p in args.protocols for f in args.scaling]
        random.shuffle(cells)
        for proto, fe in cells:
            spec = {"client": "perfdag", "protocol": proto, "url": urls[proto]["burst"], "n": args.large,
                    "tokens": args.tokens, "per_chunk": args.tokens_per_chunk, "in_flight": args.in_flight * fe,
                    "conns": args.conns, "frontends": fe,
                    "streaming": True, "warm": args.conns * fe, "mode": "stream", "server": "burst", "round": rnd}
            r = run_child(spec)
            runs.append(r)
            print(f"  scaling {proto} frontends={fe}: {r['responses'] / r['seconds']:.0f} resp/s "
                  f"client_bound={r.get('client_bound')}", flush=True)
    out = []
    for proto in args.protocols:
        for fe in args.scaling:
            rs = [r for r in runs if r["protocol"] == proto and r["frontends"] == fe]
            out.append({"protocol": proto, "frontends": fe,
                        "responses_per_s": statistics.median(r["responses"] / r["seconds"] for r in rs),
                        "cpu_us": statistics.median(r["cpu_s"] * 1e6 / r["responses"] for r in rs),
                        "client_bound": sorted({str(r.get("client_bound")) for r in rs}), "runs": rs})
    return out


def cost_rounds(args, urls, doc: dict, out: Path) -> None:
    """Every (protocol, mode, server, client, size) once per round, in a shuffled order."""
    only = set(args.clients.split(",")) - {""}
    mine = ("perfdag", *(("perfdag-before",) if args.before else ()), *(("perfdag-tcp",) if args.tcp else ()))
    for rnd in range(args.rounds):
        doc["load_before_round"].append(os.getloadavg()[0])
        cells = [(p, m, srv, c, n) for p in args.protocols for m in args.modes for srv in args.servers
                 for c in (*mine, *bare_loops(p)) if not only or c in only for n in (args.small, args.large)]
        random.shuffle(cells)
        for proto, mode, server, client, n in cells:
            spec = {"client": client, "protocol": proto, "url": urls[proto][server], "n": n, "tokens": args.tokens,
                    "per_chunk": args.tokens_per_chunk,
                    "in_flight": args.in_flight, "conns": args.conns, "streaming": mode == "stream",
                    "warm": args.conns, "mode": mode, "server": server, "round": rnd,
                    **({"model": TRITON_MODELS[server]} if proto not in OPENAI else {}),
                    **({"tree": str(Path(args.before).resolve())} if client == "perfdag-before" else {})}
            r = run_child(spec)
            doc["runs"].append(r)
            print(f"round {rnd} {proto:4} {mode:8} {server:5} {client:24} n={n:5} cpu {r['cpu_s']:.2f}s "
                  f"responses {r['responses']} load {r['load1']:.1f}", flush=True)
        out.write_text(json.dumps(doc, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--table", metavar="JSON", help="print the table of a results file and exit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--small", type=int, default=400)
    ap.add_argument("--large", type=int, default=2400)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--conns", type=int, default=4, help="gRPC streams / perfdag clients")
    ap.add_argument("--protocols", default="grpc,http,generate")
    ap.add_argument("--modes", default="stream,nostream")
    ap.add_argument("--servers", default="burst,paced", help="server modes: burst, paced")
    ap.add_argument("--pace-ms", type=float, default=1.0, help="paced servers: ms per token")
    ap.add_argument("--tokens-per-chunk", type=int, default=1,
                    help="tokens in each streamed response (a server with a stream interval); a response is a chunk")
    ap.add_argument("--clients", default="", help="limit to these clients (perfdag,aiohttp-uvloop,...)")
    ap.add_argument("--scaling", default="", help="frontend counts: throughput rows instead of the cost table")
    ap.add_argument("--allow-load", action="store_true",
                    help=f"run even at a load average of {MAX_LOAD:g} or more (a smoke run, not a result)")
    ap.add_argument("--out", default="", help="results file (default bench/results/harness_overhead-<time>.json)")
    ap.add_argument("--tcp", action="store_true",
                    help="also client perfdag-tcp: perfdag with its frontend behind a TCP link (harness.client_nodes)")
    ap.add_argument("--before", default="", metavar="DIR",
                    help="also run perfdag from this checkout (e.g. `git archive <commit> | tar -x -C DIR`) "
                         "as client perfdag-before")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    args.protocols = args.protocols.split(",")
    args.modes = args.modes.split(",")
    args.servers = args.servers.split(",")
    args.scaling = [int(x) for x in args.scaling.split(",") if x]
    bad = [s for s in args.servers if s not in TRITON_MODELS] + [p for p in args.protocols if p not in PERFDAG_PROTOCOLS]
    if args.tokens_per_chunk > 1 and ("chat" in args.protocols or "transcription" in args.protocols):
        print("error: --tokens-per-chunk above 1 takes --protocols http, grpc or generate: the echo server's "
              "chat stream sends one token per event whatever the chunk size", file=sys.stderr)
        return 2
    if args.tokens_per_chunk < 1 or args.tokens % args.tokens_per_chunk:
        print(f"error: --tokens-per-chunk must divide --tokens ({args.tokens}), so every request has whole "
              f"chunks (got {args.tokens_per_chunk})", file=sys.stderr)
        return 2
    if bad or args.pace_ms <= 0:
        print(f"error: --servers takes {', '.join(TRITON_MODELS)}, --protocols {', '.join(PERFDAG_PROTOCOLS)} and "
              f"--pace-ms a positive number (got {', '.join(bad) or args.pace_ms})", file=sys.stderr)
        return 2
    load = os.getloadavg()[0]
    if load >= MAX_LOAD:
        if not args.allow_load:
            print(f"error: the load average is {load:.2f} (>= {MAX_LOAD:g}): other work would be measured with the "
                  "clients; run on a quiet machine, or pass --allow-load for a smoke run (not a result)",
                  file=sys.stderr)
            return 2
        print(f"WARNING: load average {load:.2f} >= {MAX_LOAD:g}: a smoke run, its figures are not a result",
              file=sys.stderr, flush=True)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    doc = {"started": started, "args": {k: v for k, v in vars(args).items() if k not in ("worker", "table")},
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
           "load_at_start": load, "load_before_round": [], "smoke": load >= MAX_LOAD, "runs": []}
    name = f"harness_overhead-{'scaling-' if args.scaling else ''}{'smoke-' if doc['smoke'] else ''}{started}.json"
    out = Path(args.out) if args.out else RESULTS / name
    out.parent.mkdir(parents=True, exist_ok=True)
    stops = []
    try:
        with tempfile.TemporaryDirectory(prefix="perfdag_bench_") as tmp:
            urls = {}
            for proto in args.protocols:
                if proto not in urls:  # grpc and generate share one tritonserver, http and chat one echo server
                    if proto == "transcription":  # its own echo server: /v1/audio/transcriptions
                        got, stop = start_echo_transcription(args.pace_ms)
                    else:
                        got, stop = (start_echo_http if proto in OPENAI else start_triton)(
                            Path(tmp) / proto, args.pace_ms, args.tokens_per_chunk)
                    urls.update(got)
                    stops.append(stop)
            if args.scaling:
                doc["scaling"] = scaling(args, urls)
            else:
                cost_rounds(args, urls, doc, out)
                doc["summary"] = summarise(doc)
    finally:
        for stop in stops:
            stop()
    out.write_text(json.dumps(doc, indent=1))
    print(f"\n{table(doc)}\n\nraw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
