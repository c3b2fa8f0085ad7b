"""What a `bench` costs beyond its own duration: wall time of `python -m pipeline bench --duration S`
against a server that runs already, stage by stage.

    .venv/bin/python bench/bench_wall.py [--duration 60] [--rate 20] [--concurrency 8] [--shapes open,closed]
                                         [--out bench/results]

The server is perfdag's paced echo server (harness/serving/testing/echo_openai.py, --token-delay-ms 10:
each token flushed alone, 10 ms apart, as from a GPU server at moderate load), so what is measured is
perfdag's cost, not a model's. The tokenizer is one trained here (harness.model.tiny). For each load
shape (an open loop, `--request-rate R`: LoadGen Server; a closed one, `--concurrency N`: LoadGen
Offline, whose sample count is sized first with short runs: loadgen.offline_expected_qps=auto), in a
fresh artifacts root:
- first: the whole command, the dataset prepared too;
- again: the same measurement repeated (`--rerun-from RunLoadgen`): what a user pays per measurement.
Each row gives the command's wall time, the timed run's length (LoadGen's samples over its samples/s), each stage's time as its log line says ("built in"), and wall / --duration. Waits for a load
average under 1 before it starts (at most 10 minutes; the figure printed says what it found).
Raw results: --out/bench_wall-<utc>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from noise_example import wait_quiet  # noqa: E402 - after the path fix

from harness.model.tiny import train_tokenizer  # noqa: E402
from harness.serving.openai.client import probe  # noqa: E402
from harness.serving.ports import free_port  # noqa: E402

BUILT = re.compile(r"perfdag \S+ (\w+) [0-9a-f]{16}: built in ([0-9.]+)s")


def echo_server(delay_ms: float) -> tuple[str, subprocess.Popen]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port),
                             "--token-delay-ms", str(delay_ms)], cwd=REPO, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not probe(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the echo server did not start")
        time.sleep(0.1)
    return url, proc


def bench_once(root: Path, url: str, tok: Path, shape: list[str], duration: float, again: bool, osl: int) -> dict:
    cmd = [sys.executable, "-m", "pipeline", "bench", "--url", url, "--model", "echo", "--tokenizer", str(tok),
           "--dataset", "synthetic", "--isl", "128", "--osl", str(osl), *shape, "--duration", f"{duration:g}",
           *(["--rerun-from", "RunLoadgen"] if again else [])]
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)},
                         capture_output=True, text=True, timeout=duration * 10 + 600)
    wall = time.monotonic() - t0
    log = out.stdout + out.stderr
    if out.returncode not in (0, 10):
        raise SystemExit(f"{' '.join(cmd)} exited {out.returncode}:\n{log[-3000:]}")
    stages = {m.group(1): float(m.group(2)) for m in BUILT.finditer(log)}
    result = max(root.glob("RunLoadgen/*/result.json"), key=lambda p: p.stat().st_mtime)
    r = json.loads(result.read_text())
    sizing = (r.get("offline_expected_qps_auto") or {}).get("sizing_runs") or []
    return {"command": cmd[1:], "wall_s": round(wall, 2), "load1_before": load, "stages_s": stages,
            "loadgen_duration_s": timed_length(r),
            # LoadGen's equal issue (llama2-70b's sample_concatenate_permutation) rounds the queries up to whole
            # passes over the performance samples: the timed run's length follows this count, not --duration alone
            "queries": r.get("query_count"),
            "sizing_runs": len(sizing), "valid": r.get("valid"), "exit": out.returncode}


def timed_length(result: dict) -> float | None:
    """The timed run's length: the client's requests over its rate."""
    m = result.get("measured") or {}
    return round(m["requests"] / m["samples_per_s"], 2) if m.get("samples_per_s") else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=20.0, help="--request-rate of the open loop")
    ap.add_argument("--concurrency", type=int, default=8, help="--concurrency of the closed loop")
    ap.add_argument("--osl", type=int, default=64, help="tokens per answer")
    ap.add_argument("--delay-ms", type=float, default=10.0, help="the echo server's time per token")
    ap.add_argument("--patience", type=float, default=600, help="seconds to wait for a load average under 1")
    ap.add_argument("--shapes", default="open,closed", help="which load shapes to measure: open (--rate), closed "
                                                                "(--concurrency) or both, comma-separated")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # timed runs read compiled bytecode (bench/noop_speed.py)
    wanted = {x.strip() for x in args.shapes.split(",") if x.strip()}
    if not wanted or wanted - {"open", "closed"}:
        ap.error(f"--shapes {args.shapes!r}: give open, closed or open,closed")
    quiet = wait_quiet(patience_s=args.patience)
    shapes = {"open loop": ["--request-rate", f"{args.rate:g}"], "closed loop": ["--concurrency", str(args.concurrency)]}
    shapes = {name: flags for name, flags in shapes.items() if name.split()[0] in wanted}
    url, server = echo_server(args.delay_ms)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="perfdag_bench_wall_", dir=REPO.parent) as tmp:
            tok = Path(tmp) / "tokenizer"
            train_tokenizer(512, tok)
            for name, shape in shapes.items():
                root = Path(tmp) / name.replace(" ", "_")
                for again in (False, True):
                    row = bench_once(root, url, tok, shape, args.duration, again, args.osl)
                    rows.append({"shape": name, "run": "again" if again else "first", **row})
                    print(f"{name:11} {'again' if again else 'first':5}  wall {row['wall_s']:7.1f} s  "
                          f"= {row['wall_s'] / args.duration:4.2f} x --duration  LoadGen {row['loadgen_duration_s']} s "
                          f"({row['queries']} queries)  "
                          f"sizing runs {row['sizing_runs']}  stages {row['stages_s']}", flush=True)
    finally:
        server.terminate()
        server.wait(10)
    doc = {"bench": "bench_wall", "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "args": vars(args), "load1_at_start": quiet, "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench_wall-{datetime.now(timezone.utc).strftime('%Y-%m-%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"load average at start {quiet:.2f}; raw results: {path}")


if __name__ == "__main__":
    main()
