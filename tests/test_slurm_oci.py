"""Slurm's own OCI containers, run for real: `srun --container=<bundle>` on the two-node local cluster
(scripts/slurm-local.sh writes oci.conf for Debian's crun), with a bundle of this host's Debian userland
(scripts/oci-bundle.sh). The bundle's rootfs holds /perfdag-oci-bundle, which only a process inside it
sees. Without crun the cluster tests skip, and fail under PERFDAG_REQUIRE_SLURM=1 (.ci/run installs crun);
the refusals need no cluster."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAST, REPO, copied_root, local_slurm, run_luigi
from test_multinode_slurm import DISAGG, node_names
from test_slurm import SHORT, SLURM, assert_nothing_left, job_state

from harness.backends import resolve
from harness.config import ParamsError
from harness.slurm import Container, srun_argv

MARKER = "/perfdag-oci-bundle"
HOST_MNT = os.readlink("/proc/self/ns/mnt")
# Each process that runs this prints where it is: program, node, step, the marker, its mount namespace, stage.
WHERE = ('echo "$0|$SLURMD_NODENAME|$SLURM_STEP_ID|$(cat /perfdag-oci-bundle 2>/dev/null)|'
         '$(readlink /proc/self/ns/mnt)|$PERFDAG_SLURM_STAGE"')


def _need_crun() -> None:
    if shutil.which("crun"):
        return
    why = "crun is not installed (apt-get install crun; .ci/run installs it)"
    if os.environ.get("PERFDAG_REQUIRE_SLURM") == "1":
        pytest.fail(why + " (PERFDAG_REQUIRE_SLURM=1)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory):
    _need_crun()
    yield from local_slurm(tmp_path_factory, "slurm_oci", nodes=2)


@pytest.fixture(scope="module")
def bundle(cluster2, tmp_path_factory) -> Path:
    """A bundle of the host's userland that mounts the checkout, this Python and the session's temp
    directory (the cluster's directory, the tests' artifacts roots) at their own paths."""
    assert (Path(cluster2).parent / "oci.conf").is_file(), "slurm-local.sh wrote no oci.conf beside slurm.conf"
    base = tmp_path_factory.getbasetemp()
    base = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    dirs: list[str] = []
    for d in (REPO, sys.prefix, sys.base_prefix, base):
        d = os.path.realpath(d)
        if not (d == "/usr" or d.startswith("/usr/")) and not any(d == x or d.startswith(x + "/") for x in dirs):
            dirs = [x for x in dirs if not x.startswith(d + "/")] + [d]
    out = tmp_path_factory.mktemp("oci") / "bundle"
    made = subprocess.run(["bash", str(REPO / "scripts" / "oci-bundle.sh"), str(out), *dirs], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    return out


def _holder(n: int = 2) -> str:
    job = subprocess.run(["sbatch", "--parsable", f"-N{n}", "--ntasks-per-node=1", "--mem=200M", "--output=/dev/null",
                          "--wrap=sleep 300"], capture_output=True, text=True, timeout=60)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while job_state(job_id) != "RUNNING":
        assert time.monotonic() < deadline, job_state(job_id)
        time.sleep(0.3)
    return job_id


def test_a_step_on_either_node_runs_in_the_bundle_in_its_workdir(cluster2, bundle):
    """perfdag's own step (srun_argv with the bundle) on each node of an allocation runs under crun: it sees
    the bundle's marker, has a mount namespace of its own, starts in the workdir (not config.json's "/"),
    and runs on the node it was placed on; the same step without the container sees no marker."""
    job_id = _holder()
    try:
        for node in node_names():
            argv = srun_argv(job_id, ["/bin/sh", "-c", WHERE + '; echo "cwd=$(pwd)"'], node=node,
                             container=Container(bundle=str(bundle), workdir=str(REPO)))
            assert f"--container={bundle}" in argv
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            where, cwd = out.stdout.splitlines()[-2:]
            _, ran_on, _, marker, mnt, _ = where.split("|")
            assert ran_on == node and marker == f"perfdag OCI bundle {bundle}" and mnt != HOST_MNT, out.stdout
            assert cwd == f"cwd={REPO}"
        plain = subprocess.run(srun_argv(job_id, ["/bin/sh", "-c", WHERE]), capture_output=True, text=True, timeout=120)
        assert plain.returncode == 0 and plain.stdout.split("|")[3] == "" and plain.stdout.split("|")[4] == HOST_MNT
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)


def _stand_ins(bin_dir: Path, evidence: Path) -> dict:
    """`python3` (what a stage in a container runs) and `vllm` (the GPU server, here the echo stack) that first
    append where they run to `evidence`; the environment that puts them first on PATH."""
    bin_dir.mkdir()
    for name, then in (("python3", f'exec {sys.executable} "$@"'),
                       ("vllm", f'exec {sys.executable} -m harness.serving.testing.echo_stack vllm "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{WHERE} >> {evidence}\n{then}\n")
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_a_disaggregated_layout_is_served_and_measured_inside_the_bundle_on_both_nodes(
        cluster2, bundle, built_fast, tmp_path):
    """slurm.container_bundle: LaunchServers' batch step (its srun step in the holder job), the generation
    worker it starts on the second node, and RunLoadgen's measuring step all run inside the bundle (each
    sees its marker, in a mount namespace not the host's), and the run through vllm-router is VALID."""
    evidence = tmp_path / "where.txt"
    env = _stand_ins(tmp_path / "bin", evidence)
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        overrides = (f"{FAST}{SHORT},{SLURM},slurm.stages=[],{DISAGG},openai.server=vllm,"
                     f"openai.binary={tmp_path / 'bin' / 'vllm'},loadgen.offline_expected_qps=4000,"
                     f"slurm.container_bundle={bundle}")
        proc = run_luigi("RunLoadgen", "--overrides", overrides, artifacts=root, env=env, check=False, timeout=900)
        assert proc.returncode == 0, f"RunLoadgen failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
        (script,) = root.glob("runs/*/slurm/LaunchServers-*.sbatch")
        assert f"exec srun --ntasks=1 --container={bundle} /bin/sh -c " in script.read_text()
        (servers_json,) = root.glob("LaunchServers/*/servers.json")
        by_role = {r["role"]: r for r in json.loads(servers_json.read_text())["servers"]}
        assert f"--container={bundle}" in by_role["generation"]["cmd"]
        (result,) = root.glob("RunLoadgen/*/result.json")
        assert json.loads(result.read_text())["valid"] == "VALID"
        assert_nothing_left(root)
    n0, n1 = node_names()
    rows = [line.split("|") for line in evidence.read_text().splitlines()]
    inside = [r for r in rows if r[3] == f"perfdag OCI bundle {bundle}" and r[4] != HOST_MNT]
    assert not [r for r in rows if r not in inside], rows  # nothing ran outside
    stages = {r[5].split("/")[0]: r[1] for r in inside if r[0].endswith("python3")}
    assert stages == {"LaunchServers": n0, "RunLoadgen": n0}, rows
    assert sorted(r[1] for r in inside if r[0].endswith("vllm")) == [n0, n1], rows  # context, generation


