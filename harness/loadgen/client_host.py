"""A client node's host process: the LoadGen driver's frontends on this node (harness.client_nodes).

    <a command reaching the node> python -m harness.loadgen.client_host DRIVER_HOST:PORT INDEX < key

Started by the driver (remote.py), one per client node, with the run's key on its stdin. It
connects back to the driver, gets its frontends' clients, the prompts and the run's settings,
measures the clock offset to the driver (links.py), and starts one process per frontend: each
opens its own link to the driver and runs frontend.frontend_main on it as a local frontend runs on
its pipes, its times moved onto the driver's clock. After the run the driver asks for the offset
again; then the host waits for its frontends and leaves. When the driver's link closes (the driver
is gone), it ends its frontends and itself; they die with it (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sys

from harness.loadgen import links
from harness.loadgen.frontend import frontend_main
from harness.serving.processes import pdeathsig_setter
from harness.serving.spec import this_node


def _frontend(fe: int, specs: list, cfg: dict, prompts, address: tuple[str, int], key: bytes, offset: int,
              host_pid: int) -> None:
    conn = links.connect(address, key)
    conn.send(("frontend", fe))
    frontend_main(fe, specs, cfg, prompts, conn, conn, host_pid, clock_offset_ns=offset)


def _report(conn, at: str, offset: int, rtt: int) -> None:
    conn.send_bytes(json.dumps({"at": at, "offset_ns": offset, "rtt_ns": rtt, "node": this_node()}).encode())


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m harness.loadgen.client_host DRIVER_HOST:PORT INDEX < key (internal)\n")
        return 2
    setter = pdeathsig_setter(signal.SIGTERM)  # srun, or whatever started us, went: so do we
    if setter is not None:
        setter()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver ends the run
    host, _, port = argv[0].rpartition(":")
    address = (host.strip("[]"), int(port))
    key = bytes.fromhex(sys.stdin.readline().strip())
    conn = links.connect(address, key)
    conn.send(("host", int(argv[1])))
    _, cfg, prompts, frontends = conn.recv()
    offset, rtt = links.measure_offset(conn)
    _report(conn, "start", offset, rtt)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_frontend, name=f"perfdag-frontend-{fe}", daemon=True,
                         args=(fe, specs, cfg, prompts, address, key, offset, os.getpid()))
             for fe, specs in frontends.items()]
    for p in procs:
        p.start()
    rc = 0
    while True:
        if conn.poll(0.5):
            try:
                msg = conn.recv_bytes()
            except (EOFError, OSError):
                sys.stderr.write(f"client host on {this_node()}: the driver's link closed; ending its frontends\n")
                rc = 3
                break
            if msg == links.SYNC:
                _report(conn, "end", *links.measure_offset(conn))
                break
        failed = [p for p in procs if p.exitcode not in (None, 0)]
        if failed:
            sys.stderr.write(f"client host on {this_node()}: frontend process {failed[0].name} exited with code "
                             f"{failed[0].exitcode}\n")
            rc = 3
            break
    for p in procs:
        p.join(10.0 if rc == 0 else 0.0)
        if p.is_alive():
            p.kill()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
