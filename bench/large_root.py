"""How perfdag's listing commands grow with the root: roots of 1,000, 10,000 and 100,000 items made from one real night.

    .venv/bin/python bench/large_root.py [--night DIR] [--overrides K=V,...] [--sizes 1000,10000,100000]
                                         [--repeat 3] [--work DIR] [--repo DIR]

The night is a real artifacts root holding one FullRun (`--night`; default: one is built first with FAST's settings,
`luigi --module pipeline FullRun --overrides <--overrides>`, minutes). Each size's root is a copy of the night (so
the no-op FullRun and `status` are cached for real) plus clones of its artifacts in the store's own layout until it
holds that many items (then each stage's index is written, as publishing would have, and the run records' index, as
the root's last `gc --delete` would have, where the checkout has them): every clone is one of the night's artifacts
under a varied key (a night number in its params, its upstream keys those of its own night's clones), dated back
over the past year, its files hard links of the night's (so each manifest's sizes and digests hold and perfdag's
integrity check passes; the stat each manifest records is the link's, taken after all links are made), with one run
record per cloned night; the night itself is only read (its files' ctime moves: they gain links); 1 in 100 items
(365 at most) is a kept observation of the night's FullRun key (what `history` and `compare` read and re-hash). Then
it times, as subprocesses (median of --repeat): the no-op FullRun, `status` (all cached, and with --missing's
overrides, which leave the measuring stages missing so status looks for the closest cached ones), `history KEY`,
`compare` of two observations, and `gc --dry-run`. Prints a table; raw times go to
bench/results/large_root-<utc>.json. Asserts nothing. `--repo` runs another checkout's code on the same roots
(before/after). Issue 51's goals at 100,000 items on a quiet 2-core host: status <= 1 s, history and compare <= 1 s,
gc --dry-run <= 5 s.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAST = "model.tiny.train_steps=20,quantize.calib_size=4,dataset.num_samples=16,loadgen.min_duration_ms=1000," \
       "loadgen.min_query_count=16"
SKIP = {"runs", "observations", "Nightly", ".gc-trash"}
# Writes every stage's index (harness/cache/index.py), as publishing into the root would have.
INDEX_ALL = ("import sys; from pathlib import Path; from harness.cache import index; r = Path(sys.argv[1]); "
             "[index.entries(r, d.name, write=True) for d in r.iterdir() if d.is_dir() and d.name[0].isupper()]")
# Writes runs/.index.jsonl (harness/cache/runindex.py) as the root's last `gc --delete` would have: its plan, no delete.
RUNS_INDEX = "import sys; from pathlib import Path; from harness.gc.collect import plan; plan(Path(sys.argv[1]), verify=True)"


def night_artifacts(night: Path) -> list[tuple[str, Path, dict]]:
    """(stage, directory, manifest) of every artifact the night published."""
    out = []
    for sdir in sorted(p for p in night.iterdir() if p.is_dir() and p.name not in SKIP and not p.name.startswith(".")):
        for d in sorted(sdir.iterdir()):
            if d.is_dir() and not d.name.startswith(".") and (d / "manifest.json").is_file():
                out.append((sdir.name, d, json.loads((d / "manifest.json").read_text())))
    return out


def clone_dir(src: Path, dest: Path, manifest: dict, pending: list) -> None:
    """`src`'s published files hard-linked into `dest` (links recreated); its manifest is written by `finish`."""
    dest.mkdir(parents=True)
    for rel in manifest.get("files") or {}:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        os.link(src / rel, dest / rel)
    for rel, target in (manifest.get("links") or {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, dest / rel)
    pending.append((dest, manifest))


def finish(pending: list) -> None:
    """Writes every manifest once all links are made: a link moves its inode's ctime, so each file's stat is
    recorded as it is now, as a publish would have (the content, digests included, is the night's)."""
    for dest, m in pending:
        files = {}
        for rel, f in (m.get("files") or {}).items():
            st = os.lstat(dest / rel)
            files[rel] = {**f, "ino": st.st_ino, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}
        (dest / "manifest.json").write_text(json.dumps({**m, "files": files}, indent=2, sort_keys=True))


def make_root(night: Path, dest: Path, items: int) -> dict:
    """A copy of `night` grown to `items` items (artifacts and kept observations); what it holds."""
    arts = night_artifacts(night)
    pending: list = []
    shutil.copytree(night / "runs", dest / "runs") if (night / "runs").is_dir() else dest.mkdir(parents=True)
    for stage, src, m in arts:
        clone_dir(src, dest / stage / src.name, m, pending)
    full = next(m for s, _, m in arts if s == "FullRun")
    now = datetime.now(timezone.utc)
    n_obs = min(365, items // 100)
    have, nights, obs = len(arts), 0, 0
    while obs < n_obs and have < items:  # the night's FullRun key measured on earlier nights
        when = now - timedelta(days=obs + 1, minutes=7)
        oid = f"{when:%Y%m%dT%H%M%S%f}Z-{obs}"
        m = {**full, "observation": oid, "run_id": oid, "finished_at": when.isoformat(timespec="milliseconds")}
        src = night / "FullRun" / full["key"][:16]
        clone_dir(src, dest / "observations" / "FullRun" / full["key"][:16] / oid, m, pending)
        have, obs = have + 1, obs + 1
    while have < items:  # earlier nights of other configurations: every artifact of the night, re-keyed
        nights += 1
        when = now - timedelta(days=(nights % 365) + 1, seconds=nights)
        run_id = f"{when:%Y%m%dT%H%M%S%f}Z-n{nights}"
        new_key = {m["key"]: hashlib.sha256(f"{m['key']}/{nights}".encode()).hexdigest() for _, _, m in arts}
        stages = {}
        for stage, src, m in arts:
            if have >= items:
                break
            k = new_key[m["key"]]
            ups = {n: new_key.get(u, u) for n, u in (m.get("upstream") or {}).items()} \
                if isinstance(m.get("upstream"), dict) else m.get("upstream")
            params = {**(m.get("params") or {}), "bench_night": nights}
            clone = {**m, "key": k, "upstream": ups, "params": params, "run_id": run_id,
                     "observation": run_id, "finished_at": when.isoformat(timespec="milliseconds")}
            clone.pop("observed_from", None)
            clone_dir(src, dest / stage / k[:16], clone, pending)
            stages[f"{stage}/{k[:16]}"] = {"stage": stage, "key": k, "status": "built", "wall_seconds": 1.0,
                                           "path": f"{stage}/{k[:16]}"}
            have += 1
        run = dest / "runs" / run_id
        run.mkdir(parents=True)
        stamp = when.isoformat()
        (run / "run.json").write_text(json.dumps({"run_id": run_id, "started_at": stamp, "updated_at": stamp,
                                                  "stages": stages}))
    finish(pending)
    return {"items": have, "nights": nights, "observations": obs, "night_artifacts": len(arts),
            "full_key": full["key"]}


def wall(argv: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 10, 11, 12):  # FullRun's exit code is its verdict
        sys.exit(f"{' '.join(argv[1:])}: exit {proc.returncode}\n{proc.stderr.decode()[-2000:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--night", help="an artifacts root holding one real FullRun (default: build one)")
    ap.add_argument("--overrides", default=FAST, help="the night's FullRun --overrides")
    ap.add_argument("--missing", default="loadgen.min_query_count=17",
                    help="overrides added for `status` with missing stages (default: the measuring stages)")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=str(REPO / "bench" / "work" / "large_root"))
    ap.add_argument("--repo", default=str(REPO), help="the checkout whose perfdag runs the commands")
    ap.add_argument("--keep", action="store_true", help="keep the roots (default: each removed after its size)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # timed runs read compiled bytecode (bench/noop_speed.py)
    work, repo = Path(args.work), Path(args.repo).resolve()
    work.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    fullrun = [py, "-m", "luigi", "--module", "pipeline", "FullRun", "--local-scheduler", "--overrides", args.overrides]
    night = Path(args.night) if args.night else work / "night"
    if not args.night and not (night / "FullRun").is_dir():
        print(f"building the night under {night} (minutes)...", flush=True)
        wall(fullrun, {**os.environ, "PERFDAG_ARTIFACTS": str(night)}, repo)
    results = []
    for size in [int(s) for s in args.sizes.split(",")]:
        root = work / f"root-{size}"
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        held = make_root(night, root, size)
        made_s = time.perf_counter() - t0
        env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
        index_s = None
        if (repo / "harness" / "cache" / "index.py").is_file():  # as a root perfdag published into has them
            t0 = time.perf_counter()
            subprocess.run([py, "-c", INDEX_ALL, str(root)], cwd=repo, env=env, check=True)
            if (repo / "harness" / "cache" / "runindex.py").is_file():
                subprocess.run([py, "-c", RUNS_INDEX, str(root)], cwd=repo, env=env, check=True)
            index_s = time.perf_counter() - t0
        key = held["full_key"]
        ids = sorted(p.name for p in (root / "observations" / "FullRun" / key[:16]).glob("*"))
        cmds = {
            "no-op FullRun": fullrun,
            "status, all cached": [py, "-m", "pipeline", "status", "--overrides", args.overrides],
            "status, stages missing": [py, "-m", "pipeline", "status", "--overrides",
                                       f"{args.overrides},{args.missing}"],
            "history": [py, "-m", "pipeline", "history", key[:16]],
            "compare": [py, "-m", "pipeline", "compare", f"{key[:16]}@{ids[0]}" if ids else key[:16], key[:16]],
            "gc --dry-run": [py, "-m", "pipeline", "gc", "--dry-run"],
        }
        wall(cmds["no-op FullRun"], env, repo)  # warm the page cache and any per-root memo
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(args.repeat):
            for name, argv in cmds.items():  # interleaved: a load change hits every command alike
                times[name].append(wall(argv, env, repo))
        missing = json.loads(subprocess.run(cmds["status, stages missing"] + ["--json"], cwd=repo, env=env,
                                            capture_output=True, text=True).stdout or "[]")
        results.append({"size": size, **held, "make_s": made_s, "index_s": index_s, "times_s": times,
                        "missing_stages": [r.get("stage") for r in (missing if isinstance(missing, list) else
                                                                    missing.get("stages", [])) if
                                           isinstance(r, dict) and r.get("status") == "missing"]})
        print(f"{size} items: {held['items']} ({held['nights']} cloned nights, {held['observations']} observations "
              f"of FullRun {key[:16]}), made in {made_s:.1f} s", flush=True)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    names = list(results[0]["times_s"]) if results else []
    print(f"\n{'command (median wall s)':<26}" + "".join(f"{r['size']:>12,}" for r in results))
    for name in names:
        print(f"{name:<26}" + "".join(f"{statistics.median(r['times_s'][name]):>12.3f}" for r in results))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    raw = {"commit": commit.strip(), "repo": str(repo), "cpus": os.cpu_count(), "load_at_end": os.getloadavg(),
           "night": str(night), "overrides": args.overrides, "missing": args.missing, "repeat": args.repeat,
           "results": results}
    path = out / f"large_root-{stamp}.json"
    path.write_text(json.dumps(raw, indent=1) + "\n")
    print(f"raw: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
