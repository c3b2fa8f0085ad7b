"""`python -m pipeline gc` on a fabricated store: manifests and run records with chosen dates, no builds."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from filelock import FileLock

import harness.serving.launcher
from harness.gc import collect as gc
from pipeline.cli import main

REPO = Path(__file__).resolve().parent.parent
NOW = datetime.now(timezone.utc)
OLD = (NOW - timedelta(days=40)).isoformat()
MONTH = (NOW - timedelta(days=30)).isoformat()
RECENT = (NOW - timedelta(days=2)).isoformat()


def key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def artifact(root: Path, stage: str, name: str, upstream: dict[str, str] | None = None, *,
             finished_at: str = OLD, size: int = 1000, servers: list[dict] | None = None) -> str:
    """A published artifact <root>/<stage>/<key16>/ with a manifest and `size` bytes of payload."""
    k = key(name)
    d = root / stage / k[:16]
    d.mkdir(parents=True)
    m = {"key": k, "stage": stage, "upstream": upstream or {}, "run_id": f"run-of-{name}", "finished_at": finished_at}
    if servers is not None:
        m["servers"] = servers
        (d / "servers.json").write_text(json.dumps({"servers": servers}))
    (d / "manifest.json").write_text(json.dumps(m))
    (d / "payload.bin").write_bytes(b"x" * size)
    return k


def run_record(root: Path, run_id: str, updated_at: str, *stages: tuple[str, str]) -> None:
    d = root / "runs" / run_id
    d.mkdir(parents=True)
    doc = {"run_id": run_id, "started_at": updated_at, "updated_at": updated_at,
           "stages": {f"{s}/{k[:16]}": {"stage": s, "key": k, "status": "reused", "wall_seconds": None, "path": None}
                      for s, k in stages}}
    (d / "run.json").write_text(json.dumps(doc))


def ids(entries) -> set[str]:
    return {e.id for e in entries}


def aid(stage: str, k: str) -> str:
    return f"{stage}/{k[:16]}"


@pytest.fixture
def no_servers(monkeypatch):
    monkeypatch.setattr(harness.serving.launcher, "servers_live", lambda records, timeout_s=2.0: False)


@pytest.fixture
def store(tmp_path, no_servers):
    """One old chain whose FullRun a recent run reused; stale siblings; a Sweep; Nightly history."""
    root = tmp_path / "artifacts"
    s = {}
    s["model"] = artifact(root, "PrepareModel", "model")
    s["quant"] = artifact(root, "Quantize", "quant", {"model": s["model"]})
    s["engine"] = artifact(root, "BuildEngine", "engine", {"checkpoint": s["quant"]}, size=5000)
    s["repo"] = artifact(root, "FillTritonRepo", "repo", {"engine": s["engine"]})
    s["servers"] = artifact(root, "LaunchServers", "servers", {"repo": s["repo"]},
                            servers=[{"pid": 999999, "create_time": 1.0, "host": "127.0.0.1", "grpc_port": 1,
                                      "models": ["tensorrt_llm"]}])
    s["dataset"] = artifact(root, "PrepareDataset", "dataset", {"model": s["model"]})
    s["loadgen"] = artifact(root, "RunLoadgen", "loadgen", {"servers": s["servers"], "dataset": s["dataset"]})
    s["acc"] = artifact(root, "CheckAccuracy", "acc", {"servers": s["servers"], "dataset": s["dataset"]})
    s["full"] = artifact(root, "FullRun", "full", {"performance": s["loadgen"], "accuracy": s["acc"]})
    # A recent run that only touched the cached FullRun: luigi never re-touches its upstream.
    run_record(root, "recent-run", RECENT, ("FullRun", s["full"]))
    # Stale: an engine of another build config, last used a month ago, sharing the kept Quantize.
    s["old_engine"] = artifact(root, "BuildEngine", "old_engine", {"checkpoint": s["quant"]}, size=7000)
    run_record(root, "month-old-run", MONTH, ("BuildEngine", s["old_engine"]), ("Quantize", s["quant"]))
    # Never referenced by any run.
    s["orphan"] = artifact(root, "Quantize", "orphan", {"model": s["model"]}, size=3000)
    # Sweeps follow the same rules: one referenced recently (with its FullRun point), one not.
    s["sweep"] = artifact(root, "Sweep", "sweep", {"point000": s["full"]})
    s["old_sweep"] = artifact(root, "Sweep", "old_sweep", {"point000": s["full"]}, size=2000)
    run_record(root, "sweep-run", RECENT, ("Sweep", s["sweep"]))
    run_record(root, "old-sweep-run", OLD, ("Sweep", s["old_sweep"]))
    night = root / "Nightly" / "batch" / "2026-01-01"
    night.mkdir(parents=True)
    (night / "nightly.json").write_text("{}")
    return root, s


def test_keeps_referenced_and_their_upstream_closure_deletes_the_rest(store):
    root, s = store
    p = gc.plan(root, keep_days=14)
    kept = ids(p.kept)
    chain = [("PrepareModel", "model"), ("Quantize", "quant"), ("BuildEngine", "engine"), ("FillTritonRepo", "repo"),
             ("LaunchServers", "servers"), ("PrepareDataset", "dataset"), ("RunLoadgen", "loadgen"),
             ("CheckAccuracy", "acc"), ("FullRun", "full"), ("Sweep", "sweep")]
    assert kept == {aid(st, s[n]) for st, n in chain}
    assert ids(p.goes) == {aid("BuildEngine", s["old_engine"]), aid("Quantize", s["orphan"]), aid("Sweep", s["old_sweep"])}
    why = {e.id: e for e in p.entries}
    assert why[aid("FullRun", s["full"])].why.startswith("referenced by run recent-run")
    assert why[aid("BuildEngine", s["engine"])].why.startswith("upstream of kept")
    old = why[aid("BuildEngine", s["old_engine"])]
    assert old.last_run == "month-old-run" and old.last_referenced[:10] == MONTH[:10] and old.size_bytes >= 7000
    assert why[aid("Quantize", s["orphan"])].last_referenced is None
    # A longer window keeps the month-old engine too.
    assert aid("BuildEngine", s["old_engine"]) in ids(gc.plan(root, keep_days=31).kept)


def test_dry_run_deletes_nothing_and_prints_the_total(store, capsys):
    root, s = store
    before = sorted(str(p) for p in root.rglob("*"))
    p = gc.gc(root, keep_days=14, delete=False)
    assert sorted(str(p) for p in root.rglob("*")) == before
    out = gc.render(p, deleted=False)
    total = sum(e.size_bytes for e in p.goes)
    assert total >= 7000 + 3000 + 2000
    assert "would delete (dry run; --delete deletes):" in out
    assert f"total: {gc.human_size(total)} in 3 item(s) would be freed" in out
    line = next(ln for ln in out.splitlines() if aid("BuildEngine", s["old_engine"]) in ln)
    assert f"last ref {MONTH[:10]}" in line and "month-old-run" in line
    assert "last ref never" in next(ln for ln in out.splitlines() if aid("Quantize", s["orphan"]) in ln)


def test_delete_removes_what_goes_and_keeps_history(store):
    root, s = store
    p = gc.gc(root, keep_days=14, delete=True)
    assert {e.status for e in p.goes} == {"deleted"}
    assert not (root / "BuildEngine" / s["old_engine"][:16]).exists()
    assert not (root / "Quantize" / s["orphan"][:16]).exists()
    assert not (root / "Sweep" / s["old_sweep"][:16]).exists()
    for e in p.kept:
        assert (Path(e.path) / "manifest.json").is_file()
    assert (root / "Nightly" / "batch" / "2026-01-01" / "nightly.json").is_file()
    assert len(list((root / "runs").glob("*/run.json"))) == 4  # run history stays, old runs included
    assert not (root / gc.TRASH).exists()
    again = gc.plan(root, keep_days=14)
    assert not again.goes and ids(again.kept) == ids(p.kept)
    assert "freed" in gc.render(p, deleted=True)


def test_in_use_survives_with_its_upstream(tmp_path, monkeypatch):
    root = tmp_path / "artifacts"
    model = artifact(root, "PrepareModel", "m")
    quant = artifact(root, "Quantize", "q", {"model": model})
    building = artifact(root, "BuildEngine", "being-rebuilt", {"checkpoint": quant})
    repo = artifact(root, "FillTritonRepo", "repo", {"engine": artifact(root, "BuildEngine", "served")})
    live = artifact(root, "LaunchServers", "live", {"repo": repo},
                    servers=[{"external": True, "host": "10.0.0.7", "grpc_port": 8001, "models": ["m"]}])
    dead = artifact(root, "LaunchServers", "dead", {"repo": artifact(root, "FillTritonRepo", "dead-repo")},
                    servers=[{"external": True, "host": "10.0.0.8", "grpc_port": 8001, "models": ["m"]}])
    # A server process perfdag started (spawn gives it its launch token) that runs but is not ready (yet): in use.
    from harness.serving.processes import root_id, spawn

    # launched for this root (its identity beside the token), as LaunchServers launches
    started_server = spawn([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "server.log",
                           root=root_id(root))
    proc = started_server.proc
    try:
        import psutil
        starting = artifact(root, "LaunchServers", "starting", servers=[
            {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(), "host": "127.0.0.1",
             "grpc_port": 1, "models": ["m"], "token": started_server.token}])
        monkeypatch.setattr(harness.serving.launcher, "servers_live",
                            lambda records, timeout_s=2.0: all(r.get("host") == "10.0.0.7" for r in records))
        # A run whose process still runs counts whatever its age: this test process, started before "now".
        started = datetime.fromtimestamp(psutil.Process().create_time() + 0.5, timezone.utc)
        running_run = f"{started:%Y%m%dT%H%M%S%fZ}-{os.getpid()}"
        in_running_run = artifact(root, "PrepareDataset", "ds")
        run_record(root, running_run, OLD, ("PrepareDataset", in_running_run))
        # Builds in progress (lock held) and a dead builder's leftover (lock free).
        locks = root / "BuildEngine" / ".locks"
        locks.mkdir()
        (root / "BuildEngine" / f".tmp-{building[:16]}-abc").mkdir()
        fresh = key("fresh-build")
        (root / "BuildEngine" / f".tmp-{fresh[:16]}-def").mkdir()
        dead_tmp = key("crashed")
        (root / "BuildEngine" / f".tmp-{dead_tmp[:16]}-ghi").mkdir()
        (root / "BuildEngine" / f".tmp-{dead_tmp[:16]}-ghi" / "half.bin").write_bytes(b"x" * 10)
        held = [FileLock(str(locks / f"{k[:16]}.lock")) for k in (building, fresh)]
        for lk in held:
            lk.acquire()
        try:
            p = gc.plan(root, keep_days=14)
            kept = ids(p.kept)
            assert {aid("BuildEngine", building), aid("Quantize", quant), aid("PrepareModel", model),
                    f"BuildEngine/.tmp-{building[:16]}-abc", f"BuildEngine/.tmp-{fresh[:16]}-def",
                    aid("LaunchServers", live), aid("FillTritonRepo", repo), aid("BuildEngine", key("served")),
                    aid("LaunchServers", starting), aid("PrepareDataset", in_running_run)} == kept
            assert ids(p.goes) == {aid("LaunchServers", dead), aid("FillTritonRepo", key("dead-repo")),
                                   f"BuildEngine/.tmp-{dead_tmp[:16]}-ghi"}
            why = {e.id: e.why for e in p.entries}
            assert why[aid("BuildEngine", building)].startswith("lock held")
            assert why[aid("LaunchServers", live)].startswith("live servers")
            assert why[aid("PrepareDataset", in_running_run)].endswith("still running")
            gc.execute(p)
            assert {e.status for e in p.goes} == {"deleted"}
            assert (root / "BuildEngine" / f".tmp-{building[:16]}-abc").is_dir()
            assert not (root / "BuildEngine" / f".tmp-{dead_tmp[:16]}-ghi").exists()
            for e in p.kept:
                assert Path(e.path).is_dir()
        finally:
            for lk in held:
                lk.release()
    finally:
        proc.kill()
        proc.wait()


def test_delete_skips_a_key_whose_build_starts_after_the_plan(store):
    root, s = store
    p = gc.plan(root, keep_days=14)
    target = aid("BuildEngine", s["old_engine"])
    lock = FileLock(str(root / "BuildEngine" / ".locks" / f"{s['old_engine'][:16]}.lock"))
    (root / "BuildEngine" / ".locks").mkdir(exist_ok=True)
    run_record(root, "new-run", NOW.isoformat(), ("Quantize", s["orphan"]))  # a run reused it meanwhile
    with lock:
        gc.execute(p)
    status = {e.id: e.status for e in p.goes}
    assert status[target].startswith("skipped: lock held")
    assert status[aid("Quantize", s["orphan"])].startswith("skipped: a run referenced it")
    assert status[aid("Sweep", s["old_sweep"])] == "deleted"
    assert (root / "BuildEngine" / s["old_engine"][:16] / "manifest.json").is_file()
    assert (root / "Quantize" / s["orphan"][:16] / "manifest.json").is_file()


def test_dry_run_and_delete_are_exclusive():
    with pytest.raises(SystemExit) as e:
        main(["gc", "--dry-run", "--delete"])
    assert e.value.code == 2


def test_cli(store):
    root, s = store
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "pipeline", "gc", *args], check=False, cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    out = cli()  # dry run by default
    assert "would delete (dry run; --delete deletes):" in out and "in 3 item(s) would be freed" in out
    assert aid("BuildEngine", s["old_engine"]) in out
    assert (root / "BuildEngine" / s["old_engine"][:16]).is_dir()
    doc = json.loads(cli("--delete", "--json", "--keep-days", "14"))
    assert doc["mode"] == "delete" and doc["total"]["count"] == 3 and doc["freed"]["count"] == 3
    assert {e["id"]: e["status"] for e in doc["delete"]} == {
        aid("BuildEngine", s["old_engine"]): "deleted", aid("Quantize", s["orphan"]): "deleted",
        aid("Sweep", s["old_sweep"]): "deleted"}
    assert doc["freed"]["bytes"] == doc["total"]["bytes"] == sum(e["size_bytes"] for e in doc["delete"])
    assert doc["runs"]["count"] == 4 and doc["nightly"]["nights"] == 1
    assert not (root / "BuildEngine" / s["old_engine"][:16]).exists()
    assert (root / "BuildEngine" / s["engine"][:16] / "manifest.json").is_file()
    assert (root / "Nightly" / "batch" / "2026-01-01" / "nightly.json").is_file()


def test_main_dry_run_by_default(store, monkeypatch, capsys):
    root, s = store
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    assert main(["gc", "--keep-days", "14", "-v"]) == 0
    out = capsys.readouterr().out
    assert "in 3 item(s) would be freed" in out and "upstream of kept" in out
    assert (root / "Sweep" / s["old_sweep"][:16]).is_dir()


def test_failed_stage_files_age_out_like_everything_else(store):
    root, s = store
    old = root / "runs" / "month-old-run" / "failed" / "RunLoadgen-0123456789abcdef"
    new = root / "runs" / "recent-run" / "failed" / "RunLoadgen-fedcba9876543210"
    for d in (old, new):
        d.mkdir(parents=True)
        (d / "harness.log").write_text("x" * 1000)
    month_ago = datetime.fromisoformat(MONTH).timestamp()
    os.utime(old, (month_ago, month_ago))
    p = gc.plan(root, keep_days=14)
    failed = [e for e in p.goes if e.kind == "failed"]
    assert [e.id for e in failed] == ["runs/month-old-run/failed/RunLoadgen-0123456789abcdef"]
    gc.execute(p)
    assert not old.exists() and (new / "harness.log").is_file()
    assert (root / "runs" / "month-old-run" / "run.json").is_file()  # the run record itself stays


def test_dry_run_into_a_closed_pipe_prints_no_traceback(store):
    """`gc --dry-run | head`: the reader is gone before gc writes (closed at once here, so it is certain)."""
    root, _ = store
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "gc", "--dry-run", "-v"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
