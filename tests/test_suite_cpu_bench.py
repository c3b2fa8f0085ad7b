"""bench/suite_cpu.py: each process of a suite run is put down to the kind that spent its CPU."""
from __future__ import annotations

import pytest

from bench.suite_cpu import kind_of


@pytest.mark.parametrize("cmd,comm,kind", [
    ("/r/.venv/bin/python -m luigi --module pipeline FullRun --local-scheduler", "python", "luigi command line"),
    ("/r/.venv/bin/python -m pipeline status --json --overrides x", "python", "perfdag command line: status"),
    ("/r/.venv/bin/python -m pipeline servers stop --all", "python", "perfdag command line: other commands"),
    ("/r/.venv/lib/python3.11/site-packages/pytriton/tritonserver/bin/tritonserver --model-repository "
     "/tmp/pytest-of-root/x/LaunchServers/k/repo", "tritonserver", "tritonserver"),
    ("/r/.venv/lib/python3.11/site-packages/pytriton/tritonserver/backends/python/triton_python_backend_stub "
     "/tmp/pytest-of-root/x/model.py", "triton_python_b", "Triton Python-backend stub"),
    ("/r/.venv/bin/python -B -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=11)",
     "python", "LoadGen frontend"),
    ("/r/.venv/bin/python -m harness.loadgen.driver --driver /tmp/pytest-of-root/x/RunLoadgen", "python",
     "LoadGen driver"),
    ("/r/.venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "python", "pytest and its workers"),
    ("", "rm", "other (rm)"),
])
def test_a_process_is_put_down_to_its_kind_by_what_it_runs_not_where(cmd, comm, kind):
    """Paths under pytest's temporary directory do not make a server or a stage a test process."""
    assert kind_of(cmd, comm).startswith(kind)
