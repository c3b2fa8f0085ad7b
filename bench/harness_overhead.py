"""Client cost per streamed response: perfdag's LoadGen SUT against bare client loops, same server.

Servers cost (almost) nothing, so what differs is the client: the echo Triton model
(harness/serving/testing/echo_model.py) on a CPU tritonserver, and the echo OpenAI server
(harness/serving/testing/echo_openai.py, token ids as vLLM returns them). Bare loops (bench/bare_clients.py):
tritonclient.grpc.aio and tritonclient's threaded streams; aiohttp and httpx with a connection
for every in-flight request; for chat completions (`--protocols chat`: perfdag's chat core, the
same echo server's /v1/chat/completions), aiohttp.

Method (the same for every client):
* the same prompts, `--tokens` tokens per request, `--in-flight` requests outstanding over
  `--conns` streams / clients (perfdag: 1 frontend x conns clients, harness max_in_flight);
* a response is a message that carried tokens (a usage-only SSE event is not one);
* each run is a fresh process; its CPU is the whole process tree's (RUSAGE_CHILDREN of the bench
  after the run was reaped: perfdag's caller, driver and frontends), and the cost per response
  is the difference of a `--small` and a `--large` run over the difference of their responses,
  so start-up and warm-up cancel;
* a round runs every (client, size, mode) once in a shuffled order; ratios perfdag / best bare
  are formed within a round; min / median / max over `--rounds`.

    python bench/harness_overhead.py [--rounds 5] [--protocols grpc,http] [--modes stream,nostream]
    python bench/harness_overhead.py --scaling 1,2 [--protocols grpc,http]   # throughput by frontends
    python bench/harness_overhead.py --table bench/results/<file>.json       # the README's table

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
RESULTS = REPO / "bench" / "results"
ECHO_PY = REPO / "harness" / "serving" / "testing" / "echo_model.py"


def prompts_for(n: int) -> list[list[int]]:
    return [[10 + i % 500, 40 + i % 7, 30, 31 + i % 3] for i in range(n)]


# ------------------------------------------------------------------ one run (a child process)

def worker(spec: dict) -> dict:
    if spec.get("tree"):
        sys.path.insert(0, spec["tree"])  # that checkout's harness/, ahead of this one's
    prompts = prompts_for(spec["n"])
    if spec["client"] in ("perfdag", "perfdag-before"):
        return perfdag_run(spec, prompts)
    from bench.bare_clients import LOOPS

    out = LOOPS[spec["protocol"]][spec["client"]](
        spec["url"], prompts, spec["in_flight"], spec["tokens"], spec["streaming"], spec["warm"],
        conns=spec["conns"])
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
    if spec["protocol"] == "chat":  # the bare chat loop's user messages, encoded once as the core sends them
        from bench.bare_clients import chat_text
        from harness.serving.openai.chat import sample_part

        extra["prompt_texts"] = [sample_part([{"role": "user", "content": chat_text(p)}]) for p in prompts]
        api = {"kind": "vllm", "log": "text"}
    with tempfile.TemporaryDirectory(prefix="perfdag_bench_lg_") as out:
        t0 = time.monotonic()
        r = run_loadgen([spec["url"]], "echo" if spec["protocol"] == "grpc" else "", prompts,
                        {"offline_expected_qps": 1, "min_duration_ms": 0, "min_query_count": n,
                         "performance_sample_count": n},
                        out, scenario="Offline", frontends=spec.get("frontends", 1), clients_per_frontend=spec["conns"],
                        warmup_queries=spec["warm"], max_new_tokens=spec["tokens"],
                        streaming=spec["streaming"], request_timeout_s=120, progress=False,
                        protocol={"grpc": "triton-grpc", "http": "openai-http", "chat": "openai-chat"}[spec["protocol"]],
                        api=api, **extra)
        wall = time.monotonic() - t0
    m = r["measured"]
    h = r["harness"]
    return {"responses": m["tokens"] if spec["streaming"] else m["requests"], "tokens": m["tokens"],
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

def start_triton(root: Path):
    from harness.backends.torch.repo import render_torch_model_config
    from harness.serving import ports as P
    from harness.serving.triton import cpu_server as CS
    from harness.serving.triton.pbtxt import write_model_repo

    repo = write_model_repo(root / "repo", {"echo": render_torch_model_config(
        "echo", decoupled=True, max_batch_size=64, engine_dir="unused", instance_count=1)}, ECHO_PY.read_text())
    ports = P.free_ports(3)
    h = CS.start_tritonserver(repo, root / "server.log", grpc_port=ports[0], http_port=ports[1], metrics_port=ports[2])
    CS.wait_ready(h, timeout_s=120)
    return h.grpc_url, lambda: CS.stop_server(h, timeout=20)


def start_echo_http(root: Path):
    from harness.serving import ports as P
    from harness.serving.openai.client import probe

    port = P.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port), "--token-ids"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("echo OpenAI server did not start")
        time.sleep(0.1)

    def stop():
        proc.terminate()
        proc.wait(10)
    return url, stop


# ------------------------------------------------------------------ rounds and summary

BARE = {"grpc": ("tritonclient-aio", "tritonclient-stream"), "http": ("aiohttp", "httpx"), "chat": ("aiohttp-chat",)}


def per_response_us(runs: list[dict], small: int, large: int) -> float | None:
    by = {r["n"]: r for r in runs}
    if small not in by or large not in by:
        return None
    d_resp = by[large]["responses"] - by[small]["responses"]
    return (by[large]["cpu_s"] - by[small]["cpu_s"]) * 1e6 / d_resp if d_resp > 0 else None


def summarise(doc: dict) -> list[dict]:
    """One row per (protocol, mode): perfdag's and each bare loop's µs/response per round, the
    ratio perfdag / best bare within each round, min/median/max."""
    a = doc["args"]
    rows = []
    for proto in a["protocols"]:
        for mode in a["modes"]:
            per_round = []
            for rnd in range(a["rounds"]):
                cell = [r for r in doc["runs"] if r["round"] == rnd and r["protocol"] == proto and r["mode"] == mode]
                costs = {c: per_response_us([r for r in cell if r["client"] == c], a["small"], a["large"])
                         for c in ("perfdag", "perfdag-before", *BARE[proto])}
                bare = {c: v for c, v in costs.items() if c in BARE[proto] and v}
                if not costs["perfdag"] or not bare:
                    continue
                best = min(bare, key=bare.get)
                loads = [r["load1"] for r in cell]
                per_round.append({"round": rnd, "costs": costs, "best_bare": best,
                                  "ratio": costs["perfdag"] / bare[best], "load": [min(loads), max(loads)]})
            if not per_round:
                continue
            ratios = [p["ratio"] for p in per_round]

            def med(c):
                v = [p["costs"][c] for p in per_round if p["costs"].get(c)]
                return statistics.median(v) if v else None
            before = [p["costs"]["perfdag-before"] / p["costs"]["perfdag"] for p in per_round
                      if p["costs"].get("perfdag-before")]
            rows.append({"protocol": proto, "mode": mode, "rounds": len(per_round),
                         "perfdag_us": med("perfdag"), "bare_us": {c: med(c) for c in BARE[proto]},
                         "before_us": med("perfdag-before"),
                         "before_over_now_median": statistics.median(before) if before else None,
                         "ratio_min": min(ratios), "ratio_median": statistics.median(ratios),
                         "ratio_max": max(ratios),
                         "load": [min(p["load"][0] for p in per_round), max(p["load"][1] for p in per_round)],
                         "per_round": per_round})
    return rows


def table(doc: dict) -> str:
    a = doc["args"]
    lines = [f"{a['small']} and {a['large']} samples x {a['tokens']} tokens, {a['in_flight']} in flight over "
             f"{a['conns']} streams/clients; {doc['machine']['cpus']} CPUs; {doc['started']}"]
    rows = [] if doc.get("scaling") else (doc.get("summary") or summarise(doc))
    if rows:
        lines += ["", "| protocol | mode | perfdag µs/resp | bare µs/resp (median) | perfdag / best bare: "
                  "min / median / max | rounds | load (1 min) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        bare = ", ".join(f"{c} {v:.0f}" for c, v in r["bare_us"].items() if v)
        lines.append(f"| {r['protocol']} | {'streaming' if r['mode'] == 'stream' else 'non-streaming'} | "
                     f"{r['perfdag_us']:.0f} | {bare} | {r['ratio_min']:.2f} / {r['ratio_median']:.2f} / "
                     f"{r['ratio_max']:.2f} | {r['rounds']} | {r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    if any(r.get("before_us") for r in rows):
        lines += ["", "| protocol | mode | perfdag before µs/resp | now µs/resp | before / now (median of rounds) |",
                  "|---|---|---|---|---|"]
        for r in rows:
            if r.get("before_us"):
                lines.append(f"| {r['protocol']} | {r['mode']} | {r['before_us']:.0f} | {r['perfdag_us']:.0f} | "
                             f"{r['before_over_now_median']:.2f} |")
    if doc.get("scaling"):
        lines += ["", f"{a['large']} samples per run, {a['in_flight']} in flight per frontend; client CPU of the "
                  "whole run (start-up included) per response", "",
                  "| protocol | frontends | responses/s (median) | client CPU µs/resp | client-bound |",
                  "|---|---|---|---|---|"]
        for s in doc["scaling"]:
            lines.append(f"| {s['protocol']} | {s['frontends']} | {s['responses_per_s']:.0f} | "
                         f"{s['cpu_us']:.0f} | {', '.join(s['client_bound'])} |")
    return "\n".join(lines)


def scaling(args, urls) -> list[dict]:
    """perfdag's streamed responses/s against harness.frontends (one large run each, rounds
    interleaved); CPU per response of the whole run, start-up included."""
    runs = []
    for rnd in range(args.rounds):
        cells = [(p, f) for p in args.protocols for f in args.scaling]
        random.shuffle(cells)
        for proto, fe in cells:
            spec = {"client": "perfdag", "protocol": proto, "url": urls[proto], "n": args.large, "tokens": args.tokens,
                    "in_flight": args.in_flight * fe, "conns": args.conns, "frontends": fe, "streaming": True,
                    "warm": args.conns * fe, "mode": "stream", "round": rnd}
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--table", metavar="JSON", help="print the README table of a results file and exit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--small", type=int, default=400)
    ap.add_argument("--large", type=int, default=2400)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--conns", type=int, default=4, help="gRPC streams / perfdag clients")
    ap.add_argument("--protocols", default="grpc,http")
    ap.add_argument("--modes", default="stream,nostream")
    ap.add_argument("--clients", default="", help="limit to these clients (perfdag,aiohttp,...)")
    ap.add_argument("--scaling", default="", help="frontend counts: throughput rows instead of the cost table")
    ap.add_argument("--out", default="", help="results file (default bench/results/harness_overhead-<time>.json)")
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
    args.scaling = [int(x) for x in args.scaling.split(",") if x]
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    doc = {"started": started, "args": {k: v for k, v in vars(args).items() if k not in ("worker", "table")},
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
           "runs": []}
    out = Path(args.out) if args.out else RESULTS / f"harness_overhead-{'scaling-' if args.scaling else ''}{started}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    stops = []
    try:
        with tempfile.TemporaryDirectory(prefix="perfdag_bench_") as tmp:
            urls = {}
            for proto in args.protocols:
                url, stop = (start_triton if proto == "grpc" else start_echo_http)(Path(tmp) / proto)
                urls[proto] = url
                stops.append(stop)
            if args.scaling:
                doc["scaling"] = scaling(args, urls)
            else:
                only = set(args.clients.split(",")) - {""}
                for rnd in range(args.rounds):
                    mine = ("perfdag", "perfdag-before") if args.before else ("perfdag",)
                    cells = [(p, m, c, n) for p in args.protocols for m in args.modes
                             for c in (*mine, *BARE[p]) if not only or c in only for n in (args.small, args.large)]
                    random.shuffle(cells)
                    for proto, mode, client, n in cells:
                        spec = {"client": client, "protocol": proto, "url": urls[proto], "n": n, "tokens": args.tokens,
                                "in_flight": args.in_flight, "conns": args.conns, "streaming": mode == "stream",
                                "warm": args.conns, "mode": mode, "round": rnd,
                                **({"tree": str(Path(args.before).resolve())} if client == "perfdag-before" else {})}
                        r = run_child(spec)
                        doc["runs"].append(r)
                        print(f"round {rnd} {proto:4} {mode:8} {client:20} n={n:5} cpu {r['cpu_s']:.2f}s "
                              f"responses {r['responses']} load {r['load1']:.1f}", flush=True)
                    out.write_text(json.dumps(doc, indent=1))
                doc["summary"] = summarise(doc)
    finally:
        for stop in stops:
            stop()
    out.write_text(json.dumps(doc, indent=1))
    print(f"\n{table(doc)}\n\nraw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
