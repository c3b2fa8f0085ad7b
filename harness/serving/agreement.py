"""A measurement goes only where the parameters say: server records checked against them.

A LaunchServers artifact's records (servers.json, and the manifest's copy) lie under the root, and
whoever can write there can point a record at an impostor. So what the parameters decide is never
taken from a record: an external server's address is the parameters' own (`external_records`), and
a record whose `external` flag, protocol, address or models disagree with the parameters is refused,
named on one line, and nothing is measured through it (`disagreements`). A record of a server perfdag
launched on this host must also name a process of this root that listens where the record says
(`not_listening`): a record that keeps a real server's pid and token and changes the port to an
impostor's is refused too.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Sequence

from harness.serving.launcher import is_ours
from harness.serving.private import PLACEHOLDER, PrivateDirError, private_dir
from harness.serving.processes import TOKEN, labels
from harness.serving.spec import on_this_host


@dataclass(frozen=True)
class Expected:
    """What the parameters (and so the key) say a launch's servers are."""

    external: bool                      # endpoints in the parameters: servers perfdag did not launch
    protocol: str                       # a record of serving/protocols.py
    models: tuple[str, ...]             # the model names its servers serve (each serves some of them)
    endpoints: tuple[str, ...] = ()     # external: 'host:port', the parameters' own, in order
    bind: str | None = None             # launched: the address they listen on (None: a layout places them)
    ports: tuple[int, ...] = ()         # launched: the ports the parameters fix (empty: picked free)
    port_field: str = "port"            # which recorded port `ports` fixes (Triton: grpc_port)


def external_records(expected: Expected) -> list[dict]:
    """The records of external servers, from the parameters alone (no record under the root is read)."""
    out = []
    for ep in expected.endpoints:
        host, _, port = ep.rpartition(":")
        rec = {"external": True, "host": host, "port": int(port), "protocol": expected.protocol,
               "models": list(expected.models)}
        if expected.protocol == "triton-grpc":
            rec["grpc_port"] = int(port)
        out.append(rec)
    return out


def _address(rec: dict) -> str:
    return f"{rec.get('host')}:{rec.get('port', rec.get('grpc_port'))}"


def _ip(host) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address as an IP (an IPv4 one mapped into IPv6, as a dual-stack listener shows it, as IPv4)."""
    try:
        ip = ipaddress.ip_address(str(host).strip("[]"))
    except ValueError:
        return None
    return getattr(ip, "ipv4_mapped", None) or ip


def _wildcard(host: str | None) -> bool:
    ip = _ip(host)
    return ip is not None and ip.is_unspecified


def _same_address(listening: str, recorded: str) -> bool:
    """A socket listening at `listening` serves clients of `recorded` (a wildcard one serves every address;
    a recorded host name, which a bind never is, is taken as any)."""
    a, b = _ip(listening), _ip(recorded)
    return b is None or a == b or _wildcard(listening) or _wildcard(recorded)


def disagreements(records: Sequence[dict], expected: Expected) -> list[str]:
    """One line per way the records disagree with the parameters (empty: they agree)."""
    out = []
    if expected.external:
        want = external_records(expected)
        if len(records) != len(want):
            out.append(f"{len(records)} server(s) recorded, the parameters name {len(want)} endpoint(s)")
        for i, (rec, exp) in enumerate(zip(records, want)):
            if not rec.get("external"):
                out.append(f"server {i} says perfdag launched it (pid {rec.get('pid')}); the parameters name an "
                           f"external endpoint, {_address(exp)}")
            elif (rec.get("host"), rec.get("port", rec.get("grpc_port"))) != (exp["host"], exp["port"]):
                out.append(f"server {i} is recorded at {_address(rec)}; the parameters name {_address(exp)}")
        return out + _protocol_and_models(records, expected)
    for i, rec in enumerate(records):
        if rec.get("external"):
            out.append(f"server {i} says `external: true` at {_address(rec)}; the parameters launch the servers "
                       "(no endpoints)")
            continue
        host = rec.get("host")
        if expected.bind is not None and host != expected.bind and not _wildcard(expected.bind):
            out.append(f"server {i} is recorded at {_address(rec)}; the parameters bind {expected.bind}")
        if expected.ports and rec.get(expected.port_field) not in expected.ports:
            out.append(f"server {i}'s {expected.port_field} is {rec.get(expected.port_field)}; the parameters fix "
                       f"{', '.join(map(str, expected.ports))}")
    return out + _protocol_and_models(records, expected)


def _protocol_and_models(records: Sequence[dict], expected: Expected) -> list[str]:
    out = []
    for i, rec in enumerate(records):
        if rec.get("protocol", "triton-grpc") != expected.protocol:
            out.append(f"server {i} speaks {rec.get('protocol', 'triton-grpc')}; the parameters say {expected.protocol}")
        models = rec.get("models") or []
        if not models or not all(_serves(m, rec, expected.models) for m in models):
            out.append(f"server {i} serves {models}; the parameters say {list(expected.models)}")
    return out


def _serves(model: str, rec: dict, expected: Sequence[str]) -> bool:
    """`model` is one the parameters name; PLACEHOLDER among them stands for a path in the record's own
    private directory (a model its requests name by path), which holds only verified copies and pins."""
    if model in expected:
        return True
    if PLACEHOLDER not in expected or not isinstance(model, str) or not TOKEN.fullmatch(str(rec.get("token"))):
        return False
    try:
        where = str(private_dir(rec["token"]))
    except PrivateDirError:
        return False
    return model.startswith(where + os.sep) and ".." not in model.split(os.sep)


def _listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every socket the process listens on (empty when it cannot be read)."""
    import psutil

    try:
        p = psutil.Process(pid)
        conns = (getattr(p, "net_connections", None) or p.connections)(kind="inet")
    except (psutil.Error, OSError):
        return set()
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN and c.laddr}


def serves_at(rec: dict) -> bool:
    """The recorded process (or one it started, carrying its launch token: mpirun's ranks) listens on the
    recorded port, at the recorded address or a wildcard one."""
    import psutil

    pid, port, host = rec.get("pid"), rec.get("port", rec.get("grpc_port")), str(rec.get("host", ""))
    family = [pid]
    try:
        family += [c.pid for c in psutil.Process(pid).children(recursive=True) if labels(c.pid)[0] == rec.get("token")]
    except psutil.Error:
        return False
    for p in family:
        for ip, lport in _listening(p):
            if lport == port and _same_address(ip, host):
                return True
    return False


def not_listening(records: Sequence[dict]) -> list[str]:
    """One line per record of a server perfdag launched here (not through `srun` on another node) whose
    process is not this root's, or does not listen where the record says."""
    out = []
    for i, rec in enumerate(records):
        if rec.get("external") or not on_this_host(rec) or rec.get("instance_node"):
            continue  # a server placed on another node: its srun client is what runs here
        if not is_ours(rec):
            out.append(f"server {i}'s pid {rec.get('pid')} is not a server this root launched")
        elif not serves_at(rec):
            out.append(f"server {i} (pid {rec.get('pid')}) does not listen at {_address(rec)}")
    return out