# --- refused before anything runs (no cluster needed) -------------------------------------------------

def _bundle(d: Path, **change) -> Path:
    """A hand-made bundle (no runtime needed to check it): rootfs, the checkout bind-mounted."""
    (d / "rootfs").mkdir(parents=True)
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
              "mounts": [{"destination": str(REPO), "source": str(REPO), "type": "bind", "options": ["rbind"]}],
              "linux": {"namespaces": [{"type": "mount"}]}}
    (d / "config.json").write_text(json.dumps({**config, **change}))
    return d


def _refusal(overrides: str) -> str:
    with pytest.raises(ParamsError) as e:
        resolve(REPO / "params" / "default.yaml", overrides)
    return str(e.value)


def test_one_container_per_step_and_no_pyxis_mounts_for_a_bundle(tmp_path):
    b = _bundle(tmp_path / "b")
    text = _refusal(f"slurm.container_bundle={b},slurm.container_image=nvcr.io#nvidia/pytorch:25.01-py3")
    assert "slurm.container_image" in text and "slurm.container_bundle" in text and "keep one" in text
    text = _refusal(f"slurm.container_bundle={b},slurm.container_mounts=[/data:/data]")
    assert "slurm.container_mounts" in text and "config.json" in text
    assert resolve(REPO / "params" / "default.yaml", f"slurm.container_bundle={b}").slurm.container_bundle == str(b)


