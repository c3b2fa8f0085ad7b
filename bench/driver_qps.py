"""Queries per second of the LoadGen driver on minimal responses, against LoadGen's own floor.

Two clients, each run in a fresh process, rounds interleaved:

* `bare`: a LoadGen SUT that completes every query the moment it is issued (QuerySamplesComplete
  from issue_queries, one response of 2 tokens each, no data): what LoadGen itself costs per query,
  the floor no SUT gets under.
* `perfdag`: perfdag's whole client (run_loadgen: driver + 1 frontend) against the echo OpenAI
  server answering 2 tokens, not streamed; the driver's own CPU over the timed run per query comes
  from result.json (`harness.client_cpu.driver`), the frontend's beside it.

Both run Offline (all queries issued at once) and Server at `--server-qps` (one query per issue
call, LoadGen's scheduler paced). The 1-minute load average is recorded at start and before each
round; at 1 or more the bench refuses to start unless `--allow-load` (a smoke run, not a result).

    python bench/driver_qps.py [--rounds 3] [--queries 20000] [--server-qps 20000] [--in-flight 256]

Raw results: bench/results/driver_qps-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.harness_overhead import start_echo  # noqa: E402  (REPO on the path first)

RESULTS = REPO / "bench" / "results"
MAX_LOAD = 1.0
TOKENS = 2  # the fewest a completion may report (harness.loadgen.cores.base.MIN_TOKENS)


def settings_for(scenario: str, n: int, server_qps: float) -> dict:
    base = {"min_duration_ms": 0, "min_query_count": n, "performance_sample_count": min(n, 1024)}
    if scenario == "Offline":
        return {**base, "offline_expected_qps": 1}
    return {**base, "server_target_qps": server_qps, "max_duration_ms": 600_000}


def bare_run(spec: dict) -> dict:
    """LoadGen with a SUT that completes each query at once; CPU and wall of StartTest alone."""
    import mlperf_loadgen as lg

    n, scenario = spec["queries"], spec["scenario"]
    done = [0]

    def issue(samples):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0, TOKENS) for s in samples])
        done[0] += len(samples)

    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, scenario)
    ts.mode = lg.TestMode.PerformanceOnly
    s = settings_for(scenario, n, spec["server_qps"])
    ts.min_duration_ms, ts.min_query_count = s["min_duration_ms"], s["min_query_count"]
    ts.use_token_latencies = True
    if scenario == "Offline":
        ts.offline_expected_qps = s["offline_expected_qps"]
    else:
        ts.server_target_qps = s["server_target_qps"]
        ts.max_duration_ms = s["max_duration_ms"]
    with tempfile.TemporaryDirectory(prefix="perfdag_bench_lg_") as out:
        log = lg.LogSettings()
        log.log_output.outdir = out
        log.log_output.copy_summary_to_stdout = False
        log.enable_trace = False
        sut = lg.ConstructSUT(issue, lambda: None)
        qsl = lg.ConstructQSL(n, s["performance_sample_count"], lambda x: None, lambda x: None)
        cpu0, t0 = time.process_time(), time.monotonic()
        lg.StartTestWithLogSettings(sut, qsl, ts, log)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        lg.DestroySUT(sut)
        lg.DestroyQSL(qsl)
    return {"queries": done[0], "cpu_s": cpu, "wall_s": wall}


def perfdag_run(spec: dict) -> dict:
    from harness.loadgen import run_loadgen

    n = spec["queries"]
    prompts = [[10 + i % 500, 40 + i % 7, 30, 31] for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="perfdag_bench_lg_") as out:
        r = run_loadgen([spec["url"]], "", prompts, settings_for(spec["scenario"], n, spec["server_qps"]), out,
                        scenario=spec["scenario"], frontends=1, clients_per_frontend=4, warmup_queries=4,
                        max_new_tokens=TOKENS, streaming=False, request_timeout_s=120, progress=False,
                        protocol="openai-http", max_in_flight=spec["in_flight"],
                        api={"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"})
    cpu = r["harness"]["client_cpu"]
    return {"queries": r["measured"]["requests"], "samples_per_s": r["samples_per_s"],
            "cpu_s": cpu["driver"]["cpu_s"], "wall_s": cpu["driver"]["wall_s"], "driver_busy": cpu["driver"]["busy"],
            "frontend_cpu_s": sum(f["cpu_s"] or 0 for f in cpu["frontends"]), "client_bound": r["client_bound"]}


def run_child(spec: dict) -> dict:
    p = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], cwd=REPO, capture_output=True,
                       text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    if p.returncode != 0:
        raise RuntimeError(f"run {spec} failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["us_per_query"] = out["cpu_s"] * 1e6 / out["queries"]
    out["queries_per_cpu_s"] = out["queries"] / out["cpu_s"] if out["cpu_s"] else None
    out["queries_per_s"] = out["queries"] / out["wall_s"] if out["wall_s"] else None
    out["load1"] = os.getloadavg()[0]
    return {**spec, **out}


def table(doc: dict) -> str:
    a = doc["args"]
    lines = [f"{a['queries']} queries of {TOKENS} tokens, not streamed; Server at {a['server_qps']:g} qps target; "
             f"perfdag {a['in_flight']} in flight, 1 frontend; {doc['machine']['cpus']} CPUs; {doc['started']}; "
             f"load average at start {doc['load_at_start']:.2f}, before rounds "
             f"{', '.join(f'{x:.2f}' for x in doc['load_before_round'])}", "",
             "median (min-max) over rounds; CPU of the LoadGen process (bare: the SUT's process; perfdag: "
             "the driver) over the test", "",
             "| scenario | client | CPU µs per query | queries per CPU-second | queries/s (wall) |", "|---|---|---|---|---|"]

    def fmt(vals, f):
        vals = [v for v in vals if v is not None]
        return f"{f(statistics.median(vals))} ({f(min(vals))}-{f(max(vals))})" if vals else "-"
    for sc in a["scenarios"]:
        for client in a["clients"]:
            rs = [r for r in doc["runs"] if r["scenario"] == sc and r["client"] == client]
            if rs:
                lines.append(f"| {sc} | {client} | {fmt([r['us_per_query'] for r in rs], lambda v: f'{v:.1f}')} | "
                             f"{fmt([r['queries_per_cpu_s'] for r in rs], lambda v: f'{v:,.0f}')} | "
                             f"{fmt([r['queries_per_s'] for r in rs], lambda v: f'{v:,.0f}')} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--table", metavar="JSON", help="print the table of a results file and exit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=20000)
    ap.add_argument("--server-qps", type=float, default=20000)
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--scenarios", default="Offline,Server")
    ap.add_argument("--clients", default="bare,perfdag")
    ap.add_argument("--allow-load", action="store_true", help="run even at a load average of 1 or more (a smoke run)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        print(json.dumps(bare_run(spec) if spec["client"] == "bare" else perfdag_run(spec)))
        return 0
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    args.scenarios, args.clients = args.scenarios.split(","), args.clients.split(",")
    load = os.getloadavg()[0]
    if load >= MAX_LOAD and not args.allow_load:
        print(f"error: the load average is {load:.2f} (>= {MAX_LOAD:g}); run on a quiet machine, or pass "
              "--allow-load for a smoke run (not a result)", file=sys.stderr)
        return 2
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    smoke = load >= MAX_LOAD
    doc = {"started": started, "args": {k: v for k, v in vars(args).items() if k not in ("worker", "table")},
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
           "load_at_start": load, "load_before_round": [], "smoke": smoke, "runs": []}
    out = Path(args.out) if args.out else RESULTS / f"driver_qps-{'smoke-' if smoke else ''}{started}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    url, server = start_echo("harness.serving.testing.echo_openai", "--token-ids") if "perfdag" in args.clients \
        else ("", None)
    try:
        for rnd in range(args.rounds):
            doc["load_before_round"].append(os.getloadavg()[0])
            cells = [(sc, c) for sc in args.scenarios for c in args.clients]
            random.shuffle(cells)
            for sc, client in cells:
                r = run_child({"client": client, "scenario": sc, "queries": args.queries, "server_qps": args.server_qps,
                               "in_flight": args.in_flight, "url": url, "round": rnd})
                doc["runs"].append(r)
                print(f"round {rnd} {sc:8} {client:8} {r['us_per_query']:.1f} µs/query "
                      f"{r['queries_per_s'] or 0:,.0f} q/s load {r['load1']:.1f}", flush=True)
            out.write_text(json.dumps(doc, indent=1))
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    out.write_text(json.dumps(doc, indent=1))
    print(f"\n{table(doc)}\n\nraw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
