"""Free TCP ports, picked at launch time and checked distinct."""
from __future__ import annotations

import contextlib
import socket
from typing import Callable, Iterable, Sequence


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral TCP port that was free a moment ago (bind to 0, read, close)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = "127.0.0.1", taken: Iterable[int] = (),
               pick: Callable[[str], int] = free_port) -> list[int]:
    """`n` free ports, distinct from each other and from `taken`: the kernel may hand the same
    ephemeral port out twice in a row once the probing socket is closed."""
    out: list[int] = []
    taken = set(taken)
    while len(out) < n:
        p = pick(host)
        if p not in taken:
            taken.add(p)
            out.append(p)
    return out


def server_ports(n: int, host: str = "127.0.0.1", fixed: Sequence[int] = (), per_server: int = 3,
                 pick: Callable[[str], int] = free_port) -> list[tuple[int, ...]]:
    """`per_server` distinct ports per server (Triton: gRPC, HTTP, metrics); the first of each is
    taken from `fixed` when given, the rest are free ones."""
    extra = per_server - 1
    picked = free_ports((0 if fixed else n) + extra * n, host, taken=fixed, pick=pick)
    first, rest = (list(fixed), picked) if fixed else (picked[:n], picked[n:])
    return [(first[i], *rest[extra * i: extra * (i + 1)]) for i in range(n)]


def port_in_use(host: str, port: int) -> bool:
    """True when `host:port` cannot be bound (someone listens or holds it).

    SO_REUSEADDR (as servers use it), so a port merely in TIME_WAIT does not count as taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError:
            return True
    with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=0.2):
        return True
    return False


def port_count_problems(field: str, ports, n: int, why: str = "") -> list[str]:
    """`field` (a list of ports) names one port per server, or none (free ports are picked)."""
    if ports and len(ports) != n:
        return [f"{field}: {len(ports)} ports for {n} server(s){why}; give one per server or none to pick free ports"]
    return []


def free_blocks(sizes: Sequence[int], host: str = "127.0.0.1", taken: Iterable[int] = (),
                pick: Callable[[str], int] = free_port, in_use: Callable[[str, int], bool] | None = None
                ) -> list[int]:
    """The first port of a block of `size` consecutive free ports for each size, no two blocks (nor
    `taken`) overlapping: a stack that binds base + rank per rank (vLLM's NIXL side channel, Mooncake's
    bootstrap) needs the whole block."""
    in_use = in_use or port_in_use
    used, out = set(taken), []
    for size in sizes:
        while True:
            base = pick(host)
            block = range(base, base + size)
            if base + size <= 65536 and not used.intersection(block) and \
                    not any(in_use(host, q) for q in block[1:]):
                used.update(block)
                out.append(base)
                break
    return out
