"""What the measuring stages share: the servers and dataset they need, one measurement per host at
a time, the nightly date in their keys, and the SUT's code."""
from __future__ import annotations

import luigi

from harness.backends import backend_for
from harness.cache import runs as runlog
from harness.cache.codehash import package_modules
from harness.cache.versions import versions
from harness.errors import MeasurementError
import harness.host.state as host_state
from harness.loadgen.verdict import record_relaunches, relaunch_entry
from harness.model.datasets import Sample
from harness.serving.launcher import gone_servers
from harness.serving.protocols import protocol
from harness.serving.records import log_file
from tasks.base import StageTask, host_resource, log
from tasks.evidence import keep_attempt
from tasks.external_servers import ExternalServers, check_endpoint_params
from tasks.launch_servers import LaunchServers
from tasks.prepare_dataset import PrepareDataset, read_samples
from tasks.slurm import serve as slurm_serve

# The LoadGen SUT: its behaviour shapes every measurement (with its protocol's core: serving/protocols.py).
SUT_CODE = ("harness.loadgen.measure", "harness.loadgen", "harness.loadgen.runner", "harness.loadgen.driver",
            "harness.loadgen.frontend", "harness.loadgen.settings", "harness.loadgen.results",
            "harness.loadgen.messages", "harness.loadgen.cores", "harness.loadgen.cores.base",
            "harness.loadgen.openai_api", "harness.loadgen.usage", "harness.loadgen.progress",
            "harness.model.tokenizer",  # which tokenizer class counts and decodes tokens (the cores, openai_api)
            "harness.config.openai",  # the prompt form through a layout's router (openai_api.methods)
            "harness.loadgen.cores.aioloop", "harness.loadgen.chunks",
            "harness.loadgen.timings",  # requests.jsonl: per-request moments (HTTP's connect, headers, first byte)
            "harness.loadgen.cores.http_pool",  # which moment each of its stamps is (timings reads them by index)
            "harness.loadgen.verdict",  # result.json's verdict (LoadGen errors) and its relaunch record
            "harness.serving.protocols",  # which core and readiness probe a protocol name means
            "harness.loadgen.goodput", "harness.config.slo",  # result.json's goodput under the latency limits
            "harness.loadgen.early_stopping",  # result.json's early-stopping estimates at every percentile
            "harness.serving.layout",  # which servers the clients go to (a layout's front door), its summary
            "harness.host.state",  # result.json's host section: load, CPU of client, servers and others
            # frontends on other nodes (harness.client_nodes): placement, links, their host; result.json's clients
            "harness.loadgen.client_nodes", "harness.loadgen.remote", "harness.loadgen.links",
            "harness.loadgen.client_host", "harness.loadgen.clients",
            "harness.serving.spec",  # the node a frontend names (this_node)
            "harness.serving.gpu_telemetry",  # result.json's gpu_telemetry: each role's GPUs (NVML)
            "harness.serving.server_metrics",  # result.json's server_metrics: the servers' own, over the timed run
            ) + package_modules(("harness.mlperf.benchmarks",))  # latency limits, LoadGen names: user.conf


def servers_of(task: StageTask) -> StageTask:
    """The servers `task` measures: those running at openai.endpoints (its `endpoint`: ExternalServers, no
    model stage), else those perfdag launches."""
    return task.clone(ExternalServers) if task.endpoint else task.clone(LaunchServers)


