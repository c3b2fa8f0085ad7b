"""Torch's threads follow the CPUs the process may use: its affinity mask and the cgroup quota."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO

from harness.cpus import cgroup_cpu_limit


def test_cgroup_v2_quota_of_the_process_and_its_ancestors(tmp_path):
    (tmp_path / "job" / "step").mkdir(parents=True)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "job" / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "job" / "step" / "cpu.max").write_text("max 100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job/step\n")
    assert cgroup_cpu_limit(tmp_path, proc) == 1.5  # the parent's quota binds the child
    proc.write_text("0::/\n")
    assert cgroup_cpu_limit(tmp_path, proc) is None  # unlimited


def test_cgroup_v1_cfs_quota(tmp_path):
    d = tmp_path / "cpu,cpuacct" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("200000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    assert cgroup_cpu_limit(tmp_path, proc) == 2.0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs 2 CPUs to pin to one")
def test_a_process_pinned_to_one_cpu_runs_one_torch_thread():
    code = ("import os, torch; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); torch.set_num_threads(8); "
            "from harness.cpus import apply_torch_threads; print(apply_torch_threads())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "1", out.stderr
