"""The one interface every backend implements: four steps, each saying what enters its stage's key
and doing the stage's work.

A backend turns (checkpoint, quantize, build, runtime) into servers that speak a protocol the LoadGen
SUT has a core for. It offers one step per stage it shapes - `quantize` (Quantize), `build`
(BuildEngine), `configure` (FillTritonRepo: the servers' configuration), `launch` (LaunchServers) -
and `check`, its validation of the parameters. Each step has the same two members: `key(work)`,
what enters the stage's key, and `run(work)`, the work. A stage names its step and takes the key's
parts from it; tasks never branch on a backend's name.

Keys (harness/cache/codehash.py, harness/cache/executed.py): where perfdag's own code does the work
a step lists those modules (`code`), and their digests enter the key; where an external tool does it
(modelopt export, trtllm-build, tritonserver, mpirun) the step renders what the tool is handed
(`executed`), normalised, and that enters the key instead of the renderer's source. Everything that
decides *what* runs is a pure function of the parameters, so it is tested on CPU.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.serving.agreement import Expected

Log = Callable[[str], None]


@dataclass(frozen=True)
class Key:
    """What enters a stage's key from its step (beside the upstream keys)."""

    reads: tuple[str, ...] = ()                        # params, by dotted path ('build' or 'build.dtype')
    tools: Mapping[str, str] = field(default_factory=dict)  # versions of the tools that shape the output
    code: tuple[str, ...] = ()                         # perfdag modules that do the work
    executed: Mapping[str, Any] = field(default_factory=dict)  # what an external tool is handed
    inputs: Mapping[str, Any] = field(default_factory=dict)    # other content it depends on (a corpus digest)


@dataclass(frozen=True)
class Work:
    """What a step works on: the parameters, the artifacts root and its upstream artifacts (by name:
    `model`, `checkpoint`, `engine`, `repo`); when it runs, where it writes (`out_dir`, published as
    `final_dir`), how it logs and - launching - what it records the moment a process exists."""

    params: Any
    root: Path
    inputs: Mapping[str, Path] = field(default_factory=dict)
    out_dir: Path | None = None
    final_dir: Path | None = None
    layout: Mapping[str, Any] = field(default_factory=dict)  # launching: the configuration's layout
    log: Log = print
    on_spawn: Callable[[dict], None] = lambda rec: None
    # launching: the manifest of each artifact its servers load, by directory, as verified right before
    # the launch (what the private copies and pins are checked against: serving/private.py)
    verified: Mapping[str, Mapping] = field(default_factory=dict)

    def rel(self, name: str) -> str:
        """Upstream artifact `name` relative to the root: what configs and command lines name, so the
        root can move."""
        return os.path.relpath(self.inputs[name], self.root)


class Step:
    """One stage's work for one backend."""

    def key(self, work: Work) -> Key:
        return Key()

    def run(self, work: Work) -> dict:
        """Does the work under `work.out_dir`; returns manifest fields."""
        raise NotImplementedError


class LaunchStep(Step):
    """Launching also says what its servers speak and which params section configures them."""

    protocol: str = "triton-grpc"  # a record of serving/protocols.py
    section: str = "triton"

    def protocol_for(self, params) -> str:
        """The protocol its servers are measured through for these params (a backend whose servers
        speak more than one, as the OpenAI servers do completions and chat, says which)."""
        return self.protocol

    def gpus(self, params) -> int:
        """GPUs its servers use (a frontier's tokens/s per GPU divides by it; 0: none, per system)."""
        return params.runtime.num_gpus

    def expected(self, params) -> Expected:
        """What the parameters say its servers are (external endpoints or launched; protocol, address,
        models): a published record that disagrees is refused (harness/serving/agreement.py)."""
        raise NotImplementedError

    def serves_elsewhere(self, params) -> bool:
        """Its servers run already and serve nothing perfdag built (so build.* sizes nothing there, and
        prompts go whole): `pipeline bench`'s servers."""
        return False


@dataclass(frozen=True)
class Checks:
    problems: list[str]  # 'field: what is wrong; the fix', refused before any stage runs
    notes: list[str]     # advice that does not block a run


class Backend:
    name: str = ""
    quantize: Step
    build: Step
    configure: Step
    launch: LaunchStep

    def check(self, params) -> Checks:
        return Checks([], [])

    def serving_stack(self, params) -> str:
        """The server software its launch step runs (the roles a layout may use: backends/roles.py)."""
        return "tritonserver"
