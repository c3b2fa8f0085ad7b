"""Run inside a two-node Slurm job by tests/test_multinode_slurm.py (not a test module): a disaggregated
layout of echo instances (context, generation) and the echo router, placed by serving/layout.py and
launched by serving/launcher.launch_in_order, each instance on its node through `srun --overlap`.

    python tests/multinode_layout_job.py OUT_DIR

Writes OUT_DIR/records.json once every instance is ready (workers before the router), then holds
them until SIGTERM (scancel), when it stops them.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from harness.config.layout import LayoutSection
from harness.serving.launcher import launch_in_order, stop_recorded
from harness.serving.layout import LAUNCH_ORDER, node_targets, place, placed
from harness.serving.ports import server_ports
from harness.serving.spec import LaunchSpec

REPO = Path(__file__).resolve().parent.parent
ECHO = [sys.executable, "-m", "harness.serving.testing.echo_openai", "--token-delay-ms", "2"]
ROUTER = [sys.executable, "-m", "harness.serving.testing.echo_router"]


def main(out: Path) -> None:
    layout = LayoutSection(nodes=2, roles={"context": {"count": 1, "gpus_per_instance": 0},
                                           "generation": {"count": 1, "gpus_per_instance": 0},
                                           "router": {"gpus_per_instance": 0}})
    instances = place(layout)
    targets = node_targets(layout, "127.0.0.1", "openai.bind")
    ports = [t[0] for t in server_ports(len(instances), "127.0.0.1", [], per_server=1)]
    addr = {i.name: f"{targets[i.nodes[0]][1]}:{p}" for i, p in zip(instances, ports)}
    specs = []
    for k, (inst, port) in enumerate(zip(instances, ports)):
        if inst.role == "router":
            argv = ROUTER + ["--port", str(port), "--context", *[addr[i.name] for i in instances if i.role == "context"],
                             "--generation", *[addr[i.name] for i in instances if i.role == "generation"]]
        else:
            argv = ECHO + ["--port", str(port)]
        specs.append(LaunchSpec(index=k, argv=argv, host="127.0.0.1", ports={"serve": port}, models=("",),
                                protocol="openai-http", mode="echo", cwd=str(REPO)))
    specs = placed(specs, instances, targets)
    groups = [[s for s in specs if s.role in stage] for stage in LAUNCH_ORDER]
    events = []

    def log(line: str) -> None:
        events.append([time.time(), line])
        print(line, flush=True)

    records = launch_in_order(groups, out, root=out, ready_timeout_s=60, warmup_prompt=[1, 2, 3, 4], streaming=True, log=log)
    (out / "records.json").write_text(json.dumps({"records": records, "events": events}))
    log("layout ready")

    def stop(signum, frame):
        stop_recorded(records, timeout=5.0)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
