"""The content-hashed luigi task every perfdag stage derives from.

A stage declares which parameter sections (or single keys) it reads, which tools shape its
output, its upstream stages, and one `build()` call into harness/. Its key hashes all of that
plus the upstream keys; its output is artifacts/<Stage>/<key16>/ with manifest.json.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import luigi

from harness.config import ENV_FLAGS, Params, ParamsError, resolve
from harness.hashing import stage_key
from harness.store import ArtifactStore

from . import lifecycle, runlog
from .settings import DEFAULT_PARAMS, artifacts_root, params_path

log = logging.getLogger("perfdag")

_PARAMS_MEMO: dict[tuple, Params] = {}


def load_params(params_file: str, overrides: str) -> Params:
    """Resolved, validated params; memoised per (file, overrides, env flags) in this process."""
    path = params_path(params_file)
    memo_key = (str(path), overrides, tuple(os.environ.get(v, "") for v in ENV_FLAGS))
    if memo_key not in _PARAMS_MEMO:
        _PARAMS_MEMO[memo_key] = resolve(path, overrides)
    return _PARAMS_MEMO[memo_key]


def select(params: Params, reads: tuple[str, ...]) -> dict[str, Any]:
    """The parts of the resolved document a stage reads, by dotted path ('build' or 'build.backend')."""
    doc = params.model_dump(mode="json")
    out: dict[str, Any] = {}
    for path in reads:
        node: Any = doc
        for part in path.split("."):
            node = node[part]
        out[path] = node
    return out


class ArtifactTarget(luigi.Target):
    """Exists when the stage's artifact is published (and, under --rerun-from, rebuilt in this run)."""

    def __init__(self, task: "StageTask"):
        self.task = task

    def exists(self) -> bool:
        return self.task.is_done()

    @property
    def path(self) -> str:
        return str(self.task.artifact_dir)


class StageTask(luigi.Task):
    params_file = luigi.Parameter(default=DEFAULT_PARAMS, description="YAML parameter file")
    overrides = luigi.Parameter(default="", description='"section.key=value,..." applied last')
    rerun_from = luigi.Parameter(default="", description="rebuild this stage and everything downstream")
    nightly_date = luigi.Parameter(default="", description="set by Nightly: enters measuring stages' keys only")

    stage: ClassVar[str]
    schema_version: ClassVar[int] = 1
    reads: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Validate before anything is scheduled: bad params fail here, nothing written.
        try:
            self.params  # noqa: B018
            if self.rerun_from and self.rerun_from not in STAGES:
                raise ParamsError([f"--rerun-from: unknown stage {self.rerun_from!r}; stages are {', '.join(STAGES)}"])
        except ParamsError:
            lifecycle.errors_as_messages()  # luigi would log it with a traceback
            raise
        # luigi (and luigid across workers) tells tasks apart by task_id, which it derives from
        # every parameter: two sweep points differing only in loadgen.* would be two LaunchServers
        # tasks for one artifact. The content key is the identity that matters.
        self.task_id = f"{self.stage}_{self.key[:16]}" + (f"_rerun-{self.rerun_from}" if self.must_rerun else "")
        self._Task__hash = hash(self.task_id)

    # --- what a stage declares -------------------------------------------------------
    def upstream(self) -> dict[str, "StageTask"]:
        return {}

    def tools(self) -> dict[str, str]:
        return {}

    def key_inputs(self) -> dict[str, Any]:
        """Extra content that enters the key (e.g. an input checkpoint's content hash)."""
        return {}

    def build(self, out_dir: Path) -> dict:
        raise NotImplementedError

    def usable(self, manifest: dict) -> bool:
        """A published artifact that is no longer usable (e.g. its servers died) gets rebuilt."""
        return True

    # --- derived ---------------------------------------------------------------------
    @cached_property
    def params(self) -> Params:
        return load_params(self.params_file, self.overrides)

    @cached_property
    def store(self) -> ArtifactStore:
        return ArtifactStore(artifacts_root())

    @cached_property
    def key_doc(self) -> dict:
        return {"params": {**select(self.params, self.reads), **self.key_inputs()},
                "tools": self.tools(),
                "upstream": {name: t.key for name, t in self.upstream().items()}}

    @cached_property
    def key(self) -> str:
        d = self.key_doc
        return stage_key(self.stage, self.schema_version, d["params"], d["tools"], d["upstream"])

    @property
    def artifact_dir(self) -> Path:
        return self.store.path(self.stage, self.key)

    @cached_property
    def must_rerun(self) -> bool:
        return bool(self.rerun_from) and (
            self.rerun_from == self.stage or any(t.must_rerun for t in self.upstream().values()))

    def manifest(self) -> dict | None:
        return self.store.manifest(self.stage, self.key)

    def input_dir(self, name: str) -> Path:
        return self.upstream()[name].artifact_dir

    # --- luigi -----------------------------------------------------------------------
    def requires(self):
        return self.upstream()

    def output(self):
        return ArtifactTarget(self)

    def complete(self) -> bool:
        lifecycle.setup()  # luigi asks this first: the run starts here
        return super().complete()

    def is_done(self) -> bool:
        m = self.manifest()
        if m is None:
            return False
        if self.must_rerun and m.get("run_id") != runlog.current_run_id():
            return False
        if not self.usable(m):
            return False
        runlog.record(self.store.root, self.stage, self.key, "reused", path=str(self.artifact_dir))
        return True

    def run(self):
        lifecycle.setup()
        t0 = time.monotonic()
        base = {**self.key_doc, "schema_version": self.schema_version,
                "run_id": runlog.current_run_id(), "resolved_params": self.params.model_dump(mode="json")}
        m = self.manifest()
        replace = (self.must_rerun and not self._rebuilt_this_run()) or (m is not None and not self.usable(m))
        status, _ = self.store.ensure(self.stage, self.key, self._build_with_fault_hook, base, replace=replace)
        wall = round(time.monotonic() - t0, 3)
        runlog.record(self.store.root, self.stage, self.key, status, wall, str(self.artifact_dir))
        log.info("%s %s: %s in %.1fs", self.stage, self.key[:16], status, wall)

    def _build_with_fault_hook(self, out_dir: Path) -> dict:
        log.info("%s %s: building (published as %s)", self.stage, self.key[:16], self.artifact_dir)
        extra = self.build(out_dir)
        # Fault injection for tests of crash safety: PERFDAG_FAULT_SLEEP="BuildEngine:30" holds
        # the finished-but-unpublished build open so a test can SIGKILL or race it.
        stage, _, seconds = os.environ.get("PERFDAG_FAULT_SLEEP", "").partition(":")
        if stage == self.stage:
            time.sleep(float(seconds or 0))
        return extra

    def _rebuilt_this_run(self) -> bool:
        m = self.manifest()
        return bool(m and m.get("run_id") == runlog.current_run_id())


def host_resource(name: str) -> str:
    """A luigi resource per host: luigid counts it globally, and each host has its own (default 1)."""
    return f"{name}@{socket.gethostname()}"


# The DAG's topological order; STAGES (filled by tasks/ as classes are defined) follows it.
STAGE_ORDER = ("PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "LaunchServers",
               "PrepareDataset", "RunLoadgen", "CheckAccuracy", "FullRun")
STAGES: dict[str, type[StageTask]] = {}


def register(cls: type[StageTask]) -> type[StageTask]:
    STAGES[cls.stage] = cls
    ordered = sorted(STAGES.items(), key=lambda kv: STAGE_ORDER.index(kv[0]))
    STAGES.clear()
    STAGES.update(ordered)
    return cls
