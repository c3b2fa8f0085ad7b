"""Bench: a running OpenAI-compatible server measured as it is (`python -m pipeline bench`).

RunLoadgen against ExternalServers (the servers at openai.endpoints, checked ready) on a dataset
tokenized with dataset.tokenizer: no PrepareModel, Quantize, BuildEngine or launch. The same cores,
LoadGen scenarios, cache and report as FullRun, without the accuracy run (there are no references
for a server perfdag did not build). perfdag never stops these servers.
"""
from __future__ import annotations

from pipeline.full_run import FullRun
from tasks import RunLoadgen
from tasks.external_servers import check_endpoint_params


class Bench(FullRun):  # not in STAGES (status, the invalidation tests): it takes pipeline bench's parameters
    stage = "Bench"
    reads = ("model.name", "openai.model")  # the report is labelled with the served name

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_endpoint_params(self.params)

    def upstream(self):
        return {"performance": self.clone(RunLoadgen, endpoint=True)}

    def report_name(self) -> str:
        return self.params.openai.model or self.params.model.name

    def release(self) -> None:
        """Not perfdag's servers: nothing to stop."""
