"""One Slurm batch job: its script (a pure function of a JobSpec), submission, polling, log, cancel.

State comes from `scontrol show job` (and `squeue` while it answers); `sacct` is tried only once
scontrol has forgotten the job (it needs an accounting database many small clusters lack).
"""
from __future__ import annotations

import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.errors import PerfdagError
from harness.slurm.oci import Container

# Job states that end a job (squeue/scontrol spellings), and what each means for a stage.
ENDED = {
    "COMPLETED": None,
    "FAILED": "failed",
    "CANCELLED": "was cancelled (scancel, or an administrator)",
    "TIMEOUT": "hit its time limit",
    "OUT_OF_MEMORY": "ran out of memory (killed at its --mem limit)",
    "NODE_FAIL": "lost its node (node failure)",
    "BOOT_FAIL": "could not boot its node",
    "DEADLINE": "missed its deadline",
    "PREEMPTED": "was preempted",
    "REVOKED": "was revoked",
    "SPECIAL_EXIT": "ended in SPECIAL_EXIT",
}
HINTS = {
    "TIMEOUT": "raise slurm.time_limit_min",
    "OUT_OF_MEMORY": "raise slurm.mem",
    "NODE_FAIL": "rerun; the stage resubmits (nothing was published)",
    "PREEMPTED": "rerun, or use a partition without preemption",
    "CANCELLED": "rerun to resubmit (nothing was published)",
}


class JobError(PerfdagError):
    """A Slurm job that did not produce its stage: names the job id and the log."""


@dataclass(frozen=True)
class JobSpec:
    name: str
    log: Path                      # stdout and stderr of the job
    command: list[str]             # what the job runs (inside the container, when one is set)
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)   # exported by the script, after Slurm's own
    partition: str = ""
    account: str = ""
    gpus: int = 0
    cpus: int = 1
    mem: str = ""
    time_limit: str = ""
    extra_args: tuple[str, ...] = ()
    container: Container | None = None  # the command runs in it (pyxis's image or an OCI bundle)
    array: str = ""                # e.g. "0-3%2": a job array, at most 2 tasks at once
    nodes: int = 1                 # >1: a serving layout's allocation (one task per node)
    gpus_per_node: int = 0         # with nodes > 1: --gpus-per-node instead of --gpus


def sbatch_options(spec: JobSpec) -> list[str]:
    opts = [f"--job-name={spec.name}", f"--output={spec.log}", f"--chdir={spec.workdir}",
            f"--nodes={spec.nodes}", f"--ntasks={spec.nodes}", f"--cpus-per-task={spec.cpus}"]
    opts += ["--ntasks-per-node=1"] if spec.nodes > 1 else []
    opts += [f"--partition={spec.partition}"] if spec.partition else []
    opts += [f"--account={spec.account}"] if spec.account else []
    opts += [f"--gpus={spec.gpus}"] if spec.gpus and spec.nodes == 1 else []
    opts += [f"--gpus-per-node={spec.gpus_per_node}"] if spec.gpus_per_node and spec.nodes > 1 else []
    opts += [f"--mem={spec.mem}"] if spec.mem else []
    opts += [f"--time={spec.time_limit}"] if spec.time_limit else []
    opts += [f"--array={spec.array}"] if spec.array else []
    return opts + list(spec.extra_args)


def _directive(opt: str) -> str:
    """An #SBATCH line is read by sbatch, not the shell: it takes double quotes around a value."""
    name, eq, value = opt.partition("=")
    return f'{name}="{value}"' if eq and any(c.isspace() for c in value) else opt


def render_script(spec: JobSpec) -> str:
    """The batch script. With a container the command runs in a step of it: pyxis/enroot's
    `srun --container-image` (the artifacts root and the checkout mounted at the same paths), or
    Slurm's own `srun --container=<OCI bundle>`."""
    lines = ["#!/bin/bash", *(f"#SBATCH {_directive(o)}" for o in sbatch_options(spec)),
             "# written by perfdag (harness/slurm/jobs.py)",
             "set -eo pipefail",
             'echo "perfdag: job $SLURM_JOB_ID on $(hostname): CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"']
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(spec.env.items())]
    run = [shlex.quote(a) for a in spec.command]
    if spec.container:
        c = spec.container
        run = ["srun", "--ntasks=1", *map(shlex.quote, c.srun_options() + c.command(spec.command))]
    lines.append("exec " + " ".join(run))
    return "\n".join(lines) + "\n"


