"""Endpoints of servers launched elsewhere (multi-node): `host:port` lists, or NVIDIA's
`host_a:8001,8002|host_b:8001` form, parsed and checked before any stage runs; and the endpoints
and protocol of published server records (what LoadGen's SUT and the session workload talk to)."""
from __future__ import annotations

import re
from typing import Sequence

# A host name or a bracketed IPv6 address: what every endpoint list in the params accepts.
HOST_PATTERN = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]"
_HOST = re.compile(rf"^(?:{HOST_PATTERN})$")
_FORMS = "expected 'host:port', 'host:port1,port2' or NVIDIA's 'host_a:8001,8002|host_b:8001'"


def parse_endpoints(spec: str | Sequence[str]) -> list[str]:
    """['host:port', ...] from a list of them and/or NVIDIA's 'host_a:8001,8002|host_b:8001' form."""
    items = [spec] if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for item in items:
        item = str(item)
        for group in item.split("|"):
            group = group.strip()
            where = f"triton.endpoints: {group!r}" + (f" in {item!r}" if group != item else "")
            if not group:
                raise ValueError(f"triton.endpoints: empty host entry in {item!r}; {_FORMS}")
            host, sep, ports = group.rpartition(":")
            if not sep or not host:
                raise ValueError(f"{where} has no host:port; {_FORMS}")
            if not _HOST.match(host):
                hint = " (IPv6 addresses go in brackets: [::1]:8001)" if ":" in host else ""
                raise ValueError(f"{where}: {host!r} is not a host name{hint}; {_FORMS}")
            for port in ports.split(","):
                port = port.strip()
                if not port.isdigit() or not 1 <= int(port) <= 65535:
                    raise ValueError(f"{where}: port {port!r} is not a number in 1..65535; {_FORMS}")
                ep = f"{host}:{int(port)}"
                if ep in out:
                    raise ValueError(f"{where}: {ep} is listed twice; give each server once")
                out.append(ep)
    return out


def endpoint_problems(spec: str | Sequence[str]) -> list[str]:
    """parse_endpoints' complaint per entry (empty: every entry parses)."""
    items = [spec] if isinstance(spec, str) else list(spec)
    problems, seen = [], []
    for item in items:
        try:
            for ep in parse_endpoints(item):
                if ep in seen:
                    problems.append(f"triton.endpoints: {ep} is listed twice; give each server once")
                seen.append(ep)
        except ValueError as e:
            problems.append(str(e))
    return problems


def endpoints_and_models(servers: list[dict]) -> tuple[list[str], list[str]]:
    """One (endpoint, model) pair per engine instance, so the SUT spreads over all of them."""
    eps, names = [], []
    for s in servers:
        for m in s["models"]:
            eps.append(f"{s['host']}:{s.get('port', s.get('grpc_port'))}")
            names.append(m)
    return eps, names


def protocol_of(servers: list[dict]) -> str:
    protocols = {s.get("protocol", "triton-grpc") for s in servers}
    if len(protocols) != 1:
        raise ValueError(f"servers speak different protocols: {sorted(protocols)}")
    return protocols.pop()
