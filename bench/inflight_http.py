"""Offline over HTTP at an in-flight limit of 64, against a bare aiohttp loop at concurrency 64, on the
same real server (`transformers serve`, params/examples/openai-cpu.yaml), in the same run.

    python bench/inflight_http.py [--rounds 2] [--in-flight 64]

Each round: perfdag's RunLoadgen (LoadGen Offline, harness.max_in_flight=N) while `ss` counts the
established connections to the server every 100 ms, then the bare loop with the same prompts (the
dataset's, as text: transformers serve takes strings), the same max_tokens, streaming, N at once.
Writes bench/results/inflight_http-<time>.json and prints a table row per round.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PARAMS = "params/examples/openai-cpu.yaml"


def luigi(task: str, overrides: str, env: dict) -> None:
    cmd = [sys.executable, "-m", "luigi", "--module", "pipeline", task, "--local-scheduler", "--params-file", PARAMS,
           "--overrides", overrides, "--keep-servers"]
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True)


def count_connections(port: int, stop: threading.Event, peak: list[int]) -> None:
    while not stop.is_set():
        out = subprocess.run(["ss", "-Htn", "state", "established", f"( dport = :{port} )"], capture_output=True,
                             text=True).stdout
        peak[0] = max(peak[0], sum(1 for ln in out.splitlines() if ln.strip()))
        stop.wait(0.1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--samples", type=int, default=660,
                    help="bare loop requests (LoadGen Offline issues 60 qps x 10 s x 1.1 = 660 here)")
    ap.add_argument("--root", default="", help="artifacts root (default: a new one under /tmp)")
    args = ap.parse_args()
    import tempfile

    root = Path(args.root or tempfile.mkdtemp(prefix="perfdag-inflight-"))
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    n = args.in_flight
    base = f"harness.max_in_flight={n},harness.clients_per_frontend=4,loadgen.min_duration_ms=10000"
    try:
        luigi("PrepareDataset", base, env)
        luigi("LaunchServers", base, env)
    except subprocess.CalledProcessError as exc:
        subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO, env=env)
        sys.exit(f"setup failed: {exc.stderr[-2000:]}")
    from transformers import AutoTokenizer

    server = json.loads(next(root.glob("LaunchServers/*/servers.json")).read_text())["servers"][0]
    url, port = f"{server['host']}:{server['port']}", int(server["port"])
    samples = [json.loads(ln) for ln in next(root.glob("PrepareDataset/*/samples.jsonl")).read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(str(next(root.glob("PrepareModel/*/model"))))
    prompts = [tok.decode(s["input_ids"]) for s in samples]
    rows = []
    try:
        for r in range(args.rounds):
            stop, peak = threading.Event(), [0]
            t = threading.Thread(target=count_connections, args=(port, stop, peak), daemon=True)
            t.start()
            luigi("RunLoadgen", f"{base},loadgen.seed={r + 1}", env)  # a new seed: a new measurement
            stop.set(), t.join()
            res = json.loads(sorted(root.glob("RunLoadgen/*/result.json"), key=lambda p: p.stat().st_mtime)[-1].read_text())
            bare = bare_aiohttp(url, prompts, n, args.samples)
            rows.append({"round": r, "perfdag_samples_per_s": res["samples_per_s"], "perfdag_peak_connections": peak[0],
                         "perfdag_peak_in_flight": (res.get("harness") or {}).get("peak_in_flight"), "bare_samples_per_s": bare["samples_per_s"],
                         "bare_peak_connections": bare["peak_connections"],
                         "ratio": round(res["samples_per_s"] / bare["samples_per_s"], 3)})
            print(json.dumps(rows[-1]))
    finally:
        subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO, env=env,
                       capture_output=True)
    out = REPO / "bench" / "results" / f"inflight_http-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"in_flight": n, "server": "transformers serve (openai-cpu.yaml)", "rounds": rows}, indent=2))
    print(f"wrote {out}")
    return 0


def bare_aiohttp(url: str, prompts: list[str], in_flight: int, total: int) -> dict:
    """`total` streamed completions of the prompts (cycled), `in_flight` at once, one connection each."""
    import asyncio

    import aiohttp

    port = int(url.rsplit(":", 1)[1])
    stop, peak = threading.Event(), [0]
    t = threading.Thread(target=count_connections, args=(port, stop, peak), daemon=True)

    async def run() -> float:
        conn = aiohttp.TCPConnector(limit=in_flight, limit_per_host=in_flight)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as s:
            it = iter(range(total))

            async def worker():
                for k in it:
                    # Offline does not stream (perfdag's SUT neither): one JSON response per request.
                    body = {"prompt": prompts[k % len(prompts)], "max_tokens": 32, "temperature": 0, "stream": False}
                    async with s.post(f"http://{url}/v1/completions", json=body) as r:
                        r.raise_for_status()
                        json.loads(await r.read())
            t0 = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(in_flight)))
            return time.monotonic() - t0

    t.start()
    secs = asyncio.run(run())
    stop.set(), t.join()
    return {"samples_per_s": round(total / secs, 2), "peak_connections": peak[0]}


if __name__ == "__main__":
    sys.exit(main())
