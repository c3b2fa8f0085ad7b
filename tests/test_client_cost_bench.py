"""bench/harness_overhead.py's method: bare loops on both event loops, both server modes in the
table, ratios formed within a round, no figure from noise, and no run on a loaded machine unless
asked (a smoke run, named so)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.bare_clients import EVENT_LOOPS, LOOPS, _run
from bench.overhead_table import per_response_us, summarise, table

REPO = Path(__file__).resolve().parent.parent


def _runs(rnd: int, client: str, server: str, small_cpu: float, large_cpu: float, proto="grpc") -> list[dict]:
    return [{"round": rnd, "client": client, "protocol": proto, "mode": "stream", "server": server, "n": n,
             "responses": n * 16, "cpu_s": cpu, "load1": 0.5} for n, cpu in ((400, small_cpu), (2400, large_cpu))]


def _doc(runs: list[dict], rounds: int) -> dict:
    return {"args": {"protocols": ["grpc"], "modes": ["stream"], "servers": ["burst", "paced"], "rounds": rounds,
                     "small": 400, "large": 2400, "tokens": 16, "in_flight": 64, "conns": 4, "pace_ms": 1.0},
            "machine": {"cpus": 2}, "started": "t", "load_at_start": 0.3, "load_before_round": [0.3, 0.4],
            "runs": runs}


def test_every_event_loop_client_runs_on_uvloop_and_on_asyncio():
    """Each asyncio bare loop has a uvloop and an asyncio label; tritonclient's threaded streams stay."""
    for proto, names in (("grpc", ["tritonclient-aio", "grpc-aio-raw"]), ("http", ["aiohttp", "httpx"]), ("generate", ["aiohttp"])):
        for name in names:
            assert {f"{name}-{loop}" for loop in EVENT_LOOPS} <= set(LOOPS[proto])
    assert "tritonclient-stream" in LOOPS["grpc"]
    import asyncio

    import uvloop

    async def which():
        return type(asyncio.get_running_loop())
    assert _run(which, "uvloop") is uvloop.Loop
    assert _run(which, "asyncio") is not uvloop.Loop


def test_ratios_are_formed_within_a_round_per_server_mode_and_noise_gives_no_figure():
    """perfdag / the round's best bare loop, for burst and paced apart; a large run that cost no more
    than the small one is no figure (never a negative cost that would win 'best')."""
    runs = (_runs(0, "perfdag", "burst", 1.0, 2.0) + _runs(0, "aiohttp-uvloop", "burst", 1.0, 3.0)
            + _runs(0, "aiohttp-asyncio", "burst", 1.0, 0.9)  # noise: cheaper large run
            + _runs(1, "perfdag", "burst", 1.0, 5.0) + _runs(1, "aiohttp-uvloop", "burst", 1.0, 3.0)
            + _runs(0, "perfdag", "paced", 1.0, 3.0) + _runs(0, "aiohttp-uvloop", "paced", 1.0, 2.0))
    assert per_response_us(_runs(0, "x", "burst", 1.0, 0.9), 400, 2400) is None
    rows = {r["server"]: r for r in summarise(_doc(runs, 2))}
    burst = rows["burst"]
    assert [p["best_bare"] for p in burst["per_round"]] == ["aiohttp-uvloop", "aiohttp-uvloop"]
    assert [round(p["ratio"], 3) for p in burst["per_round"]] == [0.5, 2.0]
    assert burst["ratio"]["median"] == 1.25 and burst["us"]["aiohttp-asyncio"] is None
    assert rows["paced"]["ratio"]["median"] == 2.0 and rows["paced"]["rounds"] == 1
    text = table(_doc(runs, 2))
    assert "| grpc | streaming | burst |" in text and "| grpc | streaming | paced |" in text
    assert "at start 0.30, before rounds 0.30, 0.40" in text


def test_the_bench_refuses_to_start_on_a_loaded_machine_unless_asked():
    """At a load average of 1 or more it exits 2 naming the load and --allow-load, having started
    nothing; bad server modes, protocols or chunk sizes are refused the same way."""
    bench = [sys.executable, str(REPO / "bench" / "harness_overhead.py"), "--rounds", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run(bench + ["--servers", "burst,slow"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "--servers takes burst, paced" in p.stderr and "slow" in p.stderr
    p = subprocess.run(bench + ["--protocols", "grpc,smtp"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "smtp" in p.stderr
    p = subprocess.run(bench + ["--tokens-per-chunk", "3"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "--tokens-per-chunk must divide --tokens (16)" in p.stderr
    p = subprocess.run(bench + ["--tokens-per-chunk", "4", "--protocols", "http,chat"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert p.returncode == 2 and "chat stream sends one token per event" in p.stderr
    if os.getloadavg()[0] >= 1:
        p = subprocess.run(bench, capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 2 and "load average" in p.stderr and "--allow-load" in p.stderr
        assert "round 0" not in p.stdout


def test_old_results_files_still_print_a_table():
    """Files written before server modes and load records existed read alike."""
    old = REPO / "bench" / "results" / "harness_overhead-2026-11-25T022314Z.json"
    p = subprocess.run([sys.executable, str(REPO / "bench" / "harness_overhead.py"), "--table", str(old)],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0 and "| grpc | streaming | burst |" in p.stdout and "at start ?" in p.stdout
