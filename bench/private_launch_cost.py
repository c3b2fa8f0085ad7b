"""What it costs that a server loads exactly the bytes that were verified (harness/serving/private.py),
for an engine of each size.

    .venv/bin/python bench/private_launch_cost.py [--gib 1,10] [--dir DIR] [--repeat 3] [--out bench/results]

For each size, a root under DIR (default: a temp dir) gets a torch-backend repository (model.py,
config.pbtxt) and an engine whose weights.safetensors has that size (float32 tensors of random bytes,
bench/verify_cost.py's writer), published as perfdag publishes them. Then, with perfdag's own
functions, each step a launch and its measurements add, timed with the weights' pages dropped from
the cache (posix_fadvise DONTNEED, no root needed; "cold") and read just before ("warm"):
- check: the launch's re-hash of what its servers load (LaunchServers.served_problems; before this
  change too), the baseline;
- plan: the pins of the launch (inode, ctime and digest of every engine file), right after the check in
  the same process (each file read once per identity: the check's digests are reused);
- wrapper: `python -m harness.serving.private`'s work, started as a launch starts it (a process: Python's
  start, the repository and Triton's Python backend copied and verified, the engine pinned), with a
  stand-in for the server (`true`);
- after ready: every pinned file read again through the server's /proc link (harness/serving/pinned.py, fresh);
- measurement before / after: a measuring stage's checks (before: once per identity, so in a new
  process a full read; after: always a full read);
- reuse check: a cached run's `usable` (inodes and times only: a stat per file).
Prints the median of --repeat runs per step and a total for a launch and one measurement in a new
process (plan + wrapper + after ready + before + after); writes every run's figures to
--out/private_launch_cost-<utc>.json. Weights are not copied: they are read where they lie.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from verify_cost import drop_cache, read_all, write_safetensors  # noqa: E402 - after the path fix

from harness.backends.torch.repo import MODEL_PY  # noqa: E402
from harness.cache import integrity  # noqa: E402
from harness.cache.store import ArtifactStore  # noqa: E402
from harness.serving import pinned, private  # noqa: E402
from harness.serving.processes import TOKEN_ENV  # noqa: E402
from harness.serving.triton.server import backend_copies  # noqa: E402

STEPS = ("check", "plan", "wrapper", "after ready", "measurement before", "measurement after", "reuse check")
READS = {"check", "after ready", "measurement before", "measurement after"}  # read the weights: cold and warm


def publish(root: Path, gib: float) -> tuple[dict, Path, Path]:
    """A root with a torch repository and an engine of `gib` GiB, published; (verified manifests by
    directory, the repository's directory, the weights file)."""
    store = ArtifactStore(root)

    def repo(d: Path) -> dict:
        (d / "server_0" / "tensorrt_llm" / "1").mkdir(parents=True)
        (d / "server_0" / "tensorrt_llm" / "config.pbtxt").write_text('name: "tensorrt_llm"\nbackend: "python"\n')
        (d / "server_0" / "tensorrt_llm" / "1" / "model.py").write_text(MODEL_PY.read_text())
        (d / "server_0" / "tensorrt_llm" / "1" / private.BLOCKER).write_bytes(b"")
        return {}

    def engine(d: Path) -> dict:
        (d / "engine").mkdir()
        (d / "engine" / "config.json").write_text('{"backend": "torch"}')
        write_safetensors(d / "engine" / "weights.safetensors", int(gib * (1 << 30)))
        return {}

    _, rm = store.ensure("FillTritonRepo", "r" * 64, repo, {})
    _, em = store.ensure("BuildEngine", "e" * 64, engine, {})
    repo_dir, engine_dir = store.path("FillTritonRepo", "r" * 64), store.path("BuildEngine", "e" * 64)
    return {str(repo_dir): rm, str(engine_dir): em}, repo_dir, engine_dir / "engine" / "weights.safetensors"


def once(root: Path, verified: dict, repo_dir: Path, weights: Path, cold: bool) -> dict:
    """Every step once, each from the cache state `cold` says (a fresh process's memo for those that read)."""
    out = {}

    def timed(step: str, fn):
        if step in READS:
            drop_cache(weights) if cold else read_all(weights)
        t0 = time.perf_counter()
        value = fn()
        out[step] = round(time.perf_counter() - t0, 4)
        return value

    integrity._DIGESTS.clear()  # a new process: nothing read yet
    engine_dir = weights.parent.parent
    problems = timed("check", lambda: integrity.problems(engine_dir, verified[str(engine_dir)]["files"], full=True))
    assert problems == [], problems
    plan = timed("plan", lambda: private.Plan(
        root=str(root), copies=(*private.copies_of(repo_dir, verified[str(repo_dir)], root, "server_0"),
                                *backend_copies()),
        pins=pinned.pins_for(root, verified, copied=(str(repo_dir),)), empty=(f"backend/python/{private.BLOCKER}",)))
    token = secrets.token_hex(16)
    env = {**os.environ, TOKEN_ENV: token, private.PLAN_ENV: plan.to_json()}
    where = private.private_base() / token
    try:
        done = timed("wrapper", lambda: subprocess.run(private.wrap(["true"]), cwd=root, env=env))
        assert done.returncode == 0
        # the stand-in exited, so its /proc link is gone: the launch's check goes through the paths the pins name
        assert timed("after ready", lambda: pinned.changes(plan.pins, None, mode="fresh")) == []
        integrity._DIGESTS.clear()  # the measurement in a new process (a later run on live servers)
        assert timed("measurement before", lambda: pinned.changes(plan.pins, mode="memo")) == []
        assert timed("measurement after", lambda: pinned.changes(plan.pins, mode="fresh")) == []
        assert timed("reuse check", lambda: pinned.changes(plan.pins, mode="identity")) == []
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", default="1,10", help="comma-separated engine sizes in GiB (default 1,10)")
    ap.add_argument("--dir", default=None, help="where to write the root (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    rows = []
    for gib in (float(g) for g in args.gib.split(",")):
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="perfdag_private_") as d:
            root = Path(d) / "artifacts"
            t0 = time.perf_counter()
            verified, repo_dir, weights = publish(root, gib)
            row = {"gib": gib, "bytes": weights.stat().st_size, "publish_s": round(time.perf_counter() - t0, 1),
                   "runs": {"cold": [], "warm": []}}
            for _ in range(args.repeat):
                for state in ("cold", "warm"):
                    row["runs"][state].append(once(root, verified, repo_dir, weights, state == "cold"))
            row["median"] = {state: {s: statistics.median(r[s] for r in runs) for s in STEPS}
                             for state, runs in row["runs"].items()}
            rows.append(row)
            print(json.dumps({"gib": gib, "median": row["median"]}), flush=True)
    doc = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
           "cpus": len(os.sched_getaffinity(0)), "python": platform.python_version(), "loadavg": os.getloadavg(),
           "dir": args.dir or tempfile.gettempdir(), "repeat": args.repeat, "rows": rows}
    out = Path(args.out) / f"private_launch_cost-{datetime.now(timezone.utc):%Y-%m-%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    new = ("plan", "wrapper", "after ready", "measurement before", "measurement after")
    print(f"{'size':>7} " + " ".join(f"{s:>20}" for s in STEPS) + f" {'new, launch + 1 measurement':>28}")
    for r in rows:
        m = r["median"]
        cells = [f"{m['cold'][s]:.2f} / {m['warm'][s]:.2f}" for s in STEPS]
        total = f"{sum(m['cold'][s] for s in new):.2f} / {sum(m['warm'][s] for s in new):.2f}"
        print(f"{r['gib']:>5g} G " + " ".join(f"{c:>20}" for c in cells) + f" {total:>28}")
    print("seconds, median, cold / warm page cache")
    print(f"raw: {out}")


if __name__ == "__main__":
    main()
