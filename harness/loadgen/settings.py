"""LoadGen test settings: MLPerf's latency presets and the TestSettings a run uses.

Order (later wins): LoadGen's built-in mlperf.conf of `mlperf_model` (Interactive reads the
`<model>-interactive` Server settings), then `user_conf` (a LoadGen user.conf path), then the
explicit keys. `seed` 0 keeps MLPerf's official RNG seeds.

SingleStream: LoadGen issues one query at a time, the next when the last completes, and generates
2 x min_duration / expected latency of them up front (`single_stream_expected_latency_ms`;
mlperf.conf: 10 ms). A benchmark with `sample_concatenate_permutation` (llama3.1-8b-edge) raises
min_query_count to that many and then to the next multiple of the performance sample count (a whole
pass more where it already is one: LoadGen's test_settings_internal.cc), and every one is issued:
too low an expected latency makes a run issue far more queries than min_duration needs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from harness.mlperf import benchmarks
from harness.mlperf.benchmarks import ROUND_SEEDS, SCENARIOS

MODES = ("PerformanceOnly", "AccuracyOnly")

DEFAULT_MLPERF_MODEL = "llama2-70b"

#: Keys `settings` may hold (the params `loadgen` section plus a few LoadGen extras).
SETTINGS_KEYS = frozenset({
    "scenario", "mode", "offline_expected_qps", "server_target_qps", "min_duration_ms", "min_query_count",
    "max_duration_ms", "max_query_count", "performance_sample_count", "ttft_latency_ms", "tpot_latency_ms",
    "seed", "mlperf_model", "round", "user_conf", "single_stream_expected_latency_ms",
})
#: perfdag's scenario -> LoadGen's (Interactive is LoadGen's Server at the `-interactive` settings).
LOADGEN_SCENARIO = {"Offline": "Offline", "Server": "Server", "Interactive": "Server", "SingleStream": "SingleStream"}


def latency_constraints(scenario: str, mlperf_model: str = DEFAULT_MLPERF_MODEL) -> tuple[float, float] | None:
    """MLPerf's (TTFT ms, TPOT ms) for `mlperf_model` in `scenario`, from the benchmark registry
    (None for Offline and SingleStream, which have none). A model or scenario the registry has no
    limits for gets llama2-70b's."""
    if LOADGEN_SCENARIO[scenario] != "Server":
        return None

    name = benchmarks.canonical_name(mlperf_model) or DEFAULT_MLPERF_MODEL
    limits = benchmarks.REGISTRY[name].latency_ms
    return limits.get(scenario) or benchmarks.REGISTRY[DEFAULT_MLPERF_MODEL].latency_ms[scenario]


def target_latency_ms(scenario: str, mlperf_model: str = DEFAULT_MLPERF_MODEL) -> float | None:
    """The end-to-end latency limit (ms) where that, not TTFT/TPOT, is the benchmark's constraint in
    `scenario` (qwen3-vl: mlperf.conf's use_token_latencies = 0 and target_latency); else None."""
    name = benchmarks.canonical_name(mlperf_model)
    return benchmarks.REGISTRY[name].target_latency_ms.get(scenario) if name else None


def conf_model_name(mlperf_model: str) -> str:
    """The name LoadGen's mlperf.conf knows the benchmark by (llama3.1-405b -> llama3_1-405b)."""

    name = benchmarks.canonical_name(mlperf_model)
    return benchmarks.REGISTRY[name].loadgen_model if name else mlperf_model


def from_params(loadgen, num_samples: int) -> dict[str, Any]:
    """The settings of the params `loadgen` section (None values are left to LoadGen; offline_expected_qps
    and single_stream_expected_latency_ms "auto" are None here: measured first, harness/loadgen/measure.py)."""
    auto = loadgen.offline_expected_qps == "auto"
    ss_auto = loadgen.single_stream_expected_latency_ms == "auto"
    return {"offline_expected_qps": None if auto else loadgen.offline_expected_qps, "server_target_qps": loadgen.server_target_qps,
            "min_duration_ms": loadgen.min_duration_ms, "min_query_count": loadgen.min_query_count,
            "max_duration_ms": loadgen.max_duration_ms or None,
            "performance_sample_count": loadgen.performance_sample_count or num_samples,
            "ttft_latency_ms": loadgen.ttft_latency_ms, "tpot_latency_ms": loadgen.tpot_latency_ms,
            "mlperf_model": loadgen.mlperf_model, "round": loadgen.round, "seed": loadgen.seed,
            "single_stream_expected_latency_ms": None if ss_auto else loadgen.single_stream_expected_latency_ms}


