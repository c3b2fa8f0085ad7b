"""`python -m pipeline frontier`: the Frontier flow (pipeline/frontier.py), a concurrency sweep of one or
more engines drawn as tokens/s per user against tokens/s per GPU, with its Pareto front."""
from __future__ import annotations

from harness.errors import InputError, PerfdagError
from pipeline.cli.bench import add_server_flags, server_items
from pipeline.cli.flow import build_flow
from pipeline.frontier import Frontier, SessionsFrontier
from tasks.settings import DEFAULT_PARAMS


def add_parser(sub) -> None:
    sp = sub.add_parser("frontier", help="the latency-throughput frontier: a streamed concurrency sweep per engine",
                        description="Runs a streamed closed-loop FullRun at each concurrency level of each engine "
                                    "(engines built once each) and writes frontier.md, frontier.json and "
                                    "frontier.png: tokens/s per user (1000 / TPOT p50) against tokens/s per GPU, "
                                    "the Pareto front of the VALID points marked. With --url, the levels of one "
                                    "running server (Bench points: no model stages, no accuracy run); with "
                                    "--no-accuracy, performance only (PerformanceRun points). Exit 0 when "
                                    "every point ran.")
    add_server_flags(sp)
    sp.add_argument("--params-file", default=DEFAULT_PARAMS)
    sp.add_argument("--overrides", default="", help="applied to every point, after the frontier's own settings")
    sp.add_argument("--levels", default="", help="concurrency levels, e.g. 1,2,4,8 (default: 1..32 up to "
                                                 "--max-level, doubling beyond it, and 1.1x it)")
    sp.add_argument("--concurrency", default="", metavar="N[,N...]",
                    help="the same as --levels, in bench's words: the closed loop's concurrency at each point")
    sp.add_argument("--request-rate", default="", metavar="R[,R...]",
                    help="refused: a frontier's points are closed-loop concurrency levels (tokens/s per user against "
                         "per GPU); an open loop's rates are bench --request-rate R,R... or search --request-rate")
    sp.add_argument("--max-level", type=int, default=0,
                    help="the declared maximum concurrency (default: harness.max_in_flight, else build.max_batch_size)")
    sp.add_argument("--engines", default="", help="engine axes, e.g. 'build.max_batch_size=8,32' (';' between axes)")
    sp.add_argument("--gpus", type=int, default=-1, help="GPUs serving, for tokens/s per GPU (default: "
                                                         "runtime.num_gpus on GPUs; on CPU per system)")
    sp.add_argument("--sessions", action="store_true",
                    help="over the users of an agentic replay instead: one RunSessions per sessions.users level "
                         "(default levels up to sessions.users)")
    sp.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="measure every point N times: each number is the median [interval] of its repeats, the plot "
                         "draws the intervals, and `~` marks points the noise cannot tell from the front")
    sp.add_argument("--converge", type=float, default=0.0, metavar="W",
                    help="with --repeat: a point stops once its tokens/s median is known within +-W at 95%%")
    sp.add_argument("--no-accuracy", action="store_true",
                    help="measure each level's performance only (PerformanceRun points: no accuracy run, whose key "
                         "covers the level, so a FullRun point runs one per level); --url and --sessions run none")
    sp.add_argument("--keep-servers", action="store_true", help="leave the servers running afterwards")
    sp.add_argument("--verbose", action="store_true", help="show third-party warnings and chatter")


def levels(args) -> str:
    """--levels or --concurrency (one of them); --request-rate refused, saying why."""
    if args.request_rate:
        raise InputError(f"--request-rate {args.request_rate}: a frontier's points are closed-loop concurrency levels "
                         "(--levels or --concurrency); measure rates with bench --request-rate or search --request-rate")
    if args.concurrency and args.levels:
        raise InputError("--concurrency and --levels: the same levels, given twice; drop one")
    return args.concurrency or args.levels


def run(args) -> int:
    try:
        flow = SessionsFrontier if args.sessions else Frontier
        given = ",".join((server_items(args) if args.url else []) + ([args.overrides] if args.overrides else []))
        task = flow(params_file=args.params_file, overrides=given, endpoint=bool(args.url), levels=levels(args),
                        max_level=args.max_level, engines=args.engines, gpus=args.gpus, repeat=args.repeat,
                        converge=args.converge, no_accuracy=args.no_accuracy,
                        keep_servers=args.keep_servers, verbose=args.verbose)
        task.definition  # noqa: B018  every point's parameters checked before any stage runs
    except PerfdagError as e:
        print(e)
        return 2
    return build_flow(task, "the frontier did not finish; see the log above (a rerun reuses every point it measured)")
