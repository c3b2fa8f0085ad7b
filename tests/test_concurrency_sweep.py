"""A closed-loop concurrency sweep: LoadGen Offline with harness.max_in_flight as the axis. Each point
holds at most its limit in flight, reaches it, and the sweep's table varies only that column."""
from __future__ import annotations

import csv
import json

import pytest
from conftest import FAST, REPO, copied_root, run_luigi, tritonservers_under

pytestmark = pytest.mark.timeout(1200)


def test_concurrency_is_a_sweep_axis_through_loadgen_offline(built_fast, tmp_path):
    sweep = tmp_path / "conc.yaml"
    sweep.write_text("\n".join([
        "name: conc", f"base: {REPO / 'params' / 'default.yaml'}",
        f'overrides: "{FAST},dataset.num_samples=24,loadgen.min_duration_ms=1000,loadgen.min_query_count=32,'
        'harness.clients_per_frontend=1,accuracy.num_samples=8,accuracy.target=0.05"',
        "grid:", "  harness.max_in_flight: [1, 4]"]) + "\n")
    with copied_root(built_fast, tmp_path / "artifacts") as root:  # the model and its 24 samples are built
        proc = run_luigi("Sweep", "--sweep", str(sweep), artifacts=root, timeout=1100)
        assert "perfdag Sweep conc: 2 point(s)" in proc.stdout, proc.stdout[-3000:]
        results = [json.loads(p.read_text()) for p in root.glob("RunLoadgen/*/result.json")]
        got = sorted((r["harness"]["max_in_flight"], r["harness"]["peak_in_flight"]) for r in results)
        assert got == [(1, 1), (4, 4)], got  # each point held exactly its concurrency
        (out,) = [d for d in (root / "Sweep").iterdir() if not d.name.startswith(".")]
        rows = list(csv.DictReader(open(out / "sweep.csv")))
        assert sorted(r["harness.max_in_flight"] for r in rows) == ["1", "4"]
        assert json.loads((out / "sweep.json").read_text())["varied"] == ["harness.max_in_flight"]
        assert tritonservers_under(root) == []
