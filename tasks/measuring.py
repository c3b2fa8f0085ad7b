"""What RunLoadgen and CheckAccuracy share: the servers and dataset they need, one measurement
per host at a time, and the nightly date in their keys."""
from __future__ import annotations

from harness.datasets import Sample

from .base import StageTask, host_resource
from .launch_servers import LaunchServers
from .prepare_dataset import PrepareDataset, read_samples


class MeasuringStage(StageTask):
    def upstream(self):
        return {"servers": self.clone(LaunchServers), "dataset": self.clone(PrepareDataset)}

    @property
    def resources(self):  # measurements on one host never overlap, whatever the worker count
        return {host_resource("measure"): 1}

    def key_inputs(self):
        return {"nightly_date": self.nightly_date} if self.nightly_date else {}

    def inputs(self) -> tuple[list[dict], list[Sample], dict]:
        """(server records, samples, dataset manifest)."""
        up = self.upstream()
        ds = up["dataset"].manifest()
        return up["servers"].servers(), read_samples(up["dataset"].artifact_dir, ds), ds
