"""`python -m pipeline bench`: measure an OpenAI-compatible server that runs already (pipeline/bench.py).

The flags are parameters (`--url` is openai.endpoints, `--model` openai.model, `--tokenizer`
dataset.tokenizer, `--dataset` dataset.format/path), applied after --params-file and before
--overrides, so the same measurement is a params file with those keys. The load flags
(`--concurrency`, `--request-rate`, `--request-count`, `--duration`) are LoadGen settings too, and
the mapping is printed; a list of concurrencies or rates measures one point each, then one table.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from harness.errors import InputError, PerfdagError
from harness.loadgen.verdict import invalid_reason, is_valid
from harness.reports.sweep import fmt, whose
from pipeline.bench import Bench
from pipeline.cli.flow import build_flow
from tasks import lifecycle
from tasks.settings import DEFAULT_PARAMS

SERVER_KINDS = ("transformers", "trtllm-serve", "vllm", "sglang")


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="measure a running OpenAI-compatible server (no model stages)",
                       description="Measures a server that is already up, through the same LoadGen scenarios, "
                                   "client cores, cache and report as FullRun, without PrepareModel, Quantize, "
                                   "BuildEngine or a launch, and without an accuracy run. Exit 0: VALID; 10: INVALID.")
    add_server_flags(b)
    b.add_argument("--dataset", default="", metavar="FILE|builtin|synthetic",
                   help="a jsonl dataset (input or input_ids per line), an MLPerf .pkl, builtin, or synthetic "
                        "(prompts of set lengths: --isl/--osl) (default: the params file's dataset)")
    b.add_argument("--isl", default="", metavar="MEAN[:SD]", help="synthetic input length, e.g. 128:32")
    b.add_argument("--osl", default="", metavar="MEAN[:SD]",
                   help="synthetic output length, e.g. 64:16 (dataset.max_new_tokens follows: mean + 4 sd)")
    b.add_argument("--scenario", default="", choices=("Offline", "Server", "Interactive"))
    b.add_argument("--params-file", default=DEFAULT_PARAMS)
    b.add_argument("--overrides", default="", help='"section.key=value,..." applied last')
    b.add_argument("--rerun-from", default="", help="measure again (RunLoadgen) instead of reusing a measurement")
    b.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure N times in this run, each kept; the summary gives what the scenario is judged by as "
                        "median [interval of the median] (3 at least for compare to judge a change)")
    b.add_argument("--converge", type=float, default=0.0, metavar="W",
                   help="with --repeat: stop once that median is known within +-W (a share, e.g. 0.02) at 95%%")
    b.add_argument("--no-report", action="store_true",
                   help="measure only: LoadGen's run and its result.json, no Bench report (plots, report.md); history "
                        "and compare read reports: the same command without it builds one from this measurement")
    b.add_argument("--verbose", action="store_true", help="show third-party warnings and chatter")
    load = b.add_argument_group("load", "plain load flags, mapped onto LoadGen's scenarios (the mapping is printed)")
    load.add_argument("--concurrency", default="", metavar="N[,N...]",
                      help="a closed loop of N requests in flight: LoadGen Offline (every query issued at once) with "
                           "harness.max_in_flight=N; a list measures one point each")
    load.add_argument("--request-rate", default="", metavar="R[,R...]",
                      help="an open loop at R requests/s: LoadGen Server at server_target_qps=R, Poisson arrivals "
                           "(LoadGen has no constant-rate arrivals); a list measures one point each")
    load.add_argument("--request-count", type=int, default=0, metavar="N",
                      help="issue N requests: loadgen.min_query_count and performance_sample_count N, with no minimum "
                           "duration unless --duration (exactly N where the dataset has N samples or more; past that "
                           "LoadGen's equal issue rounds up to whole passes over the dataset)")
    load.add_argument("--duration", type=float, default=0.0, metavar="S",
                      help="run at least S seconds: loadgen.min_duration_ms; without --request-count the duration "
                           "alone decides (min_query_count 1, Offline's expected rate measured first: auto)")


def add_server_flags(parser) -> None:
    """--url, --model, --tokenizer and --server: the running server a command measures (bench, sessions)."""
    parser.add_argument("--url", action="append", default=[], metavar="URL",
                        help="the server, http://host:port (repeat for several replicas of one model)")
    parser.add_argument("--model", default="", metavar="NAME", help="the model name requests carry (openai.model)")
    parser.add_argument("--tokenizer", default="", metavar="DIR",
                        help="the served model's Hugging Face tokenizer directory (dataset.tokenizer)")
    parser.add_argument("--server", default="", choices=SERVER_KINDS,
                        help="the server's kind: which request keys it takes (default transformers: text prompts and "
                             "re-tokenized text, which every OpenAI-compatible server accepts; trtllm-serve, vllm and "
                             "sglang exchange token ids)")


def server_items(args) -> list[str]:
    """The server flags as parameter overrides (build.backend=openai first)."""
    items = ["build.backend=openai"]
    if args.url:
        urls = [u.strip() for arg in args.url for u in arg.split(",") if u.strip()]
        items.append(f"openai.endpoints={json.dumps(urls)}")
    if args.model:
        items.append(f"openai.model={json.dumps(args.model)}")
    if args.tokenizer:
        items.append(f"dataset.tokenizer={json.dumps(str(Path(args.tokenizer).expanduser().resolve()))}")
    if args.server:
        items.append(f"openai.server={args.server}")
    return items


def overrides(args, load: list[str] = ()) -> str:
    """The flags (and a point's `load` settings) as parameter overrides, the user's --overrides after them
    (they win)."""
    items = server_items(args)
    if args.scenario:
        items.append(f"loadgen.scenario={args.scenario}")
    if (args.isl or args.osl) and args.dataset not in ("", "synthetic"):
        raise InputError(f"--isl/--osl shape the synthetic dataset, not --dataset {args.dataset}; "
                         "drop them or use --dataset synthetic")
    if args.dataset or args.isl or args.osl:
        items += dataset_overrides(args.dataset or "synthetic")
    for flag, name in ((args.isl, "isl"), (args.osl, "osl")):
        if flag:
            mean, sd = length_spec(flag, f"--{name}")
            items += [f"dataset.synthetic.{name}_mean={mean:g}", f"dataset.synthetic.{name}_sd={sd:g}"]
            if name == "osl":
                items.append(f"dataset.max_new_tokens={math.ceil(mean + 4 * sd)}")
    return ",".join(items + list(load) + ([args.overrides] if args.overrides.strip() else []))


def length_spec(text: str, flag: str) -> tuple[float, float]:
    """'128' or '128:32' -> (mean, sd)."""
    mean, _, sd = text.partition(":")
    try:
        out = float(mean), float(sd or 0)
    except ValueError:
        out = (-1.0, -1.0)
    if not (out[0] >= 1 and out[1] >= 0 and all(math.isfinite(x) for x in out)):
        raise InputError(f"{flag}: {text!r} is not MEAN or MEAN:SD in tokens (e.g. 128:32)")
    return out


def dataset_overrides(dataset: str) -> list[str]:
    if dataset in ("builtin", "synthetic"):
        return [f"dataset.format={dataset}", "dataset.path=null"]
    fmt = "mlperf_pickle" if dataset.endswith(".pkl") else "jsonl"
    return [f"dataset.format={fmt}", f"dataset.path={json.dumps(str(Path(dataset).expanduser().resolve()))}"]


def _values(text: str, flag: str, kind) -> list:
    try:
        out = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or not all(v > 0 and math.isfinite(v) for v in out):
        raise InputError(f"{flag}: {text!r} is not a positive number or a comma-separated list of them (e.g. 1,4,16)")
    return out


def load_points(args) -> list[tuple[str, list[str]]]:
    """One (label, overrides) per point of the load flags; [("", [])] where none is given."""
    if args.concurrency and args.request_rate:
        raise InputError("--concurrency and --request-rate: one loop or the other (closed: Offline; open: Server)")
    if (args.concurrency or args.request_rate) and args.scenario:
        raise InputError(f"--scenario {args.scenario}: --concurrency and --request-rate choose the scenario; drop it")
    if args.request_count < 0 or args.duration < 0 or not math.isfinite(args.duration):
        raise InputError("--request-count and --duration: a positive number (or leave them out)")
    common = []
    if args.request_count:  # LoadGen loads that many samples: equal issue rounds to whole passes over them
        common += [f"loadgen.min_query_count={args.request_count}", f"loadgen.min_duration_ms={round(args.duration * 1000)}",
                   f"loadgen.performance_sample_count={args.request_count}"]
    elif args.duration:  # Offline issues expected rate x duration: measured first (auto)
        common += ["loadgen.min_query_count=1", f"loadgen.min_duration_ms={round(args.duration * 1000)}",
                   *([] if args.request_rate else ["loadgen.offline_expected_qps=auto"])]
    if args.concurrency:
        return [(f"--concurrency {n}", ["loadgen.scenario=Offline", f"harness.max_in_flight={n}", *common])
                for n in _values(args.concurrency, "--concurrency", int)]
    if args.request_rate:
        return [(f"--request-rate {r:g}", ["loadgen.scenario=Server", f"loadgen.server_target_qps={r:g}", *common])
                for r in _values(args.request_rate, "--request-rate", float)]
    return [("", common)]


def run(args) -> int:
    try:  # bad flags and parameters: one line each, nothing run
        if args.no_report and (args.repeat > 1 or args.converge):
            raise InputError("--no-report measures once: --repeat and --converge are summarized by the report")
        points = load_points(args)
        tasks = [Bench(params_file=args.params_file, overrides=overrides(args, items), rerun_from=args.rerun_from,
                       repeat=args.repeat, converge=args.converge, verbose=args.verbose) for _, items in points]
        if args.no_report:
            tasks = [t.upstream()["performance"] for t in tasks]  # the measurements alone
        for label, items in points:
            if label:
                print(f"bench: {label} -> {', '.join(items)}")
    except PerfdagError as e:
        print(e)
        return 2
    if build_flow(tasks, "the bench was not completed", detailed=True):
        return 1
    if args.no_report:
        for (label, _), task in zip(points, tasks):
            result = json.loads((task.artifact_dir / "result.json").read_text())
            lifecycle.note_result(task.task_id, valid=is_valid(result), summary=measurement_summary(label, result, task),
                                  persist=False)
        return 0
    if len(tasks) > 1:  # after each point's own summary, which are printed at exit
        lifecycle.note_result("bench points", summary=points_table([label for label, _ in points], tasks),
                              persist=False)
    return 0  # an INVALID run exits 10 (tasks/lifecycle.py)


def measurement_summary(label: str, result: dict, task) -> str:
    """A measurement without its report: LoadGen's verdict and numbers from result.json, each labelled
    whose it is."""
    lines = [f"perfdag bench (--no-report){': ' + label if label else ''}, {result.get('scenario')}",
             f"  result     {'VALID' if is_valid(result) else 'INVALID: ' + (invalid_reason(result) or '')}",
             f"  throughput {fmt(result.get('samples_per_s'))} samples/s, {fmt(result.get('tokens_per_s'))} tokens/s "
             "(LoadGen)"]
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        q = result.get(key) or {}
        if q:
            lines.append(f"  {name} ms    ({'LoadGen' if result.get(key.split('_')[0] + '_source') == 'loadgen' else 'client'}) "
                         f"p50 {fmt(q.get('p50'))}  p90 {fmt(q.get('p90'))}  p99 {fmt(q.get('p99'))}")
    lines += [f"  file       {task.artifact_dir / 'result.json'}",
              "  report     not built (--no-report): the same command without it builds it from this measurement"]
    return "\n".join(lines)


def points_table(labels: list[str], tasks: list) -> str:
    """One row per point: its load, its verdict (is_valid: LoadGen's, errors counted) and the headline
    numbers of its report, TTFT and TPOT labelled whose they are."""
    perf = [json.loads((t.artifact_dir / "report.json").read_text()).get("performance") or {} for t in tasks]
    sources = [{"sources": {k: (p.get("sources") or {}).get(k) or "LoadGen" for k in ("ttft_ms", "tpot_ms")}}
               for p in perf]
    rows = [("point", "scenario", "result", "tokens/s", "samples/s", f"TTFT p99 ms ({whose(sources, 'ttft_ms')})",
             f"TPOT p99 ms ({whose(sources, 'tpot_ms')})", "report")]
    for label, task, p in zip(labels, tasks, perf):
        rows.append((label, p.get("scenario") or "-", "VALID" if is_valid(p) else "INVALID",
                     fmt(p.get("tokens_per_second")), fmt(p.get("samples_per_second")),
                     fmt((p.get("ttft_ms") or {}).get("p99")), fmt((p.get("tpot_ms") or {}).get("p99")),
                     str(task.artifact_dir / "report.json")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
