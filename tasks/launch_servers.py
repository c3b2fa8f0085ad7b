"""LaunchServers: real server processes on the filled configuration (or external endpoints).

Complete only while the recorded servers answer ready: a dead or unready server makes the next
run relaunch them. Live servers with the same key are reused across runs. Every process is in the
server registry (harness/serving/registry.py) the moment it exists, and a run that uses the
servers holds a lease on them; both are decided under the key's lock, so two runs never both
launch and no run stops servers another is measuring against.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from harness.backends import backend_for
from harness.cache import runs as runlog
from harness.cache import signing
from harness.errors import ArtifactError, PerfdagError, ServingError
from harness.serving.agreement import disagreements, external_records, not_listening
from harness.serving.elsewhere import addressed, reachable_from_here, running_elsewhere
from harness.serving.launcher import is_ours
from harness.serving.pinned import NotAsVerified, changes, pins_of
from harness.serving.private import PrivateDirError, dir_problems, private_dir
from harness.serving.records import as_written, read_servers, servers_of
from harness.serving.registry import ServerRegistry
from harness.serving.spec import this_node, url_of
from harness.untrusted.records import ignored
from tasks import lifecycle, trust
from tasks.base import StageTask, host_resource, log
from tasks.fill_triton_repo import FillTritonRepo
from tasks.registry import register
from tasks.settings import may_write_root
from tasks.slurm import serve as slurm_serve
from tasks.slurm import submit as slurm_submit

SERVERS_FILE = "servers.json"


@register
class LaunchServers(StageTask):
    stage = "LaunchServers"  # not self-contained: its servers run on the repository
    step = "launch"  # the backend's own server section: which servers are launched, or measured

    # What a launch publishes is runtime state (pids, ports, logs the servers keep writing), not
    # content: measurements made against an earlier launch of the same key stay valid.
    volatile = ("logs", SERVERS_FILE)
    moves_aside = False  # its artifact is the live servers' records: replaced (servers stopped) as usual

    def upstream(self):
        return {"repo": self.clone(FillTritonRepo)}

    @property
    def resources(self):  # one launch at a time per host: no two workers race for GPUs or ports
        return {host_resource("launch"): 1}

    def step_inputs(self, running=False):
        return {"repo": self.upstream()["repo"].artifact_dir}

    @property
    def registry(self) -> ServerRegistry:
        return ServerRegistry(self.store.root)

    def servers(self) -> list[dict]:
        """The published server records, checked as untrusted input (harness/serving/agreement.py): []
        when servers.json is malformed, differs from what the manifest recorded at launch (signed where
        the root is), or disagrees with the parameters, each reason named on one line. An external
        server's address is the parameters' own, never a record's."""
        path = self.artifact_dir / SERVERS_FILE
        recs = read_servers(path, self.store.root, inside=self.artifact_dir)
        if recs is None:
            return []
        expected = backend_for(self.params).launch.expected(self.params)
        why = self._not_the_launch(recs) + disagreements(recs, expected)
        if why:
            ignored(path, "; ".join(why) + "; perfdag measures nothing through it (the next run relaunches)")
            return []
        return [{**r, **e} for r, e in zip(recs, external_records(expected))] if expected.external else recs

    def _not_the_launch(self, recs: list[dict]) -> list[str]:
        """How the records differ from the servers the published manifest recorded at launch (the
        manifest is signed where the root is; servers.json is not)."""
        m = self.manifest()
        if m is None:  # not published (a launch under way): only the parameters can say
            return []
        if why := signing.problem(m, self.store.signing_key):
            return [f"its manifest: {why}"]
        then = servers_of(m.get("servers"), self.artifact_dir / "manifest.json", self.store.root)
        if then is None or [as_written(r) for r in recs] != [as_written(r) for r in then]:
            return ["it differs from the servers its manifest recorded at launch"]
        return []

    def own_problems(self, manifest: dict, full: bool = False) -> list[str]:
        """Its records' files, and with `full` (`--verify`) every file its live servers execute or read: each
        private directory on this host, its copies and its pins read again (serving/private.py)."""
        out = super().own_problems(manifest, full)
        for i, rec in enumerate(self.servers() if full else []):
            try:
                where = private_dir(rec["token"]) if not rec.get("external") and is_ours(rec) else None
            except PrivateDirError as e:
                out.append(f"{self.stage} {self.key[:16]}: {e}")
                break
            if where is not None and where.is_dir():
                out += [f"{self.stage} {self.key[:16]}: server {i}'s private directory: {p}" for p in dir_problems(where)]
        return out

    def measured_servers(self) -> list[dict]:
        """The servers a measurement goes to: the checked records, each (where perfdag launched it here)
        a process of this root that listens where its record says. Refused records fail the measurement."""
        recs = self.servers()
        why = not_listening(recs) if recs else ["no server record perfdag trusts (see the line above)"]
        if why:
            raise ServingError(f"LaunchServers {self.key[:16]}: not measuring: " + "; ".join(why) +
                               f"; {lifecycle.rerun_hint()} to relaunch them")
        return recs

    def usable(self, manifest: dict) -> bool:
        recs = self.servers()
        if not recs:
            return False
        if slurm_serve.allocation_of(recs) and not slurm_submit.runs_here(self):
            try:  # in an allocation: RUNNING, and the servers answer a probe made on their node
                return slurm_serve.live(self)
            except PerfdagError:  # no Slurm commands here: not usable from this host
                return False
        return not not_listening(recs) and not self.loaded_changes(manifest, mode="identity") \
            and self.registry.live(recs)

    def loaded_changes(self, manifest: dict | None = None, *, mode: str) -> list[str]:
        """How what its servers read in place (the pinned engine or checkpoint) differs from what was
        verified at their launch (serving/private.py; `mode` as there): empty when unchanged."""
        m = manifest if manifest is not None else self.manifest()
        if m is None or not self.launches():  # servers at endpoints read nothing of the root
            return []
        if why := signing.problem(m, self.store.signing_key):  # what is checked below is the manifest's word
            return [f"LaunchServers {self.key[:16]}: its manifest: {why}"]
        doc = m.get("loaded")
        pins = pins_of(doc, self.store.root)
        if not isinstance(doc, list) or len(pins) != len(doc):
            return [f"LaunchServers {self.key[:16]}: its manifest does not record what its servers read in place"]
        # only what its servers load is read (a forged pin could name any directory): the served artifacts,
        # or the model directory the repository names outside the root
        model = ((self.upstream()["repo"].manifest() or {}).get("layout") or {}).get("model")
        allowed = {str(t.artifact_dir) for t in self.served()} | \
            ({os.path.normpath(os.path.join(self.store.root, model))} if isinstance(model, str) else set())
        if stray := [p.src for p in pins if p.src not in allowed]:
            return [f"LaunchServers {self.key[:16]}: its manifest pins {stray[0]}, which its servers do not load"]
        return changes(pins, mode=mode)

    def check_loaded(self, stage: str, when: str, *, mode: str) -> None:
        """A measurement (`stage`) of these servers is valid only while what they loaded in place is what was
        verified at their launch: checked before it starts and after it ends. A change fails it; a file that
        no longer holds what was published is moved aside, so the rerun rebuilds and relaunches."""
        if not (problems := self.loaded_changes(mode=mode)):
            return
        self.served_problems(move_aside=True)
        raise ArtifactError(f"{stage}: not valid: what its servers (LaunchServers {self.key[:16]}) read in place "
                            f"changed {when}; {lifecycle.rerun_hint()} to relaunch them on the published files",
                            problems)

    def hold(self, manifest: dict) -> None:
        if slurm_submit.runs_here(self):  # the holder job: the lease is the worker's run's, taken there
            return
        self.registry.hold(self.key[:16], runlog.current_run_id())

    def run(self):
        if slurm_serve.serving(self):  # slurm.serve: the servers live in an allocation of their own
            return slurm_serve.launch(self)
        return super().run()

    def reuse_now(self, manifest: dict) -> bool:
        with self.store.lock(self.stage, self.key):  # decided together with launches and stops
            if not self.usable(manifest):
                return False
            self.hold(manifest)
            return True

    def relaunch(self) -> list[dict]:
        """Brings the servers back after one crashed mid-measurement: the launch is replaced under the
        key's lock exactly as a new run would replace it (or reused, if another run already did)."""
        self.run()
        return self.servers()

    def launches(self) -> bool:
        """Whether its servers are perfdag's to start (not external endpoints), loading files from the root."""
        return not getattr(self.params, backend_for(self.params).launch.section).endpoints

    def served(self) -> list[StageTask]:
        """The stages whose files its servers load: the repository, and what it names down to the first
        that stands alone (the engine; with a pass-through backend, the checkpoint it points at)."""
        out, todo = [], [self.upstream()["repo"]]
        while todo:
            t = todo.pop(0)
            out.append(t)
            m = t.manifest()
            if m is not None and not t.stands_alone(m):
                todo += [u for u in t.upstream().values() if u not in out]
        return out

    def served_problems(self, move_aside: bool, verified: dict | None = None) -> list[str]:
        """Every file its servers will load re-hashed and compared with what was published (each read
        once per process per file identity: the check before scheduling and the one right before launch
        read it once). With `move_aside`, a corrupt artifact moves to runs/<id>/corrupt/ so that this
        run (or the next) rebuilds it instead of launching on it. `verified` receives the manifest of each
        artifact found intact, by directory: what the servers' private copies and pins are made from."""
        out: list[str] = []
        for t in self.served():
            m = t.manifest()
            if m is None:  # missing: luigi builds it, or missing_upstream says so
                continue
            own = t.own_problems(m, full=True)
            if own and move_aside:
                with t.store.lock(t.stage, t.key):
                    trust.move_aside(t, m, own)
            elif not own and verified is not None:
                verified[str(t.artifact_dir)] = m
            out += [p for p in own if p not in out]
        return out

    def is_done(self) -> bool:
        if super().is_done():
            return True
        # About to launch: what the servers would load is verified now, before luigi decides what to
        # build, so a corrupt engine or repository is rebuilt in this run instead of failing the launch.
        if may_write_root() and self.launches():
            self.served_problems(move_aside=True)
        return False

    def verified_repo(self, repo) -> tuple[dict, dict]:
        """The repository's layout and the manifests of what the servers will load (by directory), once
        every file they will load (repository, engine, a checkpoint they serve) is re-hashed, right before
        they load them: a server runs what the repository names, code included. A corrupt artifact is
        moved aside, and the error says to rerun."""
        m, chain, verified = repo.manifest(), self.served(), {}
        problems = ["missing"] if m is None else repo.missing_upstream(m) + repo.trust_problems(m, fresh=True)
        if m is not None:  # last: it moves corrupt artifacts aside
            problems += [p for p in self.served_problems(move_aside=True, verified=verified) if p not in problems]
        if problems:
            named = [t for t in chain if any(p.startswith(f"{t.stage} {t.key[:16]}") for p in problems)]
            what = ", ".join(f"{t.stage} {t.key[:16]}" for t in named) or f"{repo.stage} {repo.key[:16]}"
            raise ArtifactError(f"LaunchServers {self.key[:16]}: not launching servers: {what} is not what was "
                                f"published; {lifecycle.rerun_hint()} to rebuild it", problems)
        return m["layout"], verified

    def abandon(self) -> None:
        # A launch that failed after its servers started (a full disk while publishing, Ctrl-C):
        # nothing was published, so nobody else uses them.
        stopped = self.registry.stop(self.key[:16], 3.0)  # never published: nobody needs a graceful stop
        if stopped:
            log.info("LaunchServers %s: stopped the servers it launched (pids %s)", self.key[:16],
                     ", ".join(map(str, stopped)))

    def refuse_clobbering(self) -> None:
        """Servers of this key launched by a Sweep's array task on another node, whose job still runs,
        are that task's to stop: they are not replaced from here (the points on that node still use them)."""
        there = [r for r in self.servers() if running_elsewhere(r)]
        if there:
            r, field = there[0], f"{backend_for(self.params).launch.section}.bind"
            why = (f"they listen on {r['host']}, which {this_node()} cannot reach; set {field}=0.0.0.0 so that "
                   "points on other nodes share them" if not reachable_from_here(r) else
                   f"they did not answer from {this_node()} at {url_of(r)}")
            raise ServingError(f"LaunchServers {self.key[:16]}: its servers run on {r['node']} in Slurm job "
                               f"{r['launch_job']}, which another point of this sweep launched; {why}")

    def build(self, out_dir: Path) -> dict:
        # Under the key's lock: the registry stops what a stale launch left, and records each server.
        layout, verified = self.verified_repo(self.upstream()["repo"])
        step = backend_for(self.params).launch
        loaded: list[dict] = []

        def start(on_spawn):
            try:
                done = step.run(self.work(running=True, out_dir=out_dir, final_dir=self.artifact_dir, layout=layout,
                                          on_spawn=on_spawn, log=log.info, verified=verified))
            except NotAsVerified as e:  # a file changed between the check and the load: rebuild what changed
                self.served_problems(move_aside=True)
                raise ArtifactError(f"LaunchServers {self.key[:16]}: {e}; {lifecycle.rerun_hint()} to launch "
                                    "them on the published files") from None
            loaded.extend(done.get("loaded", ()))
            return done["servers"]

        self.refuse_clobbering()
        marks = slurm_serve.job_marks(self)  # inside a Slurm job: the node (and the allocation)
        servers = [as_written(addressed(rec)) for rec in self.registry.replace(self.key[:16], self.servers(), start, marks)]
        (out_dir / SERVERS_FILE).write_text(json.dumps({"servers": servers}, indent=2))
        return {"servers": servers, "loaded": loaded}
