"""The LoadGen driver's frontends on other nodes (harness.client_nodes): their host processes, links
and clocks, from the driver's side.

The caller names each client node and the command that starts a process there (`srun --overlap
--nodelist=<node> ...`, built by client_nodes.py; any command that reaches the node will do). The
driver listens on its node's address at a free port, starts one host process per node
(client_host.py) and gives it the run's key on its stdin. Each host connects back, gets its
frontends' clients, the prompts and the settings, measures its clock offset, and starts its
frontends; each frontend opens its own link. The run waits until every link is in (or a host's
command ends first: named with its node). From then on a link is a frontend's pipe pair: queries
go out on it, completions come back on it. After the run each host measures its offset again and
leaves.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

from harness.loadgen import links


class RemoteError(Exception):
    """A client node's host or its frontends could not join the run."""


class NodeProcess:
    """A frontend on another node as the driver's watchdog sees it: its node's host command (the
    frontend is gone when that ends)."""

    def __init__(self, node: str, proc: subprocess.Popen):
        self.node, self.proc, self.pid = node, proc, proc.pid

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def join(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()


class RemoteFrontends:
    def __init__(self, nodes: list[dict], listen: str, init: dict):
        """`nodes`: [{"node": name, "frontends": [indexes], "argv": [command starting a host there]}];
        `listen`: this node's address as the other nodes reach it; `init`: what each host is sent
        besides its frontends' clients ({"cfg": ..., "prompts": ...})."""
        self.nodes = nodes
        self.init = init
        self.expected = {fe for n in nodes for fe in n["frontends"]}
        self.key = os.urandom(links.KEY_BYTES)
        self.sock = links.listen(listen)
        self.address = f"{listen}:{self.sock.getsockname()[1]}"
        self.links: dict[int, Connection] = {}
        self.hosts: dict[int, Connection] = {}
        self.clocks: dict[str, dict] = {}     # node -> {"start": report, "end": report}
        self.host_node: dict[int, str] = {}
        self.procs: dict[str, NodeProcess] = {}
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.closed = False

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._accept_loop, name="remote-accept", daemon=True).start()
        for i, n in enumerate(self.nodes):
            # its output goes to the driver's stderr (harness.log)
            proc = subprocess.Popen([*n["argv"], self.address, str(i)], stdin=subprocess.PIPE,
                                    stdout=sys.stderr.fileno(), stderr=sys.stderr.fileno())
            try:
                proc.stdin.write(self.key.hex().encode() + b"\n")
            except BrokenPipeError:  # a command that ended at once: wait_connected names it
                pass
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            self.procs[n["node"]] = NodeProcess(n["node"], proc)

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                peer = links.accept(self.sock)
            except OSError:
                return  # closed
            threading.Thread(target=self._greet, args=(peer,), name="remote-greet", daemon=True).start()

    def _greet(self, peer) -> None:
        """Authenticates a peer (a stranger, or a peer that stalls, holds only this thread) and files it."""
        try:
            conn = links.opened(peer, self.key)
            hello = conn.recv()
        except Exception:  # noqa: BLE001 - a wrong key, a port scanner: not ours
            return
        if hello[0] == "frontend" and hello[1] in self.expected:
            with self.changed:
                self.links.setdefault(hello[1], conn)
                self.changed.notify_all()
        elif hello[0] == "host" and 0 <= hello[1] < len(self.nodes):
            self._serve_host(hello[1], conn)

    def _serve_host(self, i: int, conn: Connection) -> None:
        """A host's link: its frontends' setup, then its clock exchanges and reports until it leaves."""
        node = self.nodes[i]
        clients = {fe: [c for c in self.init["cfg"]["clients"] if c["frontend"] == fe] for fe in node["frontends"]}
        with self.send_lock:
            conn.send(("init", self.init["cfg"], self.init["prompts"], clients))
        with self.changed:
            self.hosts[i] = conn
        while True:
            try:
                msg = conn.recv_bytes()
            except (EOFError, OSError):
                return
            if msg == links.PING:
                with self.send_lock:
                    links.answer_ping(conn)
                continue
            report = json.loads(msg)
            with self.changed:  # by the node the host says it runs on, as its frontends name theirs
                self.clocks.setdefault(report.get("node") or node["node"], {})[report.pop("at")] = report
                self.host_node[i] = report.get("node") or node["node"]
                self.changed.notify_all()

    def wait_connected(self, timeout_s: float) -> dict[int, Connection]:
        """Every remote frontend's link, by frontend; raises RemoteError naming the node whose host
        command ended first, or what is missing at the timeout."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while set(self.links) != self.expected:
                for n in self.nodes:
                    p = self.procs[n["node"]]
                    if p.exitcode is not None and not set(n["frontends"]) <= set(self.links):
                        raise RemoteError(f"the client host on node {n['node']} exited with code {p.exitcode} before "
                                          f"its frontends {n['frontends']} joined (command: {' '.join(n['argv'])}); "
                                          "its output is above in harness.log")
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(self.expected - set(self.links))
                    raise RemoteError(f"frontends {missing} on other nodes did not connect to the driver at "
                                      f"{self.address} within {timeout_s:.0f}s (harness.client_nodes)")
                self.changed.wait(min(left, 0.5))
            return dict(self.links)

    def process_of(self, fe: int) -> NodeProcess:
        return next(self.procs[n["node"]] for n in self.nodes if fe in n["frontends"])

    # -- end -----------------------------------------------------------------------------------
    def finish(self, timeout_s: float = 30.0) -> None:
        """After the run: each host measures its offset again, then leaves; its command is waited for."""
        with self.changed:
            hosts = dict(self.hosts)
        for conn in hosts.values():
            with contextlib.suppress(OSError), self.send_lock:
                conn.send_bytes(links.SYNC)
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while any("end" not in self.clocks.get(self.host_node.get(i, ""), {}) for i in hosts):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(min(left, 0.5))
        for p in self.procs.values():
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                sys.stderr.write(f"the client host on node {p.node} did not leave; killing it\n")
                p.kill()
        self.close()

    def kill(self) -> None:
        for p in self.procs.values():
            p.kill()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept loop (Linux)
        with contextlib.suppress(OSError):
            self.sock.close()
