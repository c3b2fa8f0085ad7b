"""Client cost per response: perfdag against MLCommons' endpoints client (inference-endpoint), same server.

Both clients drive perfdag's echo OpenAI server (harness/serving/testing/echo_openai.py, burst and
paced at `--pace-ms` per token) with the same prompts (bench/harness_overhead.py's), `--tokens` tokens
per request, `--in-flight` requests outstanding and `--workers` client processes on each side:
* perfdag: harness_overhead's own run (LoadGen Offline, run_loadgen) with `--workers` frontends of
  `--conns` clients, max_in_flight = `--in-flight`;
* endpoints: `inference-endpoint benchmark offline` (or `online --load-pattern concurrency` with
  `--ep-load concurrency`), run by the Python 3.12+ interpreter that has it (`--endpoints-python`),
  `--workers W --max-connections <in-flight> --duration 0 --num-samples N`, its defaults otherwise
  (CPU pinning, event log, no warm-up); HF_HUB_OFFLINE=1, so it loads no tokenizer (no ISL/OSL work).
`--apis`: completions (token-id prompts to /v1/completions: endpoints' `--api-type openai_completions`
with `input_tokens` rows, perfdag's openai-http core); chat (the prompts as text to
/v1/chat/completions: endpoints' default `openai` type, perfdag's openai-chat core).

Method (harness_overhead's): a response is a message that carried tokens (streamed: each token
event, one token an event from the echo server; non-streamed: each request); counts are checked
exactly on both sides (endpoints: its result_summary.json and every sample.complete in events.jsonl);
* each run is a fresh process tree, its CPU read from RUSAGE_CHILDREN once reaped (endpoints runs
  under a child that is its subreaper: a process that outlives its parent, multiprocessing's
  resource tracker, is reaped and counted too; its report is read outside the measured tree);
* cost per response = (CPU of a `--large` run - CPU of a `--small` run) / (difference of their
  responses), so start-up, warm-up and teardown cancel;
* a round runs every (client, api, mode, server, size) once in a shuffled order; ratios perfdag /
  endpoints are formed within a round; min / median / max over `--rounds`; the 1-minute load average
  is recorded at start, before each round and after each run: at 1 or more the bench refuses to
  start unless `--allow-load` (a smoke run: the file is named so).

    python bench/vs_endpoints.py --endpoints-python /tmp/ep-venv/bin/python [--rounds 3]
        [--small 2000 --large 12000] [--modes stream,nostream] [--servers burst,paced] [--workers 2]
        [--apis completions,chat] [--ep-load offline|concurrency] [--allow-load]
    python bench/vs_endpoints.py --table bench/results/<file>.json   # a results file's table
Raw results: bench/results/vs_endpoints-<UTC time>.json (vs_endpoints-smoke-<time>.json at load >= 1).
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.harness_overhead import MAX_LOAD, RESULTS, prompts_for, run_child, start_echo_http  # noqa: E402
from bench.overhead_table import _spread, per_response_us  # noqa: E402

APIS = {"completions": ("http", "openai_completions"), "chat": ("chat", "openai")}  # perfdag protocol, --api-type
EP_RUN = "import sys; from inference_endpoint.main import run; sys.argv[0] = 'inference-endpoint'; sys.exit(run())"


def ep_command(spec: dict, dataset: str, report: str) -> list[str]:
    load = (["online", "--load-pattern", "concurrency", "--concurrency", str(spec["in_flight"])]
            if spec["ep_load"] == "concurrency" else ["offline"])
    return [spec["python"], "-c", EP_RUN, "benchmark", *load, "--endpoints", f"http://{spec['url']}",
            "--model", "echo", "--dataset", dataset, "--api-type", APIS[spec["api"]][1],
            "--streaming", "on" if spec["streaming"] else "off", "--max-output-tokens", str(spec["tokens"]),
            "--workers", str(spec["workers"]), "--max-connections", str(spec["in_flight"]),
            "--duration", "0", "--num-samples", str(spec["n"]), "--report-dir", report]


def ep_worker(spec: dict) -> dict:
    """The measured child: runs endpoints as its subreaper, then reaps every process left over."""
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(spec["log"], "wb") as log:
        p = subprocess.Popen(spec["cmd"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        rc = p.wait(900)
    except subprocess.TimeoutExpired:  # the run and every process left of it are stopped below
        rc = "timeout"
    orphans, deadline = 0, time.monotonic() + (30 if rc != "timeout" else 0)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        orphans += bool(pid) and pid != p.pid
        if not pid and time.monotonic() > deadline:  # still running: stopped by its pid, then reaped
            for child in psutil.Process().children():
                with contextlib.suppress(psutil.Error):
                    child.kill()
        if not pid:
            time.sleep(0.02)
    return {"rc": rc, "orphans_reaped": orphans}


def ep_run(spec: dict, tmp: Path) -> dict:
    d = Path(tempfile.mkdtemp(prefix="ep_", dir=tmp))
    from bench.bare_clients import chat_text
    rows = [{"input_tokens": p} if spec["api"] == "completions" else {"prompt": chat_text(p)}
            for p in prompts_for(spec["n"])]
    (d / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = ep_command(spec, str(d / "data.jsonl"), str(d / "report"))
    job = json.dumps({**spec, "cmd": cmd, "log": str(d / "log")})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, __file__, "--ep-worker", job], capture_output=True, text=True, timeout=1000)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = (d / "log").read_text(errors="replace") if (d / "log").exists() else ""
    if p.returncode != 0:
        raise RuntimeError(f"endpoints worker failed:\n{p.stderr[-3000:]}\n{log[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    summary = d / "report" / "performance" / "result_summary.json"
    if out["rc"] != 0 or not summary.exists():
        raise RuntimeError(f"inference-endpoint exited {out['rc']}: {' '.join(cmd)}\n{log[-3000:]}")
    s = json.loads(summary.read_text())
    ntok = []
    for line in (d / "report" / "events.jsonl").read_text().splitlines():
        if '"sample.complete"' in line:
            data = json.loads(line)["data"]
            text = None if not data else "".join(data[1]) if isinstance(data[1], list) else data[1]
            ntok.append(None if text is None else len(text.split()))  # " t<id>" a token
    n, tokens = spec["n"], spec["tokens"]
    counts = (s["n_samples_issued"], s["n_samples_completed"], s["n_samples_failed"], len(ntok))
    if counts != (n, n, 0, n) or set(ntok) != {tokens}:
        first = next((ln for ln in log.splitlines() if " failed: " in ln), "")
        raise RuntimeError(f"endpoints {spec['api']} {spec['mode']} {spec['server']} n={n}: issued "
                           f"{s['n_samples_issued']}, completed {s['n_samples_completed']}, failed "
                           f"{s['n_samples_failed']}, {len(ntok)} sample.complete events, tokens per request "
                           f"{sorted(set(ntok), key=str)} (want {n}, {n}, 0, {n}, [{tokens}])\n{first[-500:]}")
    shutil.rmtree(d, ignore_errors=True)
    requests = s["n_samples_completed"] - s["n_samples_failed"]
    return {**spec, "command": cmd, "requests": requests, "tokens_total": sum(ntok),
            "responses": sum(ntok) if spec["streaming"] else requests, "seconds": s["duration_ns"] / 1e9,
            "wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "orphans_reaped": out["orphans_reaped"], "version": s.get("version"), "load1": os.getloadavg()[0]}


def perfdag_run(spec: dict) -> dict:
    """harness_overhead's perfdag run (its child process, its CPU), counts checked."""
    r = run_child({**spec, "client": "perfdag", "protocol": APIS[spec["api"]][0], "conns": spec["conns"],
                   "frontends": spec["workers"], "warm": spec["conns"] * spec["workers"]})
    n, tokens = spec["n"], spec["tokens"]
    want = n * tokens if spec["streaming"] else n
    if r["requests"] != n or r["tokens"] != n * tokens or r["responses"] != want:
        raise RuntimeError(f"perfdag {spec['api']} {spec['mode']} {spec['server']} n={n}: requests {r['requests']},"
                           f" tokens {r['tokens']}, responses {r['responses']} (want {n}, {n * tokens}, {want})")
    return {**r, "client": "perfdag", "tokens": tokens, "tokens_total": r["tokens"], "loadgen_wall_s": r["wall_s"],
            "wall_s": r["elapsed_s"]}  # wall_s: the whole process's, as endpoints'; run_loadgen's own kept