class MeasuringStage(StageTask):
    observes = True  # every measurement is kept (harness/cache/observations.py)

    # Significant: it changes the upstream, so the key (`pipeline bench` sets it).
    endpoint = luigi.BoolParameter(default=False, description="measure the running servers at openai.endpoints "
                                   "as they are (ExternalServers): no model stages; needs dataset.tokenizer")

    tokenizes = True  # its dataset is tokenized: a running server's needs dataset.tokenizer

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.endpoint:
            check_endpoint_params(self.params, tokenizer=self.tokenizes)

    # Not self-contained: a measurement is of the servers, their repository and engine; with those
    # gone from the root it is measured again rather than reported unreproducible.
    def upstream(self):
        return {"servers": servers_of(self), "dataset": self.clone(PrepareDataset)}

    @property
    def resources(self):  # measurements on one host never overlap, whatever the worker count
        return {host_resource("measure"): 1}

    @property
    def protocol(self) -> str:
        return backend_for(self.params).launch.protocol_for(self.params)

    def key_inputs(self):
        out = {"nightly_date": self.nightly_date} if self.nightly_date else {}
        proto = protocol(self.protocol)
        if proto.request_settings:  # how prompts go out and tokens come back shapes the result
            out.update(proto.load("request_settings")(self.params))
        return out

    def tools(self):
        return versions("mlcommons-loadgen", *protocol(self.protocol).tools)

    def code(self):
        return SUT_CODE + protocol(self.protocol).code

    def run(self):
        if slurm_serve.measures_inside(self):  # the servers' allocation: LoadGen runs on their node
            return slurm_serve.measure(self)
        return super().run()

    def build_with_retries(self, out_dir):
        """A server that crashes mid-measurement (tritonserver 2.51 on CPU segfaults now and then under
        load) is relaunched and the measurement started over from nothing, harness.server_relaunches
        times at most; the crashed attempt's files are kept, and run.json and the result (result.json
        and the stage's output: `relaunches`, `measured_attempt`) record each relaunch."""
        from datetime import datetime, timezone



        servers = self.upstream()["servers"]
        if slurm_serve.allocation_of(servers.servers()):  # a step inside the servers' allocation: the
            return self.measure(out_dir, servers.servers())  # worker relaunches them in a new one (slurm/serve.py)
        relaunches: list[dict] = []
        for attempt in range(1, self.params.harness.server_relaunches + 2):
            try:
                self.check_loaded("before it started", mode="memo")
                doc = self.measure(out_dir, servers.servers())
                self.check_loaded("while it ran", mode="fresh")
            except MeasurementError as exc:
                gone = gone_servers(servers.servers(), servers.artifact_dir)
                if not gone:
                    raise
                if attempt > self.params.harness.server_relaunches:
                    exc.args = (f"{exc}\n" + "; ".join(gone) + f" (relaunched {attempt - 1} time(s) in this stage, "
                                f"harness.server_relaunches={self.params.harness.server_relaunches}); a rerun "
                                "relaunches it",)
                    raise
                at = datetime.now(timezone.utc).isoformat(timespec="seconds")
                kept = keep_attempt(self, out_dir, f"-crash{attempt}")
                log.warning("%s %s: %s mid-measurement; relaunching it and measuring again from the start "
                            "(%d of harness.server_relaunches=%d; the crashed attempt's files: %s)",
                            self.stage, self.key[:16], "; ".join(gone), attempt,
                            self.params.harness.server_relaunches, kept)
                error = str(exc).splitlines()[0][:500]
                runlog.record_relaunch(self.store.root, {"stage": self.stage, "key": self.key, "servers": gone,
                                                         "error": error, "kept": str(kept) if kept else None})
                relaunches.append(relaunch_entry(at, attempt, gone, error, str(kept) if kept else None))
                servers.relaunch()
                continue
            record_relaunches(out_dir, doc, relaunches, attempt)
            return doc
        raise AssertionError("unreachable")

    def check_loaded(self, when: str, *, mode: str) -> None:
        """What the servers read in place (weights) is what was verified when they were launched: checked
        before the measurement (each file read once in this process) and after it (read again); a change
        fails the measurement (serving/private.py). Servers perfdag did not launch read nothing of the root."""
        servers = self.upstream()["servers"]
        if isinstance(servers, LaunchServers):
            servers.check_loaded(f"{self.stage} {self.key[:16]}", when, mode=mode)

    def measure(self, out_dir, servers: list[dict]) -> dict:
        """The stage's measurement, with the host's state around it in its result (harness/host/state.py)."""
        before = host_state.begin(servers)
        doc = self.build(out_dir)
        host = host_state.end(before, servers)
        host_state.record(out_dir, doc, host)
        self.after_measurement(out_dir)
        if host["busy"]:
            log.info("%s %s: measured on a busy host: %s", self.stage, self.key[:16], "; ".join(host["busy_reasons"]))
        return doc

    def after_measurement(self, out_dir) -> None:
        """What is written once the result is whole, host state included (RunSessions: its report)."""

    def evidence(self, dest):
        """A failed measurement keeps the tail of every server's log beside its own logs."""

        servers = self.upstream()["servers"]
        for i, rec in enumerate(servers.servers()):
            src = log_file(rec, servers.artifact_dir)  # a record may name any path: only one inside the artifact
            if src is not None:
                with open(src, "rb") as f:
                    f.seek(max(0, src.stat().st_size - 64 * 1024))  # the tail: what the server said last
                    (dest / f"server{i}-{src.name}.tail").write_bytes(f.read())

    def inputs(self) -> tuple[list[dict], list[Sample], dict]:
        """(server records, samples, dataset manifest)."""
        up = self.upstream()
        ds = up["dataset"].manifest()
        return up["servers"].measured_servers(), read_samples(up["dataset"].artifact_dir, ds), ds
