"""OpenAI-compatible servers launched elsewhere: `openai.endpoints` as `http://host:port` or `host:port`."""
from __future__ import annotations

import re
from typing import Sequence

from harness.serving.endpoints import HOST_PATTERN

_EP = re.compile(rf"^(?:http://)?(?P<host>{HOST_PATTERN}):(?P<port>\d{{1,5}})/?$")
_FORM = "expected 'http://host:port' or 'host:port' (https is not supported)"


def parse_endpoints(items: Sequence[str]) -> list[str]:
    """['host:port', ...]; ValueError naming the entry that is not one."""
    out = []
    for item in items:
        m = _EP.match(str(item).strip())
        if not m or not 1 <= int(m["port"]) <= 65535:
            raise ValueError(f"openai.endpoints: {item!r} is not a server address; {_FORM}")
        ep = f"{m['host']}:{int(m['port'])}"
        if ep in out:
            raise ValueError(f"openai.endpoints: {ep} is listed twice; give each server once")
        out.append(ep)
    return out


def endpoint_problems(items: Sequence[str]) -> list[str]:
    try:
        parse_endpoints(items)
        return []
    except ValueError as e:
        return [str(e)]