def user_conf_text(conf_model: str, lg_scen: str, scenario: str, model: str, st: Mapping[str, Any],
                   n_samples: int) -> str:
    """The explicit settings as LoadGen user.conf lines (`model.scenario.key = value`), so the file a
    run hands LoadGen (and an MLPerf submission ships) says what the run used; the same values are
    also set on TestSettings, which wins. Seeds are not user.conf keys: a comment says them."""
    pre = f"{conf_model}.{lg_scen}."
    lines = ["# perfdag: this run's explicit LoadGen settings, over LoadGen's built-in mlperf.conf",
             f"# ({conf_model}, {lg_scen}); effective values are in mlperf_log_detail.txt"]
    if lg_scen == "Offline":
        if "offline_expected_qps" in st:
            lines.append(f"{pre}target_qps = {_num(st['offline_expected_qps'])}")
    elif lg_scen == "SingleStream":
        if "single_stream_expected_latency_ms" in st:  # user.conf's target_latency is in ms
            lines.append(f"{pre}target_latency = {_num(st['single_stream_expected_latency_ms'])}")
    else:
        if "server_target_qps" in st:
            lines.append(f"{pre}target_qps = {_num(st['server_target_qps'])}")
        e2e = target_latency_ms(scenario, model)
        if e2e is not None:
            lines += [f"{pre}use_token_latencies = 0", f"{pre}target_latency = {_num(e2e)}"]
        else:
            ttft, tpot = latency_constraints(scenario, model)
            lines += [f"{pre}target_latency = 0",
                      f"{pre}ttft_latency = {_num(st.get('ttft_latency_ms', ttft))}",
                      f"{pre}tpot_latency = {_num(st.get('tpot_latency_ms', tpot))}"]
    for key, name in (("min_duration_ms", "min_duration"), ("max_duration_ms", "max_duration"),
                      ("min_query_count", "min_query_count"), ("max_query_count", "max_query_count")):
        if key in st:
            lines.append(f"{pre}{name} = {int(st[key])}")
    perf = min(int(st.get("performance_sample_count") or 0) or n_samples, n_samples)
    lines.append(f"{pre}performance_sample_count_override = {perf}")
    if int(st.get("seed") or 0):
        lines.append(f"# RNG seeds {int(st['seed'])}, +1, +2 (qsl, sample index, schedule), set on TestSettings")
    elif st.get("round"):
        lines.append(f"# RNG seeds: MLPerf {st['round']}'s official ones, set on TestSettings")
    return "\n".join(lines) + "\n"


def _num(v) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)


class SettingsError(Exception):
    pass


def build_test_settings(lg, scenario: str, mode: str, st: Mapping[str, Any], n_samples: int,
                  out_dir: Path) -> tuple[Any, int]:
    """(mlperf_loadgen.TestSettings, performance sample count) for one run; writes `user.conf`
    (a record of the explicit settings) into `out_dir` unless a user.conf was given."""
    lg_scen = LOADGEN_SCENARIO[scenario]
    model = st.get("mlperf_model", DEFAULT_MLPERF_MODEL)
    conf_model = conf_model_name(model) + ("-interactive" if scenario == "Interactive" else "")
    s = lg.TestSettings()
    s.scenario = getattr(lg.TestScenario, lg_scen)
    user_conf = st.get("user_conf")
    if not user_conf:
        user_conf = out_dir / "user.conf"
        user_conf.write_text(user_conf_text(conf_model, lg_scen, scenario, model, st, n_samples))
    rc = s.FromConfig(str(user_conf), conf_model, lg_scen)  # takes a path, does not set the scenario
    if rc != 0:
        raise SettingsError(f"LoadGen could not read {user_conf} (FromConfig returned {rc})")
    s.mode = lg.TestMode.AccuracyOnly if mode == "AccuracyOnly" else lg.TestMode.PerformanceOnly
    e2e = target_latency_ms(scenario, model)
    s.use_token_latencies = e2e is None
    if lg_scen == "Offline":
        if "offline_expected_qps" in st:
            s.offline_expected_qps = float(st["offline_expected_qps"])
    elif lg_scen == "SingleStream":
        if "single_stream_expected_latency_ms" in st:
            s.single_stream_expected_latency_ns = int(float(st["single_stream_expected_latency_ms"]) * 1e6)
    elif e2e is not None:  # end-to-end latency is the constraint (qwen3-vl)
        s.server_target_latency_ns = int(e2e * 1e6)
        if "server_target_qps" in st:
            s.server_target_qps = float(st["server_target_qps"])
    else:
        s.server_target_latency_ns = 0  # LLMs: only TTFT/TPOT constrain (as mlperf.conf)
        if "server_target_qps" in st:
            s.server_target_qps = float(st["server_target_qps"])
        # always explicit: a model mlperf.conf does not know would get LoadGen's 100 ms placeholders
        ttft, tpot = latency_constraints(scenario, model)
        s.ttft_latency = int(float(st.get("ttft_latency_ms", ttft)) * 1e6)
        s.tpot_latency = int(float(st.get("tpot_latency_ms", tpot)) * 1e6)
    for key in ("min_duration_ms", "max_duration_ms", "min_query_count", "max_query_count"):
        if key in st:
            setattr(s, key, int(st[key]))
    perf = min(int(st.get("performance_sample_count") or 0) or n_samples, n_samples)
    s.performance_sample_count_override = perf
    seed = int(st.get("seed") or 0)
    if seed:
        s.qsl_rng_seed = seed
        s.sample_index_rng_seed = seed + 1
        s.schedule_rng_seed = seed + 2
    elif st.get("round"):  # the round's official seeds, which its checker insists on

        s.qsl_rng_seed, s.sample_index_rng_seed, s.schedule_rng_seed = ROUND_SEEDS[st["round"]]
    return s, perf