def _slurm(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise PerfdagError(f"{argv[0]} not found: slurm is set in the params but Slurm's commands are not on "
                           "PATH here; run on a login node of the cluster, or drop the slurm section") from None


def submit(spec: JobSpec, script_path: Path) -> "SlurmJob":
    script_path.write_text(render_script(spec))
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    out = _slurm(["sbatch", "--parsable", str(script_path)])
    if out.returncode != 0:
        raise JobError(f"sbatch refused {spec.name}: {out.stderr.strip() or out.stdout.strip()} "
                       f"(script {script_path}); check the slurm section of the params")
    job_id = out.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise JobError(f"sbatch answered {out.stdout.strip()!r}, not a job id (script {script_path})")
    return SlurmJob(job_id, spec, script_path)


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol show job -o` -> {field: value}; values may hold spaces only in Command/Reason-free
    fields, which perfdag does not read."""
    return dict(m.groups() for m in re.finditer(r"(\S+?)=(\S*)", text))


def ended_error(job_id: str, state: str, info: dict[str, str], log: Path) -> str | None:
    """None for a completed job; else the stage error: what happened, the job, the log, the fix."""
    base = state.split()[0].rstrip("+") if state else "UNKNOWN"
    if base == "COMPLETED":
        return None
    what = ENDED.get(base, f"ended in state {base}")
    if base == "FAILED" and info.get("ExitCode"):
        code, _, sig = info["ExitCode"].partition(":")
        what += f" (exit code {code}" + (f", signal {sig}" if sig not in ("", "0") else "") + ")"
    if info.get("Reason") not in (None, "", "None"):
        what += f" [{info['Reason']}]"
    hint = HINTS.get(base)
    node = f" on {info['NodeList']}" if info.get("NodeList") not in (None, "", "(null)") else ""
    return f"Slurm job {job_id}{node} {what}; log: {log}" + (f"; {hint}" if hint else "")


class SlurmJob:
    def __init__(self, job_id: str, spec: JobSpec, script: Path):
        self.job_id, self.spec, self.script = job_id, spec, script
        self.log = Path(str(spec.log).replace("%j", job_id))  # sbatch fills in %j
        self._log_pos = 0
        self._partial = ""

    def info(self) -> dict[str, str]:
        """scontrol's view of the job ({} once Slurm has forgotten it)."""
        try:
            out = _slurm(["scontrol", "show", "job", "-o", self.job_id])
        except subprocess.TimeoutExpired:  # a busy controller: unknown for now
            return {}
        return parse_scontrol(out.stdout) if out.returncode == 0 else {}

    def _sacct_state(self) -> dict[str, str]:
        try:
            out = _slurm(["sacct", "-n", "-X", "-P", "-j", self.job_id, "-o", "State,ExitCode,NodeList"])
        except (subprocess.TimeoutExpired, PerfdagError):  # no sacct here, or no database behind it
            return {}
        parts = out.stdout.strip().splitlines()[0].split("|") if out.returncode == 0 and out.stdout.strip() else []
        return dict(zip(("JobState", "ExitCode", "NodeList"), parts)) if len(parts) == 3 else {}

    def new_log_lines(self) -> list[str]:
        try:
            with open(self.log, "rb") as f:
                f.seek(self._log_pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self._log_pos += len(data)
        text = self._partial + data.decode("utf-8", "replace")
        lines = text.split("\n")
        self._partial = lines.pop()
        return lines

    def wait(self, *, poll_s: float = 2.0, on_line: Callable[[str], None] = lambda s: None,
             on_state: Callable[[str, dict], None] = lambda s, i: None) -> dict[str, str]:
        """Polls until the job ends, streaming its log; returns its final scontrol fields.
        Raises JobError (job id, log, fix) unless it COMPLETED."""
        seen, unknown_since = None, None
        while True:
            info = self.info()
            if not info:  # purged (MinJobAge) or the controller did not answer: ask sacct, then give up
                info = self._sacct_state()
                unknown_since = None if info else (unknown_since or time.monotonic())
                if unknown_since and time.monotonic() - unknown_since > max(120, 10 * poll_s):  # not a blip
                    self._flush(on_line)
                    raise JobError(f"Slurm job {self.job_id}: neither scontrol nor sacct knows it any more; its "
                                   f"log: {self.log}")
            state = info.get("JobState", "")
            if state and (state, info.get("Reason")) != seen:
                seen = (state, info.get("Reason"))
                on_state(state, info)
            for line in self.new_log_lines():
                on_line(line)
            if state.rstrip("+") in ENDED:
                self._flush(on_line)
                error = ended_error(self.job_id, state, info, self.log)
                if error:
                    raise JobError(error)
                return info
            time.sleep(poll_s)

    def _flush(self, on_line) -> None:
        time.sleep(0.2)  # slurmstepd writes the last lines as the job ends
        for line in self.new_log_lines() + ([self._partial] if self._partial else []):
            on_line(line)
        self._partial = ""

    def cancel(self) -> bool:
        """scancel; True when Slurm accepted it. Safe to call on an ended job."""
        return cancel(self.job_id)


def cancel(job_id: str) -> bool:
    """scancel a job (an array: all its tasks); True when Slurm accepted it."""
    try:
        return _slurm(["scancel", str(job_id)], timeout=30).returncode == 0
    except (subprocess.TimeoutExpired, PerfdagError):
        return False


def job_lines(job_id: str) -> list[dict[str, str]]:
    """`scontrol show job -o <id>`: one dict per record (an array: one per task, and one for the
    tasks still pending as a range); [] once Slurm has forgotten the job or did not answer."""
    try:
        out = _slurm(["scontrol", "show", "job", "-o", str(job_id)])
    except subprocess.TimeoutExpired:
        return []
    if out.returncode != 0:
        return []
    return [parse_scontrol(line) for line in out.stdout.splitlines() if line.strip()]


def job_state(job_id: str) -> str:
    """The job's state ('' when unknown), e.g. RUNNING, PENDING, CANCELLED."""
    lines = job_lines(job_id)
    return lines[0].get("JobState", "") if lines else ""


def wait_ended(job_id: str, timeout: float = 60.0) -> str:
    """Waits until the job is no longer PENDING/RUNNING/COMPLETING (its processes are gone); its last state."""
    deadline = time.monotonic() + timeout
    while True:
        state = job_state(job_id)
        if state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED") \
                or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def srun_argv(job_id: str, command: list[str], *, name: str = "", container: Container | None = None,
              node: str = "", nodes: tuple[str, ...] = (), tasks_per_node: int = 1, mpi: str = "") -> list[str]:
    """A step inside a running allocation that shares its resources (the holder step keeps them all);
    `node`: on that node of the allocation; `nodes`: over these nodes, `tasks_per_node` tasks on each
    (one task ending ends them all), under srun's `mpi` plugin; --overcommit, since ranks are GPU
    processes and the allocation may hold fewer CPUs per node than a node has ranks. `container`: every
    task runs in it."""
    if nodes:
        argv = ["srun", f"--jobid={job_id}", "--overlap", f"--nodes={len(nodes)}",
                f"--ntasks={len(nodes) * tasks_per_node}", f"--ntasks-per-node={tasks_per_node}", "--overcommit",
                "--kill-on-bad-exit=1", f"--nodelist={','.join(nodes)}"] + ([f"--mpi={mpi}"] if mpi else [])
    else:
        argv = ["srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1"]
        argv += [f"--nodelist={node}"] if node else []
    argv += [f"--job-name={name}"] if name else []
    if container:
        return argv + container.srun_options() + container.command(command)
    return argv + list(command)



def allocation_nodes(job_id: str) -> list[tuple[str, str]]:
    """(name, address) of each node of a running job, in Slurm's order (scontrol show hostnames/node)."""
    out = _slurm(["scontrol", "show", "job", job_id])
    m = re.search(r"\bNodeList=(\S+)", out.stdout)
    if out.returncode or not m:
        raise JobError(f"Slurm job {job_id}: scontrol could not say its nodes ({out.stderr.strip()[:200]})")
    return [(name, node_address(name)) for name in node_names(m.group(1))]


def node_names(nodelist: str) -> list[str]:
    """The node names a Slurm node list ('n[0-3],gpu7') stands for (scontrol show hostnames)."""
    return _slurm(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def node_address(name: str) -> str:
    """The address other nodes reach node `name` at (its NodeAddr; the name where Slurm gives none)."""
    addr = re.search(r"\bNodeAddr=(\S+)", _slurm(["scontrol", "show", "node", name]).stdout)
    return addr.group(1) if addr else name