def summarise(doc: dict) -> list[dict]:
    a, rows = doc["args"], []
    for api in a["apis"]:
        for mode in a["modes"]:
            for server in a["servers"]:
                cell = [r for r in doc["runs"] if (r["api"], r["mode"], r["server"]) == (api, mode, server)]
                per_round = []
                for rnd in sorted({r["round"] for r in cell}):
                    costs = {c: per_response_us([r for r in cell if r["round"] == rnd and r["client"] == c],
                                                a["small"], a["large"]) for c in ("perfdag", "endpoints")}
                    if all(costs.values()):
                        per_round.append({"round": rnd, "costs": costs, "ratio": costs["perfdag"] / costs["endpoints"]})
                if not per_round:
                    continue
                rate = {c: _spread([r["responses"] / r["seconds"] for r in cell
                                    if r["client"] == c and r["n"] == a["large"]]) for c in ("perfdag", "endpoints")}
                rows.append({"api": api, "mode": mode, "server": server, "rounds": len(per_round),
                             "per_round": per_round,
                             "us": {c: _spread([p["costs"][c] for p in per_round]) for c in ("perfdag", "endpoints")},
                             "ratio": _spread([p["ratio"] for p in per_round]), "large_responses_per_s": rate,
                             "load": [min(r["load1"] for r in cell), max(r["load1"] for r in cell)]})
    return rows


