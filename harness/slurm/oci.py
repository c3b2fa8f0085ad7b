"""The two ways a step runs in a container: pyxis/enroot's `--container-image` and Slurm's own OCI
support, `srun --container=<bundle>` (the runtime oci.conf names, crun or runc, runs the bundle).

For an OCI bundle Slurm reads `<bundle>/config.json` on each node, replaces its process (the step's
command and environment) and its root (`<bundle>/rootfs` in Slurm 22.05), and keeps everything else:
its mounts and namespaces. perfdag writes nothing into a user's bundle; it checks, before any stage,
what it relies on: a rootfs, the checkout and the artifacts root bind-mounted at their own paths, and
the host's pid and network namespaces (server records keep pids that are probed and signalled from
outside the container; servers are reached at their node's address).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

from harness.errors import InputError

# Namespaces a bundle must not unshare, and why.
SHARED_NAMESPACES = {
    "pid": "server records keep pids that the worker and the liveness probe read on the host",
    "network": "servers bind the node's address, and clients on other nodes reach them there",
}


# (SLURMD_NODENAME may be the caller's, passed on by srun: a one-node step names its node, others none.)
_IN_BUNDLE = ('if [ "$SLURM_STEP_NUM_NODES" = 1 ]; then export SLURMD_NODENAME="$SLURM_STEP_NODELIST"; '
              'else unset SLURMD_NODENAME; fi; cd "$0" && exec "$@"')


@dataclass(frozen=True)
class Container:
    """How a step runs in the allocation's container: pyxis's `image` (with `mounts`, "src:dst") or
    an OCI `bundle` (its mounts are its config.json's); `workdir`: where the command starts."""
    image: str = ""
    bundle: str = ""
    mounts: tuple[str, ...] = ()
    workdir: str = ""

    def srun_options(self) -> list[str]:
        if self.bundle:
            return [f"--container={self.bundle}"]
        return ([f"--container-image={self.image}"]
                + ([f"--container-mounts={','.join(self.mounts)}"] if self.mounts else [])
                + ([f"--container-workdir={self.workdir}"] if self.workdir else []))

    def command(self, command: list[str]) -> list[str]:
        """What srun runs. Slurm starts an OCI container's process in config.json's process.cwd, not in
        the step's directory (pyxis has --container-workdir), and Slurm 22.05 writes the container's
        environment before the task's own variables (no SLURMD_NODENAME, SLURM_PROCID): the bundle's
        POSIX shell changes directory first and names the node of a one-node step (serving/spec.py)."""
        if self.bundle:
            return ["/bin/sh", "-c", _IN_BUNDLE, self.workdir or "/", *command]
        return list(command)


def container_of(slurm, mounts: Iterable[str | Path], workdir: str | Path) -> Container | None:
    """The allocation's container from a params `slurm` section (None: no container), with the
    directories `mounts` visible at their own paths (pyxis mounts them; a bundle must already)."""
    if slurm is None or not (slurm.container_image or slurm.container_bundle):
        return None
    if slurm.container_bundle:  # (checked before any stage: check_bundle)
        return Container(bundle=slurm.container_bundle, workdir=str(workdir))
    return Container(image=slurm.container_image, workdir=str(workdir),
                     mounts=(*(f"{m}:{m}" for m in mounts), *slurm.container_mounts))


def bundle_config(bundle: str | Path) -> dict:
    """The bundle's config.json, read and checked (InputError: what is wrong and the fix)."""
    b = Path(bundle)
    fix = "make one with scripts/oci-bundle.sh, or see docs/slurm.md#containers"
    if not b.is_absolute():
        raise InputError(f"slurm.container_bundle: {bundle!r} is not an absolute path; Slurm looks for it at that "
                         "path on every node: give it absolute")
    if not b.is_dir():
        raise InputError(f"slurm.container_bundle: {bundle} is not a directory (an OCI bundle: config.json and "
                         f"a rootfs); {fix}")
    try:
        config = json.loads((b / "config.json").read_text())
    except FileNotFoundError:
        raise InputError(f"slurm.container_bundle: {bundle} has no config.json (an OCI bundle's runtime "
                         f"configuration); {fix}") from None
    except (OSError, ValueError) as e:
        raise InputError(f"slurm.container_bundle: {b / 'config.json'} cannot be read as JSON ({e}); {fix}") from None
    if not isinstance(config, dict):
        raise InputError(f"slurm.container_bundle: {b / 'config.json'} is not a JSON object; {fix}")
    root = (config.get("root") or {}).get("path") if isinstance(config.get("root"), dict) else None
    if not isinstance(root, str) or not root:
        raise InputError(f"slurm.container_bundle: {b / 'config.json'} names no root.path (the rootfs); {fix}")
    if not (b / root).is_dir():  # (an absolute root.path joins as itself)
        raise InputError(f"slurm.container_bundle: its rootfs {b / root} (config.json root.path) is not a "
                         f"directory; {fix}")
    spaces = (config.get("linux") or {}).get("namespaces") or []
    for ns in spaces:
        kind = ns.get("type") if isinstance(ns, dict) else None
        if kind in SHARED_NAMESPACES and not ns.get("path"):
            raise InputError(f"slurm.container_bundle: {b / 'config.json'} gives the container its own {kind} "
                             f"namespace, but perfdag needs the host's ({SHARED_NAMESPACES[kind]}); remove "
                             f"{{\"type\": \"{kind}\"}} from linux.namespaces")
    return config


def check_bundle(bundle: str | Path, sees: Iterable[str | Path] = ()) -> None:
    """InputError unless the bundle is usable and bind-mounts each of `sees` at its own path."""
    config = bundle_config(bundle)
    mounts = [m for m in config.get("mounts") or [] if isinstance(m, dict)]
    for path in sees:
        if not any(_shows(m, PurePosixPath(path)) for m in mounts):
            raise InputError(f"slurm.container_bundle: {Path(bundle) / 'config.json'} does not bind-mount {path} at "
                             "its own path, and the stages in the container read and write there; add "
                             f'{{"destination": "{path}", "source": "{path}", "type": "bind", "options": ["rbind"]}} '
                             "(or a directory above it) to its mounts")


def check_bundle_here(bundle: str | Path, sees: Iterable[str | Path] = ()) -> None:
    """check_bundle, except in a step that runs in a container (Slurm sets SLURM_CONTAINER there): it sees
    what its config.json mounts, not necessarily the bundle, which was checked where the step was started."""
    if not os.environ.get("SLURM_CONTAINER"):
        check_bundle(bundle, sees)


def _shows(mount: dict, path: PurePosixPath) -> bool:
    """`mount` binds a directory at its own path that holds `path`."""
    dst, src = mount.get("destination"), mount.get("source")
    binds = mount.get("type") == "bind" or any(o in ("bind", "rbind") for o in mount.get("options") or [])
    if not (binds and isinstance(dst, str) and dst == src):
        return False
    return path == PurePosixPath(dst) or PurePosixPath(dst) in path.parents
