"""`python -m pipeline bench`: measure an OpenAI-compatible server that runs already (pipeline/bench.py).

The flags are parameters (`--url` is openai.endpoints, `--model` openai.model, `--tokenizer`
dataset.tokenizer, `--dataset` dataset.format/path), applied after --params-file and before
--overrides, so the same measurement is a params file with those keys.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import luigi

from harness.errors import InputError, PerfdagError
from pipeline.bench import Bench
from tasks.settings import DEFAULT_PARAMS

SERVER_KINDS = ("transformers", "trtllm-serve", "vllm", "sglang")


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="measure a running OpenAI-compatible server (no model stages)",
                       description="Measures a server that is already up, through the same LoadGen scenarios, "
                                   "client cores, cache and report as FullRun, without PrepareModel, Quantize, "
                                   "BuildEngine or a launch, and without an accuracy run. Exit 0: VALID; 10: INVALID.")
    b.add_argument("--url", action="append", default=[], metavar="URL",
                   help="the server, http://host:port (repeat for several replicas of one model)")
    b.add_argument("--model", default="", metavar="NAME", help="the model name requests carry (openai.model)")
    b.add_argument("--tokenizer", default="", metavar="DIR",
                   help="the served model's Hugging Face tokenizer directory (dataset.tokenizer)")
    b.add_argument("--dataset", default="", metavar="FILE|builtin|synthetic",
                   help="a jsonl dataset (input or input_ids per line), an MLPerf .pkl, builtin, or synthetic "
                        "(prompts of set lengths: --isl/--osl) (default: the params file's dataset)")
    b.add_argument("--isl", default="", metavar="MEAN[:SD]", help="synthetic input length, e.g. 128:32")
    b.add_argument("--osl", default="", metavar="MEAN[:SD]",
                   help="synthetic output length, e.g. 64:16 (dataset.max_new_tokens follows: mean + 4 sd)")
    b.add_argument("--server", default="", choices=SERVER_KINDS,
                   help="the server's kind: which request keys it takes (default transformers: text prompts and "
                        "re-tokenized text, which every OpenAI-compatible server accepts; trtllm-serve, vllm and "
                        "sglang exchange token ids)")
    b.add_argument("--scenario", default="", choices=("Offline", "Server", "Interactive"))
    b.add_argument("--params-file", default=DEFAULT_PARAMS)
    b.add_argument("--overrides", default="", help='"section.key=value,..." applied last')
    b.add_argument("--rerun-from", default="", help="measure again (RunLoadgen) instead of reusing a measurement")
    b.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure N times in this run, each kept; the summary gives what the scenario is judged by as "
                        "median [interval of the median] (3 at least for compare to judge a change)")
    b.add_argument("--converge", type=float, default=0.0, metavar="W",
                   help="with --repeat: stop once that median is known within +-W (a share, e.g. 0.02) at 95%%")
    b.add_argument("--verbose", action="store_true", help="show third-party warnings and chatter")


def overrides(args) -> str:
    """The flags as parameter overrides, the user's --overrides after them (they win)."""
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
    return ",".join(items + ([args.overrides] if args.overrides.strip() else []))


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


def run(args) -> int:
    try:  # bad flags and parameters: one line each, nothing run
        task = Bench(params_file=args.params_file, overrides=overrides(args), rerun_from=args.rerun_from,
                     repeat=args.repeat, converge=args.converge, verbose=args.verbose)
    except PerfdagError as e:
        print(e)
        return 2
    result = luigi.build([task], local_scheduler=True, detailed_summary=True, workers=1)
    if not task.is_done():
        print(f"perfdag: the bench was not completed ({result.status.name}); see the log above")
        return 1
    return 0  # an INVALID run exits 10 (tasks/lifecycle.py)
