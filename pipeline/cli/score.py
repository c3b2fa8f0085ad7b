"""`python -m pipeline score`: score any MLPerf accuracy log (perfdag's or another harness's) with the
code CheckAccuracy uses, and judge it against the benchmark's gates. Exit 0 pass, 11 fail, 2 bad input."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from harness.errors import InputError
from harness.mlperf import benchmarks

EXIT_FAIL = 11


def add_parser(sub) -> None:
    sc = sub.add_parser("score", help="score an mlperf_log_accuracy.json as MLCommons' script does; exit 0 pass, 11 fail",
                        description=__doc__)
    sc.add_argument("--benchmark", required=True, help="llama2-70b, llama3.1-8b, mixtral-8x7b, llama3.1-405b, "
                                                      "deepseek-r1, gpt-oss-120b, qwen3-vl-235b-a22b, llama3.1-8b-edge, qwen3.6-27b, whisper "
                                                      "(MLPerf's and LoadGen's spellings too)")
    sc.add_argument("--log", required=True, metavar="FILE", help="mlperf_log_accuracy.json")
    sc.add_argument("--dataset", required=True, metavar="FILE",
                    help="the benchmark's dataset: MLPerf's pickle (.pkl, with --allow-pickle), JSON lines (.jsonl), "
                         "or for whisper the reference's manifest (.json: dev-all-repack.json; no audio is read)")
    sc.add_argument("--tokenizer", default=None, metavar="DIR",
                    help="a Hugging Face tokenizer directory (not for a log of text answers: qwen3-vl-235b-a22b, "
                         "qwen3.6-27b, nor of characters: whisper)")
    sc.add_argument("--round", default="", help="MLPerf round whose gates apply (default: the newest that has it)")
    sc.add_argument("--target", type=float, default=0.0, help="0.99 or 0.999 (default: the round's lowest)")
    sc.add_argument("--scenario", default=None, choices=["Offline", "Server", "Interactive", "SingleStream"],
                    help="the scenario whose gates apply, where one has its own (qwen3-vl's Interactive: the 8k "
                         "subset, 0.7878 x 0.99)")
    sc.add_argument("--dtype", default="int32", choices=["int32", "int64"],
                    help="of the logged token ids (whisper's labels are always read as int64: the script's int32 is "
                         "array type 'l', 8 bytes on Linux)")
    sc.add_argument("--gates", default="mlperf", choices=["mlperf", "self"],
                    help="mlperf: the round's reference scores; self: the dataset's references scored as outputs")
    sc.add_argument("--allow-pickle", action="store_true",
                    help="load a .pkl dataset (unpickling runs whatever code the file holds)")
    sc.add_argument("--workers", type=int, default=2, help="sandboxed programs at once (MBXP)")
    sc.add_argument("--timeout", type=float, default=20.0, help="seconds per sandboxed program")
    sc.add_argument("--livecodebench-problems", default=None, metavar="FILE",
                    help="local copy of livecodebench/code_generation_lite (JSON lines: question_id, public_test_cases, "
                         "private_test_cases, metadata); needed when the dataset has LiveCodeBench rows "
                         "(deepseek-r1: release_v1, gpt-oss-120b: release_v6); nothing is downloaded")
    sc.add_argument("--livecodebench-timeout", type=float, default=60.0,
                    help="seconds per LiveCodeBench test (MLCommons: 60)")
    sc.add_argument("--allow-code-network", action="store_true",
                    help="where the kernel refuses the sandbox's namespaces, run generated code with weaker "
                         "isolation (the host's network; as root, no namespaces) instead of refusing")
    sc.add_argument("--bfcl-python", default=None, metavar="PYTHON",
                    help="qwen3.6-27b: the Python of a bfcl-eval environment (default: $PERFDAG_BFCL_PYTHON, else "
                         "the one `python -m pipeline bfcl setup` made)")
    sc.add_argument("--out", default="", metavar="DIR", help="write accuracy.json and per-row detail here")
    sc.add_argument("--json", action="store_true", help="print the whole result as JSON")


def run(args) -> int:
    # Here, not at the top: the scorers bring numpy, which `python -m pipeline status` and the other
    # commands sharing this parser never use (issue 51).
    from harness.mlperf.evaluate import evaluate, read_scoring_dataset, read_tokenizer

    try:
        bench = benchmarks.get(args.benchmark)
    except KeyError:
        raise InputError(f"--benchmark: unknown {args.benchmark!r}; one of {', '.join(benchmarks.REGISTRY)}") from None
    round_ = args.round or bench.rounds[-1]
    if round_ not in bench.targets:
        raise InputError(f"--round: {bench.name} is not in {round_!r}; it is in {', '.join(bench.rounds)}")
    target = args.target or benchmarks.TARGETS[bench.targets[round_][0]]
    if args.gates == "mlperf" and benchmarks.target_name(target) not in bench.targets[round_]:
        allowed = ", ".join(str(benchmarks.TARGETS[t]) for t in bench.targets[round_])
        raise InputError(f"--target: {target} is not a target of {bench.name} in {round_}; use {allowed}")
    if args.gates == "self" and bench.accuracy_log == "text":
        raise InputError(f"--gates: {bench.name}'s log holds answers as text, which its references are not: "
                         "use --gates mlperf")
    if bench.accuracy_log == "labels" and Path(args.dataset).suffix == ".json":
        samples = manifest_samples(Path(args.dataset))
    else:
        samples = read_scoring_dataset(Path(args.dataset), args.allow_pickle)
    if args.tokenizer is None and bench.accuracy_log == "token_ids":
        raise InputError(f"--tokenizer: {bench.name}'s log holds token ids; give the tokenizer directory that made them")
    tokenizer = read_tokenizer(Path(args.tokenizer)) if args.tokenizer else None
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    doc = evaluate(args.log, samples, tokenizer, benchmark=bench.name, round_=round_, target=target,
                   gates_from=args.gates, dtype=args.dtype, code_workers=args.workers, code_timeout_s=args.timeout,
                   allow_network=args.allow_code_network, out_dir=out, reference_source=f"{args.dataset}",
                   livecodebench_problems=args.livecodebench_problems, livecodebench_timeout_s=args.livecodebench_timeout,
                   problems_field="--livecodebench-problems", bfcl_python=args.bfcl_python, scenario=args.scenario)
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(f"{bench.name} ({round_}, target {target}): {doc['samples']} samples scored")
        width = max([18, *map(len, doc["scores"])])
        for name, value in doc["scores"].items():
            mark = _mark(doc["check"], name)
            print(f"  {name:<{width}} {_fmt(value):>14}  {mark}")
        print(f"accuracy {'PASS' if doc['passed'] else 'FAIL'}" + ("" if doc["passed"] else f": {doc['why']}"))
    return 0 if doc["passed"] else EXIT_FAIL


def manifest_samples(path: Path) -> list:
    """A whisper manifest's kept rows (the reference's Manifest: over 30 s dropped) as samples to score."""
    from harness.model.speech import read_manifest

    if not path.is_file():
        raise InputError(f"--dataset: {path} is not a file")
    return [SimpleNamespace(index=i, reference_text=c.transcript, reference_ids=None, meta={"columns": {}})
            for i, c in enumerate(read_manifest(path))]


def _mark(verdict: dict, name: str) -> str:
    m = verdict["metrics"].get(name)
    if m is None:
        return ""
    if "threshold" in m:
        return f"{'ok' if m['passed'] else 'FAIL'} (>= {m['threshold']:.4f})"
    return f"{'ok' if m['passed'] else 'FAIL'} (in [{m['min']:.4f}, {m['max']:.4f}])"


def _fmt(v) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)