@pytest.mark.parametrize("case,needle", [
    ("relative", "is not an absolute path"),
    ("missing", "is not a directory"),
    ("no config", "has no config.json"),
    ("not json", "cannot be read as JSON"),
    ("no root", "names no root.path"),
    ("no rootfs", "config.json root.path) is not a directory"),
    ("pid namespace", "its own pid namespace"),
    ("network namespace", "its own network namespace"),
    ("checkout unseen", f"does not bind-mount {REPO} at its own path"),
    ("checkout elsewhere", f"does not bind-mount {REPO} at its own path"),
])
def test_a_bundle_perfdag_cannot_use_is_refused_naming_what_and_the_fix(case, needle, tmp_path, monkeypatch):
    b = tmp_path / "b"
    if case == "relative":
        monkeypatch.chdir(tmp_path)
        _bundle(b)
        b = Path("b")
    elif case == "no config":
        (b / "rootfs").mkdir(parents=True)
    elif case == "not json":
        _bundle(b)
        (b / "config.json").write_text("{not json")
    elif case == "no root":
        _bundle(b, root={})
    elif case == "no rootfs":
        _bundle(b, root={"path": "image"})
    elif case.endswith("namespace"):
        _bundle(b, linux={"namespaces": [{"type": "mount"}, {"type": case.split()[0]}]})
    elif case == "checkout unseen":
        _bundle(b, mounts=[{"destination": "/data", "source": "/data", "type": "bind", "options": ["rbind"]}])
    elif case == "checkout elsewhere":  # mounted, but at another path: the stages' paths would not resolve
        _bundle(b, mounts=[{"destination": "/src", "source": str(REPO), "type": "bind", "options": ["rbind"]}])
    text = _refusal(f"slurm.container_bundle={b}")
    assert "slurm.container_bundle" in text and needle in text, text


def test_a_bundle_that_does_not_mount_the_artifacts_root_is_refused_before_any_stage(tmp_path):
    """The params check the checkout; the task checks the root it will write under, before luigi schedules
    anything: no job is submitted, no stage directory made."""
    b = _bundle(tmp_path / "b")
    root = tmp_path / "artifacts"
    proc = run_luigi("PrepareModel", "--overrides", f"{FAST},{SLURM},slurm.container_bundle={b}", artifacts=root,
                     check=False, timeout=120)
    assert proc.returncode != 0
    assert f"does not bind-mount {root} at its own path" in proc.stderr, proc.stderr[-3000:]
    assert not (root / "PrepareModel").exists()


def test_every_step_of_a_layout_and_the_batch_step_render_the_bundle(monkeypatch, tmp_path):
    """Rendered (no cluster needed): the batch script's step and every layout step on another node run with
    `--container=<bundle>`, starting in their directory through the bundle's /bin/sh; no pyxis option."""
    from harness.slurm import JobSpec, render_script
    from test_serving_roles import DISAGG as ROLES, SPAN, params, remote_layout_argvs

    b = _bundle(tmp_path / "b", mounts=[{"destination": "/", "source": "/", "type": "bind", "options": ["rbind"]}])
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURMD_NODENAME", "n0")
    for layout in (ROLES, SPAN):
        p = params("vllm", layout, f"slurm.container_bundle={b}")
        remote = remote_layout_argvs(p)
        assert remote
        for argv in remote:
            k = argv.index(f"--container={b}")
            assert argv[k + 1:k + 3] == ["/bin/sh", "-c"] and argv[k + 4] == "/root"
            assert not [a for a in argv if a.startswith("--container-")]
    spec = JobSpec(name="j", log=Path("/l"), command=["python3", "-c", "x"], workdir=Path("/src"),
                   container=Container(bundle=str(b), workdir="/src"))
    assert f"exec srun --ntasks=1 --container={b} /bin/sh -c " in render_script(spec)
    assert render_script(spec).endswith(" /src python3 -c x\n")
