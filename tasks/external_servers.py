"""ExternalServers: OpenAI-compatible servers that run already (`openai.endpoints`), checked ready.

What `pipeline bench` measures: nothing is built or launched, so no model stage runs. Its key is
the endpoints, the server kind and the model name requests carry; it is usable while every server
answers ready, so a server gone since is checked again (and a measurement refused) instead of
measured blind. perfdag never stops these servers.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.backends import backend_for
from harness.backends.openai.endpoints import parse_endpoints
from harness.backends.openai.servers import served_name
from harness.cache.versions import versions
from harness.config.resolve import ParamsError
from harness.errors import ServingError
from harness.serving.agreement import Expected, disagreements, external_records
from harness.serving.launcher import external_servers, servers_live
from harness.serving.records import read_servers
from harness.untrusted.records import ignored
from tasks.base import StageTask

SERVERS_FILE = "servers.json"
PROTOCOL = "openai-http"


def endpoint_problems(p, tokenizer: bool = True) -> list[str]:
    """Why these parameters cannot measure a running server without the model stages (`tokenizer`: the
    measurement tokenizes its dataset; a session replay sends the recorded text)."""
    out = []
    if not backend_for(p).launch.serves_elsewhere(p):
        out.append("openai.endpoints: measuring a running server needs build.backend=openai and openai.endpoints "
                   "naming it (e.g. http://127.0.0.1:8000)")
    if tokenizer and not p.dataset.tokenizer:
        out.append("dataset.tokenizer: name the served model's tokenizer directory (there is no model stage)")
    return out


def check_endpoint_params(p, tokenizer: bool = True) -> None:
    if problems := endpoint_problems(p, tokenizer):
        raise ParamsError(problems)


class ExternalServers(StageTask):  # not in STAGES: only Bench builds it, on pipeline bench's parameters
    stage = "ExternalServers"
    reads = ("openai.endpoints", "openai.server", "openai.model", "model.name")
    volatile = (SERVERS_FILE,)  # the servers' state, not content: a later check rewrites nothing measured

    def tools(self):
        return versions("httpx")

    def code(self):  # what its record says: the addresses and the model name requests carry
        return ("harness.backends.openai.endpoints", "harness.backends.openai.servers")

    def expected(self) -> Expected:
        p = self.params
        return Expected(external=True, protocol=PROTOCOL, models=(served_name(p),),
                        endpoints=tuple(parse_endpoints(p.openai.endpoints)))

    def servers(self) -> list[dict]:
        """The servers, from the parameters (the key): a published servers.json that names another
        address is named on one line and measured through never ([] until the next check rewrites it)."""
        path = self.artifact_dir / SERVERS_FILE
        recs = read_servers(path, self.store.root, inside=self.artifact_dir)
        if recs is None:
            return []
        if why := disagreements(recs, self.expected()):
            ignored(path, "; ".join(why) + "; perfdag measures nothing through it (the next run checks the "
                                           "endpoints again)")
            return []
        return external_records(self.expected())

    def measured_servers(self) -> list[dict]:
        if not (recs := self.servers()):
            raise ServingError(f"ExternalServers {self.key[:16]}: not measuring: no server record agrees with "
                               "openai.endpoints (see the line above); rerun to check them again")
        return recs

    def usable(self, manifest: dict) -> bool:
        recs = self.servers()
        return bool(recs) and servers_live(recs, patience_s=5.0)

    def relaunch(self) -> list[dict]:
        """Not perfdag's to relaunch: checked again (a server back up is measured again)."""
        self.run()
        return self.servers()

    def build(self, out_dir: Path) -> dict:
        p = self.params
        check_endpoint_params(p, tokenizer=False)  # the measurement that tokenizes checks its tokenizer
        servers = external_servers(parse_endpoints(p.openai.endpoints), [served_name(p)], p.openai.ready_timeout_s,
                                   protocol=PROTOCOL)
        (out_dir / SERVERS_FILE).write_text(json.dumps({"servers": servers}, indent=2))
        return {"servers": servers}