def _f(s: dict | None, fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})" if s else "-"


def table(doc: dict) -> str:
    a = doc["args"]
    lines = [f"{a['small']} and {a['large']} requests x {a['tokens']} tokens, {a['in_flight']} in flight, "
             f"{a['workers']} client processes a side (perfdag frontends x {a['conns']} clients; endpoints workers, "
             f"{a['ep_load']}); paced {a['pace_ms']} ms per token; {doc['machine']['cpus']} CPUs; {doc['started']}; "
             f"load average at start {doc['load_at_start']:.2f}, before rounds "
             f"{', '.join(f'{x:.2f}' for x in doc['load_before_round'])}"
             f"{'; SMOKE (load >= 1): not a result' if doc['smoke'] else ''}",
             "", "µs of client CPU per response (streamed: token events; non-streamed: requests), median (min-max) "
             "over rounds; ratio = perfdag / endpoints within a round; responses/s of the large runs", "",
             "| api | mode | server | perfdag µs/resp | endpoints µs/resp | ratio min / median / max | "
             "perfdag resp/s | endpoints resp/s | rounds | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc.get("summary") or summarise(doc):
        q = r["ratio"]
        lines.append(f"| {r['api']} | {'streaming' if r['mode'] == 'stream' else 'non-streaming'} | {r['server']} | "
                     f"{_f(r['us']['perfdag'])} | {_f(r['us']['endpoints'])} | {q['min']:.2f} / {q['median']:.2f} / "
                     f"{q['max']:.2f} | {_f(r['large_responses_per_s']['perfdag'], '{:.0f}')} | "
                     f"{_f(r['large_responses_per_s']['endpoints'], '{:.0f}')} | {r['rounds']} | "
                     f"{r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    return "\n".join(lines)


def rounds(args, urls, doc: dict, out: Path, tmp: Path) -> None:
    for rnd in range(args.rounds):
        doc["load_before_round"].append(os.getloadavg()[0])
        cells = [(c, api, m, srv, n) for c in ("perfdag", "endpoints") for api in args.apis for m in args.modes
                 for srv in args.servers for n in (args.small, args.large)]
        random.shuffle(cells)
        for client, api, mode, server, n in cells:
            spec = {"client": client, "api": api, "mode": mode, "server": server, "n": n, "round": rnd,
                    "url": urls["http"][server], "tokens": args.tokens, "in_flight": args.in_flight,
                    "workers": args.workers, "conns": args.conns, "streaming": mode == "stream",
                    "ep_load": args.ep_load, "python": args.endpoints_python}
            r = perfdag_run(spec) if client == "perfdag" else ep_run(spec, tmp)
            doc["runs"].append(r)
            print(f"round {rnd} {client:9} {api:11} {mode:8} {server:5} n={n:6} cpu {r['cpu_s']:6.2f}s wall "
                  f"{r['wall_s']:5.1f}s responses {r['responses']} ({r['responses'] / r['seconds']:.0f}/s) "
                  f"load {r['load1']:.1f}", flush=True)
            out.write_text(json.dumps(doc, indent=1))


def check_endpoints(python: str) -> str:
    try:
        code = ("import sys, importlib.metadata as m, inference_endpoint; "
                "print(sys.version_info >= (3, 12), sys.version.split()[0], m.version('inference-endpoint'))")
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except OSError as e:
        raise SystemExit(f"error: --endpoints-python {python!r} does not run: {e}")
    ok, version, ep = (p.stdout.split() + ["", "", ""])[:3]
    if p.returncode != 0 or ok != "True":
        raise SystemExit(f"error: --endpoints-python {python!r} must be Python 3.12+ with inference_endpoint "
                         f"installed (MLCommons endpoints); got {version or (p.stderr.splitlines() or ['?'])[-1]}")
    return f"inference-endpoint {ep} on Python {version}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ep-worker", help=argparse.SUPPRESS)
    ap.add_argument("--table", metavar="JSON", help="print the table of a results file and exit")
    ap.add_argument("--endpoints-python", default="", help="a Python 3.12+ interpreter with inference_endpoint")
    for flag, default in (("--rounds", 3), ("--small", 2000), ("--large", 12000), ("--tokens", 16)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--in-flight", type=int, default=128, help="requests outstanding, each side")
    ap.add_argument("--workers", type=int, default=2, help="client processes: perfdag frontends, endpoints workers")
    ap.add_argument("--conns", type=int, default=4, help="perfdag clients per frontend")
    ap.add_argument("--apis", default="completions", help="completions, chat")
    ap.add_argument("--modes", default="stream,nostream", help="stream, nostream")
    ap.add_argument("--servers", default="burst,paced", help="echo server modes: burst, paced")
    ap.add_argument("--pace-ms", type=float, default=1.0, help="paced server: ms per token")
    ap.add_argument("--ep-load", choices=["offline", "concurrency"], default="offline",
                    help="endpoints: benchmark offline, or online --load-pattern concurrency at --in-flight")
    ap.add_argument("--allow-load", action="store_true", help=f"run at a load average >= {MAX_LOAD:g} (a smoke run)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.ep_worker or args.table:
        print(json.dumps(ep_worker(json.loads(args.ep_worker))) if args.ep_worker
              else table(json.loads(Path(args.table).read_text())))
        return 0
    args.apis, args.modes, args.servers = args.apis.split(","), args.modes.split(","), args.servers.split(",")
    bad = ([x for x in args.apis if x not in APIS] + [x for x in args.modes if x not in ("stream", "nostream")]
           + [x for x in args.servers if x not in ("burst", "paced")])
    if bad or not args.endpoints_python or args.small >= args.large:
        print(f"error: --endpoints-python is required, --small < --large, --apis takes {', '.join(APIS)}, --modes "
              f"stream,nostream, --servers burst,paced (got {', '.join(bad) or '-'})", file=sys.stderr)
        return 2
    endpoints = check_endpoints(args.endpoints_python)
    load = os.getloadavg()[0]
    if load >= MAX_LOAD:
        print(f"{'WARNING' if args.allow_load else 'error'}: the load average is {load:.2f} (>= {MAX_LOAD:g}): " + (
              "a smoke run, not a result" if args.allow_load else
              "run on a quiet machine, or pass --allow-load for a smoke run"), file=sys.stderr, flush=True)
        if not args.allow_load:
            return 2
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    doc = {"started": started, "args": {k: v for k, v in vars(args).items() if k not in ("ep_worker", "table")},
           "endpoints": endpoints, "machine": machine, "load_at_start": load, "load_before_round": [],
           "smoke": load >= MAX_LOAD, "runs": []}
    out = Path(args.out) if args.out else RESULTS / f"vs_endpoints-{'smoke-' if doc['smoke'] else ''}{started}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perfdag_vs_ep_") as tmp:
        urls, stop = start_echo_http(Path(tmp), args.pace_ms)
        try:
            rounds(args, urls, doc, out, Path(tmp))
        finally:
            stop()
    doc["summary"] = summarise(doc)
    out.write_text(json.dumps(doc, indent=1))
    print(f"\n{endpoints}\n{table(doc)}\n\nraw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
