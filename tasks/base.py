"""The content-hashed luigi task every perfdag stage derives from.

A stage declares which parameter sections (or single keys) it reads, which tools shape its
output, its upstream stages, the perfdag modules whose behaviour shapes its output (`code`), what it
hands an external tool (`executed`), and one `build()` call into harness/. Its key hashes all of
that plus the upstream keys; its output is artifacts/<Stage>/<key16>/ with manifest.json. A
published artifact is reused only while its files, and those of everything it was made from, are
what was published.
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

from harness.backends import backend_for, resolve
from harness.backends.base import Key, Work
from harness.cache import observations, runs as runlog
from harness.cache.codehash import code_digests
from harness.cache.hashing import stage_key
from harness.cache.store import ArtifactStore
from harness.config import ENV_FLAGS, Params, ParamsError
from harness.errors import InputError
from harness.slurm import check_bundle_here
from tasks import lifecycle, observing, trust
from tasks.evidence import keep_failed
from tasks.registry import STAGES
from tasks.settings import DEFAULT_PARAMS, artifacts_root, params_path, signing_key
from tasks.slurm import submit as slurm_submit

log = logging.getLogger("perfdag")

_PARAMS_MEMO: dict[tuple, Params] = {}


def load_params(params_file: str, overrides: str) -> Params:
    """Resolved, validated params; memoised per (file, overrides, env flags) in this process."""
    path = params_path(params_file)
    memo_key = (str(path), overrides, tuple(os.environ.get(v, "") for v in ENV_FLAGS))
    if memo_key not in _PARAMS_MEMO:
        _PARAMS_MEMO[memo_key] = resolve(path, overrides)
    return _PARAMS_MEMO[memo_key]


# How a stage copes with a failure or bounds its input, not what it makes.
UNKEYED = ("harness.server_relaunches", "dataset.max_line_bytes", "harness.max_response_bytes",
           "harness.max_event_bytes")


def select(params: Params, reads: tuple[str, ...]) -> dict[str, Any]:
    """The parts of the resolved document a stage reads, by dotted path ('build' or 'build.backend')."""
    doc = params.model_dump(mode="json")
    for path in UNKEYED:
        section, _, name = path.rpartition(".")
        doc[section].pop(name, None)
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

    def __str__(self) -> str:  # luigi names missing outputs with it, and counts reschedules by that name
        return self.path


class StageTask(luigi.Task):
    params_file = luigi.Parameter(default=DEFAULT_PARAMS, description="YAML parameter file")
    overrides = luigi.Parameter(default="", description='"section.key=value,..." applied last')
    rerun_from = luigi.Parameter(default="", description="rebuild this stage and everything downstream")
    nightly_date = luigi.Parameter(default="", description="set by Nightly: enters measuring stages' keys only")
    verbose = luigi.BoolParameter(default=False, significant=False,
                                  description="show third-party warnings and output (modelopt, transformers)")
    keep_servers = luigi.BoolParameter(default=False, significant=False,
                                       description="leave the servers running after the run (LaunchServers "
                                                   "alone always does)")
    repeat_index = luigi.IntParameter(default=0, significant=False, description="set by FullRun --repeat")
    verify = luigi.BoolParameter(default=False, significant=False,
                                 description="re-hash every file of every artifact before reusing it "
                                             "(default: size and mtime, re-hash what moved)")

    stage: ClassVar[str]
    schema_version: ClassVar[int] = 2
    reads: ClassVar[tuple[str, ...]] = ()
    step: ClassVar[str] = ""  # the backend step doing the work: quantize, build, configure or launch
    volatile: ClassVar[tuple[str, ...]] = ()  # paths in the artifact that change after publishing (logs)
    # Self-contained: once built, the artifact needs none of its upstream's files (it was made from
    # them), so it stays reusable when its upstream is deleted. Any other stage uses them at run time
    # (a Triton repository names its engine, servers run on a repository, a score is of a log) and is
    # missing while one is gone; the next run rebuilds the chain from there.
    self_contained: ClassVar[bool] = False
    # A published artifact whose own files are corrupt is moved aside as evidence before it is rebuilt;
    # one that is runtime state (LaunchServers: live servers' records) is replaced as usual.
    moves_aside: ClassVar[bool] = True
    observes: ClassVar[bool] = False  # a measurement: each execution is kept (harness/cache/observations.py)
    building: dict = {}  # set by run(): the observation fields of what it publishes, for build()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Validate before anything is scheduled: bad params fail here, nothing written.
        try:
            self.params  # noqa: B018
            try:
                signing_key()
                # an OCI bundle's stages write under the root (the params checked it mounts the checkout)
                if bundle := self.params.slurm and self.params.slurm.container_bundle:
                    check_bundle_here(bundle, sees=(artifacts_root(),))
            except InputError as e:
                raise ParamsError([str(e)]) from None
            if self.rerun_from and self.rerun_from not in STAGES:
                raise ParamsError([f"--rerun-from: unknown stage {self.rerun_from!r}; stages are {', '.join(STAGES)}"])
            # luigi (and luigid across workers) tells tasks apart by task_id, which it derives from
            # every parameter: two sweep points differing only in loadgen.* would be two LaunchServers
            # tasks for one artifact. The content key is the identity that matters.
            self.task_id = f"{self.stage}_{self.key[:16]}" + observing.task_id_suffix(self)
        except ParamsError:
            lifecycle.errors_as_messages()  # luigi would log it with a traceback
            raise
        self._Task__hash = hash(self.task_id)

    # --- what a stage declares -------------------------------------------------------
    def upstream(self) -> dict[str, "StageTask"]:
        return {}

    def tools(self) -> dict[str, str]:
        return {}

    def key_inputs(self) -> dict[str, Any]:
        """Extra content that enters the key (e.g. an input checkpoint's content hash)."""
        return {}

    def code(self) -> tuple[str, ...]:
        """perfdag modules whose behaviour shapes the output (their digests enter the key)."""
        return ()

    def executed(self) -> dict[str, Any]:
        """What an external tool is handed, normalised (command lines, environment, config files):
        keyed instead of the code that renders it, so a refactor keeps the artifact."""
        return {}

    def build(self, out_dir: Path) -> dict:
        """The stage's work under `out_dir`; returns manifest fields. A step stage runs its step."""
        if not self.step:
            raise NotImplementedError
        return getattr(backend_for(self.params), self.step).run(
            self.work(running=True, out_dir=out_dir, final_dir=self.artifact_dir, log=log.info))

    def usable(self, manifest: dict) -> bool:
        """A published artifact that is no longer usable (e.g. its servers died) gets rebuilt."""
        return True

    def hold(self, manifest: dict) -> None:
        """Runs under the key's lock once the artifact is reused or built (servers: take a lease)."""

    def abandon(self) -> None:
        """Runs under the key's lock when building failed or was interrupted: undo what the build
        started outside its temp dir (servers: stop them)."""

    # --- derived ---------------------------------------------------------------------
    @cached_property
    def params(self) -> Params:
        return load_params(self.params_file, self.overrides)

    @cached_property
    def store(self) -> ArtifactStore:
        return ArtifactStore(artifacts_root(), signing_key=signing_key())

    # --- a stage whose work is a backend's step (Quantize, BuildEngine, FillTritonRepo, LaunchServers)
    def step_inputs(self, running: bool = False) -> dict[str, Path]:
        """The upstream artifacts the step works on, by name (`running`: paths read from the published
        manifests; else as the key sees them, before they exist)."""
        return {}

    def work(self, running: bool = False, **run) -> Work:
        return Work(self.params, self.store.root, self.step_inputs(running), **run)

    def key_parts(self) -> Key:
        """What enters the key: the backend step's parts, or what the stage itself declares."""
        if self.step:
            return getattr(backend_for(self.params), self.step).key(self.work())
        return Key(reads=tuple(self.reads), tools=self.tools(), code=self.code(), executed=self.executed(),
                   inputs=self.key_inputs())

    @cached_property
    def key_doc(self) -> dict:
        parts = self.key_parts()
        return {"params": {**select(self.params, parts.reads), **parts.inputs},
                "tools": dict(parts.tools),
                "upstream": {name: t.key for name, t in self.upstream().items()},
                "code": code_digests(parts.code, trust_memo=not self.full_verify),
                "executed": dict(parts.executed)}

    @cached_property
    def key(self) -> str:
        return stage_key(self.stage, self.schema_version, **self.key_doc)

    @property
    def artifact_dir(self) -> Path:
        return self.store.path(self.stage, self.key)

    @cached_property
    def must_rerun(self) -> bool:
        first = observing.rerun_stage(self)
        return bool(first) and (first == self.stage or any(t.must_rerun for t in self.upstream().values()))

    @property
    def full_verify(self) -> bool:
        return bool(self.verify) or os.environ.get("PERFDAG_VERIFY") == "1"

    def manifest(self) -> dict | None:
        return self.store.manifest(self.stage, self.key)

    def input_dir(self, name: str) -> Path:
        return self.upstream()[name].artifact_dir

    def stands_alone(self, manifest: dict) -> bool:
        """Whether this artifact needs none of its upstream's files once built (`self_contained`)."""
        return self.self_contained

    def holds(self, manifest: dict, field: str) -> bool:
        """The manifest's `field` (a path relative to the artifact) lies inside the artifact: no pass-through."""
        where = os.path.normpath(os.path.join(self.artifact_dir, str(manifest.get(field, ""))))
        return where == str(self.artifact_dir) or where.startswith(str(self.artifact_dir) + os.sep)

    def missing_upstream(self, manifest: dict) -> list[str]:
        """Why this published artifact counts as missing: an upstream whose files it uses at run time is
        gone, or is itself missing for that reason (empty: none is). A self-contained one never is."""
        if self.stands_alone(manifest):
            return []
        out: list[str] = []
        for up in self.upstream().values():
            um = up.manifest()
            why = [f"upstream {up.stage} {up.key[:16]}: missing"] if um is None else up.missing_upstream(um)
            out += [w for w in why if w not in out]
        return out

    def own_problems(self, manifest: dict, full: bool = False) -> list[str]:
        """How this artifact's own files (and what it serves from outside the root, see PrepareModel)
        differ from what was published, each prefixed with the artifact (empty: intact)."""
        return [f"{self.stage} {self.key[:16]}: {p}" for p in
                self.store.problems(self.stage, self.key, manifest, full=full)]

    def trust_problems(self, manifest: dict, fresh: bool = False) -> list[str]:
        """Why this published artifact must not be reused (empty: it is what was published, and so is
        everything it was made from that it still relies on). Files: size, mtime, ctime and inode,
        re-hashed when moved or under --verify; a self-contained artifact answers for its own files
        only, and every artifact its content rests on must hold what it was made from (tasks/trust.py).
        Memoised per process; `fresh` looks again (an upstream may have been rebuilt since)."""
        memo = (self.stage, self.key, manifest.get("finished_at"), self.full_verify)
        if memo in _TRUST_MEMO and not fresh:
            return _TRUST_MEMO[memo]
        out = self.own_problems(manifest, full=self.full_verify)
        recorded = manifest.get("upstream_content") or {}
        built_then = manifest.get("upstream_built") or {}
        alone = self.stands_alone(manifest)
        for name, up in self.upstream().items():
            um = up.manifest()
            if um is None:  # gone: missing_upstream decides whether that matters
                continue
            if not alone:
                out += [p for p in up.trust_problems(um, fresh) if p not in out]
            if recorded.get(name) and um.get("content_digest") != recorded[name]:
                out.append(trust.other_content(up, um, self, built_then.get(name)))
        out += [p for p in trust.lineage_problems(self, manifest) if p not in out]
        _TRUST_MEMO[memo] = out
        return out

    # --- luigi -----------------------------------------------------------------------
    def requires(self):
        return self.upstream()

    def output(self):
        return ArtifactTarget(self)

    def complete(self) -> bool:
        lifecycle.setup(self.verbose, root=self)  # luigi asks this first: the run starts here
        return super().complete()

    def is_done(self) -> bool:
        m = self.manifest()
        if m is None:
            return False
        if self.must_rerun and not observing.made_in_this_run(self, m):
            # a repeat already measured (and archived by the next one) stays done: luigi asks again
            return self.observes and self.repeat_index > 0 and observing.observation_dir(self) is not None
        if gone := self.missing_upstream(m):
            trust.warn_once(self, gone, "missing: what it uses at run time is gone; it will be rebuilt")
            return False
        problems = self.trust_problems(m)
        if problems:
            trust.warn_once(self, problems)
            return False
        if not self.reuse_now(m):
            return False
        runlog.record(self.store.root, self.stage, self.key, "reused", code=self.key_doc["code"],
                      observation=observations.id_of(m) if self.observes else None)
        lifecycle.note_done(self.task_id)
        return True

    def reuse_now(self, manifest: dict) -> bool:
        """Whether luigi may skip this stage: usable (and held, see `hold`)."""
        return self.usable(manifest)

    def run(self):
        lifecycle.setup(self.verbose, root=self)
        if slurm_submit.submits(self):  # params.slurm: this stage's build runs as a Slurm job
            return slurm_submit.run_as_job(self)
        t0 = time.monotonic()
        upstream_content, upstream_built = {}, {}
        for name, up in self.upstream().items():
            um = up.manifest() or {}
            upstream_content[name], upstream_built[name] = um.get("content_digest"), um.get("finished_at")
        base = {**self.key_doc, "schema_version": self.schema_version, "upstream_content": upstream_content,
                "upstream_built": upstream_built, "made_from": trust.made_from(self),
                "run_id": runlog.current_run_id(), "resolved_params": self.params.model_dump(mode="json"),
                **observing.fields(self)}
        self.building = {f: base[f] for f in (observations.FIELD, "observed_from") if f in base}

        def reusable(m: dict) -> bool:
            if self.must_rerun and not observing.made_in_this_run(self, m):
                return False
            if gone := self.missing_upstream(m):
                trust.warn_once(self, gone, "missing: what it uses at run time is gone; it will be rebuilt")
                return False
            problems = self.trust_problems(m, fresh=True)
            if problems:
                own = self.own_problems(m, full=self.full_verify)
                if not (own and trust.move_aside(self, m, own)):  # moved aside: it said so
                    trust.warn_once(self, problems)
                return False
            return self.usable(m)

        runlog.record_building(self.store.root, self.stage, self.key)
        status, doc = self.store.ensure(self.stage, self.key, self._build_with_fault_hook, base, reusable=reusable,
                                        hold=self.hold, volatile=self.volatile, archive=self.observes,
                                        on_fail=self._abandon)
        wall = round(time.monotonic() - t0, 3)
        runlog.record(self.store.root, self.stage, self.key, status, wall, code=self.key_doc["code"],
                      observation=observations.id_of(doc) if self.observes else None)
        log.info("%s %s: %s in %.1fs", self.stage, self.key[:16], status, wall)
        lifecycle.note_done(self.task_id)


    def _abandon(self) -> None:
        try:
            self.abandon()
        except Exception as e:  # the build's own error is the one to report
            log.warning("%s %s: cleaning up after the failed build: %s", self.stage, self.key[:16], e)

    def build_with_retries(self, out_dir: Path) -> dict:
        """The build; measuring stages try again after relaunching a server that crashed mid-run."""
        return self.build(out_dir)

    def evidence(self, dest: Path) -> None:
        """Adds to a failed build's kept directory what explains the failure beyond its own files
        (measuring stages: the servers' log tails)."""

    def _build_with_fault_hook(self, out_dir: Path) -> dict:
        log.info("%s %s: building (published as %s)", self.stage, self.key[:16], self.artifact_dir)
        try:
            extra = self.build_with_retries(out_dir)
        except Exception as e:
            keep_failed(self, out_dir, e)
            raise
        # Fault injection for tests of crash safety: PERFDAG_FAULT_SLEEP="BuildEngine:30" holds
        # the finished-but-unpublished build open so a test can SIGKILL or race it.
        stage, _, seconds = os.environ.get("PERFDAG_FAULT_SLEEP", "").partition(":")
        if stage == self.stage:
            log.info("fault hook: holding %s for %ss before publishing", self.stage, seconds or 0)
            time.sleep(float(seconds or 0))
        return extra


_TRUST_MEMO: dict[tuple, list[str]] = {}


def host_resource(name: str) -> str:
    """A luigi resource per host: luigid counts it globally, and each host has its own (default 1)."""
    return f"{name}@{socket.gethostname()}"
