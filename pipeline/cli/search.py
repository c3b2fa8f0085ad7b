"""`python -m pipeline search`: FindMaxLoad, the highest load that stays VALID or meets an SLO (the flow
is pipeline/search.py, the plan harness/search/). Its flags are the params' search.* keys; the load flags
(`--concurrency`, `--request-rate`) choose the loop as bench's do, and the mapping is printed."""
from __future__ import annotations

from harness.errors import InputError, PerfdagError
from pipeline.cli.bench import add_server_flags, server_items
from pipeline.cli.flow import build_flow
from pipeline.search import FindMaxLoad
from pipeline.sweep import Sweep
from tasks.settings import DEFAULT_PARAMS

#: flag -> the search.* key it sets (after --overrides)
FLAGS = {"slo": "slo", "axis": "axis", "start": "start", "tolerance": "tolerance",
         "probe_min_duration_ms": "probe_min_duration_ms", "probe_min_query_count": "probe_min_query_count",
         "repeat": "repeats", "retries": "retries"}


def add_parser(sub) -> None:
    sp = sub.add_parser("search", help="the highest server_target_qps (or concurrency) that stays VALID or meets an SLO",
                        description="Brackets then bisects the load over cached RunLoadgen probes, confirms the "
                                    "found load with a FullRun at full settings (with --url: the running server, "
                                    "no model stages, a Bench confirms), and writes search.md, a params "
                                    "file and the user.conf line. With --sweep or --grid, one search per point and a table "
                                    "naming the best. Exit 0: found and confirmed; 10: nothing passed or the "
                                    "confirmation was INVALID; 11: its accuracy FAILed (a sweep's points are "
                                    "results in its table: it exits 0 when every search ran).")
    add_server_flags(sp)
    sp.add_argument("--params-file", default=DEFAULT_PARAMS)
    sp.add_argument("--overrides", default="")
    sp.add_argument("--slo", help="e.g. 'ttft_p99_ms<=500,tpot_p99_ms<=40' (default: LoadGen's verdict)")
    sp.add_argument("--axis", choices=("auto", "server_target_qps", "max_in_flight"))
    sp.add_argument("--start", type=float, help="the first load probed (default: the params' own)")
    sp.add_argument("--tolerance", type=float, help="the bracket's final width over its low end (default 0.02)")
    sp.add_argument("--probe-min-duration-ms", type=int, help="each probe's loadgen.min_duration_ms")
    sp.add_argument("--probe-min-query-count", type=int, help="each probe's loadgen.min_query_count")
    sp.add_argument("--repeat", type=int, metavar="N", help="runs of a load near the knee (search.repeats, default "
                                                            "3): it passes only if every run does")
    sp.add_argument("--retries", type=int, metavar="N", help="further runs, per search, of loads whose runs disagree "
                                                             "(search.retries, default 3): how sure the knee is")
    sp.add_argument("--sweep", default="", help="search every point of this sweep file (the table names the best)")
    sp.add_argument("--grid", default="", help="search every point of these axes, e.g. 'build.max_batch_size=4,8' "
                                               "(with --sweep, added to its grid)")
    sp.add_argument("--no-accuracy", action="store_true",
                    help="confirm the found load with a PerformanceRun (performance only: no accuracy run); "
                         "--overrides search.confirm=false skips the confirmation; --url confirms with a Bench")
    sp.add_argument("--keep-servers", action="store_true", help="leave the servers running afterwards")
    sp.add_argument("--verbose", action="store_true", help="show third-party warnings and chatter")
    load = sp.add_argument_group("load", "which loop is searched, as bench's flags choose it (the mapping is printed); "
                                         "the search picks the loads, so each takes one starting value at most")
    load.add_argument("--concurrency", nargs="?", const="", default=None, metavar="N",
                      help="search the closed loop's concurrency: LoadGen Offline, search.axis=max_in_flight "
                           "(harness.max_in_flight), from N (search.start) where given; needs --slo")
    load.add_argument("--request-rate", nargs="?", const="", default=None, metavar="R",
                      help="search the open loop's rate: LoadGen Server, search.axis=server_target_qps (Poisson "
                           "arrivals, LoadGen's only kind), from R requests/s (search.start) where given")


def load_items(args) -> tuple[str, list[str]]:
    """The load flag as (its label, the overrides it maps to); ("", []) where none is given. Contradictory
    flags are refused, each named."""
    given = [(flag, value) for flag, value in (("--concurrency", args.concurrency),
                                               ("--request-rate", args.request_rate)) if value is not None]
    if not given:
        return "", []
    if len(given) > 1:
        raise InputError("--concurrency and --request-rate: a search searches one loop (closed: Offline; open: Server)")
    (flag, value), = given
    scenario, axis = ("Offline", "max_in_flight") if flag == "--concurrency" else ("Server", "server_target_qps")
    if args.axis not in (None, "auto", axis):
        raise InputError(f"{flag} searches search.axis={axis}; --axis {args.axis} contradicts it: drop one")
    items = [f"loadgen.scenario={scenario}", f"search.axis={axis}"]
    if value:
        if "," in value:
            raise InputError(f"{flag} {value}: a search chooses the loads it probes; give one starting value (or "
                             "none). To measure a list: bench " + flag + (" or frontier --levels" if axis ==
                                                                          "max_in_flight" else ""))
        try:
            start = (int if axis == "max_in_flight" else float)(value)
        except ValueError:
            start = 0
        if not start > 0:
            raise InputError(f"{flag}: {value!r} is not a positive {'whole ' if axis == 'max_in_flight' else ''}number")
        if args.start is not None:
            raise InputError(f"{flag} {value} and --start {args.start:g}: both give the first load; drop one")
        items.append(f"search.start={start:g}")
    return f"{flag}{' ' + value if value else ''}", items


def overrides(args, load: list[str] = ()) -> str:
    """--url's server flags first, then the load flags' settings, then --overrides (they win over both),
    then the search flags (they win)."""
    parts = (server_items(args) if args.url else []) + list(load) + ([args.overrides] if args.overrides else [])
    parts += [f"search.{key}={getattr(args, flag)}" for flag, key in FLAGS.items() if getattr(args, flag) is not None]
    return ",".join(parts)


def run(args) -> int:
    try:
        label, load = load_items(args)
        if label:
            print(f"search: {label} -> {', '.join(load)}")
        if args.sweep or args.grid:  # one search per point: a Sweep with search=true
            task = Sweep(sweep=args.sweep, grid=args.grid, search=True, params_file=args.params_file,
                         overrides=overrides(args, load), endpoint=bool(args.url), keep_servers=args.keep_servers,
                         no_accuracy=args.no_accuracy, verbose=args.verbose)
            task.definition  # its points' problems, before anything runs
        else:
            task = FindMaxLoad(params_file=args.params_file, overrides=overrides(args, load), endpoint=bool(args.url),
                               no_accuracy=args.no_accuracy, keep_servers=args.keep_servers, verbose=args.verbose)
    except PerfdagError as e:
        print(e)
        return 2
    return build_flow(task, "the search did not finish; see the log above (a rerun resumes from the probes it measured)")
