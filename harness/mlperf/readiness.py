"""Why settings cannot make a valid MLPerf submission, said before anyone tries to submit them.

LoadGen calls a shortened run VALID (its own min_duration is what it was given); MLPerf's
submission checker refuses it. A run made for speed is fine; it just must not look submittable.
"""
from __future__ import annotations

from harness.mlperf import benchmarks

MIN_DURATION_MS = 600_000  # the checker's minimum for every LLM scenario (mlperf.conf min_duration)
# Scenarios whose query count the checker leaves to LoadGen's early stopping: it reads no
# min_query_count for them (submission_checker configuration.uses_early_stopping).
EARLY_STOPPING_SCENARIOS = ("Server", "SingleStream", "MultiStream")


def submission_warnings(p, accuracy: bool = True) -> list[str]:
    """One line per setting that the submission checker would refuse (`p`: resolved Params); without
    `accuracy` (a performance-only run, `pipeline bench`), none about the accuracy run it did not make."""
    out = []
    lg, ds, acc = p.loadgen, p.dataset, p.accuracy
    if lg.min_duration_ms < MIN_DURATION_MS:
        out.append(f"loadgen.min_duration_ms={lg.min_duration_ms:,}: runs shorter than {MIN_DURATION_MS // 1000} s "
                   "are refused by MLPerf's submission checker")
    bench = benchmarks.REGISTRY.get(benchmarks.canonical_name(lg.mlperf_model) or "")
    # The built-in dataset is not MLPerf's: its own size is the whole dataset.
    full = bench.dataset_size_for(lg.scenario) if bench and ds.format != "builtin" else ds.num_samples
    scored = min(acc.num_samples or ds.num_samples, ds.num_samples)
    if scored < full and accuracy:
        out.append(f"accuracy is scored on {scored:,} of the dataset's {full:,} samples: the checker needs "
                   "the whole dataset (dataset.num_samples, accuracy.num_samples=0)")
    for scenario, needed in (bench.min_queries.items() if bench and ds.format != "builtin" else ()):
        if scenario == lg.scenario and scenario not in EARLY_STOPPING_SCENARIOS and lg.min_query_count < needed:
            out.append(f"loadgen.min_query_count={lg.min_query_count:,}: {scenario} needs at least {needed:,} "
                       "queries for the checker")
    return out
