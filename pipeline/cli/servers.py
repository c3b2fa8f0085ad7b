"""`python -m pipeline servers list|stop`: the server processes perfdag has recorded, and who uses them.

Records come from the server registry (written the moment a process exists, so servers of a killed
launch are listed too) and from published LaunchServers artifacts. Both are untrusted input
(harness/serving/records.py): a malformed record is reported, one line naming its file, and acted on
in no way; a process is stopped only when it carries the launch token its record names.
"""
from __future__ import annotations

import json

from harness.serving.elsewhere import running_elsewhere
from harness.serving.registry import ServerRegistry, list_servers, stop_servers
from tasks import LaunchServers
from tasks.settings import DEFAULT_PARAMS, artifacts_root


def add_parser(sub) -> None:
    sv = sub.add_parser("servers", help="list or stop the tritonserver processes perfdag started")
    sv.add_argument("action", choices=["list", "stop"])
    sv.add_argument("--all", action="store_true", help="stop: every recorded server, not just this params' ones")
    sv.add_argument("--params-file", default=DEFAULT_PARAMS)
    sv.add_argument("--overrides", default="")
    sv.add_argument("--json", action="store_true")


def run(args) -> int:
    if args.action == "list":
        rows = list_servers(artifacts_root())
        if args.json:
            print(json.dumps(rows, indent=2))
        elif not rows:
            print("no servers recorded")
        for r in rows if not args.json else []:
            kind = "external" if r["external"] else f"pid {r['pid']}"
            who = ("held by " + ", ".join(r["held_by"])) if r["held_by"] else "no run holds it"
            print(f"{r['key']}  {kind:>12}  {r['address']:<22} {r['state']:<7} {','.join(r['models'])}  "
                  f"{who}{'  (kept)' if r['kept'] else ''}")
        return 0
    key16 = None if args.all else LaunchServers(params_file=args.params_file, overrides=args.overrides).key[:16]
    stopped = stop_servers(artifacts_root(), key16)
    print(f"stopped {len(stopped)} server(s)" + (f": pids {', '.join(map(str, stopped))}" if stopped else ""))
    for r in ServerRegistry(artifacts_root()).records(key16):
        if running_elsewhere(r):  # a Sweep's array task on another node launched it: that node's to stop
            print(f"left {r['key16']} pid {r.get('pid')} on {r['node']}: Slurm job {r['launch_job']} launched it "
                  f"there and stops it when no run uses it (scancel {r['launch_job']} ends it now)")
    return 0
