"""A server loads exactly the bytes that were verified: its private copy, and its pinned weights.

Whoever can write the artifacts root can change a file between the check before a launch and the
moment a server reads it. So a launched server runs from a directory of its own that only this user
can write, `<tmp>/perfdag-private-<uid>/<launch token>/` (mode 0700, outside the root, its parents
writable by nobody else but through a sticky bit), made by this module's `main` (`wrap`: run with
`python -c`, so that nothing is imported from the directory it starts in), which perfdag runs in
place of the server and which then becomes it (exec):

- What a server executes or is configured by (a Triton repository's model.py and config.pbtxt, an
  OpenAI server's YAML, Triton's Python-backend directory) is copied there, each file hashed as it
  is read, compared with the digest that was verified (the published manifest's) and hashed again
  once written. A byte changed in the root before the copy is refused; one changed after it is
  never read. Bytecode caches are blocked by empty files named `__pycache__`.
- What is read in place (an engine's or a checkpoint's directory: weights and their JSON) is
  pinned (harness/serving/pinned.py): the directory is opened, its inode and ctime compared with
  those that were verified, and the server reaches it through `/proc/<its pid>/fd/<n>`, a link that
  names that very directory for as long as the server lives (a directory swapped in at the same
  path is never seen). Its files are looked up by name in it, so the launch checks them again once
  the server is ready (serving/launcher.py), and the measuring stages before and after each
  measurement; a change fails them.
- The server runs in that directory, so what Python finds on an empty or relative search path (the
  Triton stub puts '' first) is only what was copied; PYTHONPATH entries inside the root are dropped.

A server placed on another node (srun) makes its copy there; the launch checks its pins through the
root's paths (the same inodes and ctimes) instead of its `/proc` links.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Mapping

from harness.cache import integrity
from harness.errors import ArtifactError, ServingError
from harness.serving.pinned import NotAsVerified, Pinned, changes, from_doc
from harness.serving.processes import TOKEN, TOKEN_ENV, processes_with_token

PLACEHOLDER = "<private>"  # in a server's argv: its private directory, filled in by `main`
PLAN_ENV = "PERFDAG_PRIVATE_PLAN"
PLAN_FILE = ".plan.json"  # the plan, kept in the private directory: what `status --verify` checks it against
BLOCKER = "__pycache__"
# What runs in place of the server: this module, imported with the current directory (the root) off
# the search path (`-m` would import from it), then exec'd into the server.
BOOT = "import sys; sys.path.pop(0); from harness.serving.private import main; main()"
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_./+@%,:=-]+$")  # Triton's Python backend starts its stub through a shell


class PrivateDirError(ServingError):
    """No directory only this user can write, outside the root, for a server's private copy."""


@dataclass(frozen=True)
class Copied:
    """A file copied into the private directory and verified there."""
    src: str          # absolute
    dest: str         # relative to the private directory
    digest: str       # what was verified (the published manifest's)
    mode: int = 0o600


@dataclass(frozen=True)
class Plan:
    """One server's private directory: what is copied, pinned and blocked, and the root it came from."""
    root: str
    copies: tuple[Copied, ...] = ()
    pins: tuple[Pinned, ...] = ()
    empty: tuple[str, ...] = ()  # relative files made empty: bytecode-cache blockers

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        doc = json.loads(text)
        return cls(root=doc["root"], copies=tuple(Copied(**c) for c in doc["copies"]),
                   pins=tuple(from_doc(p) for p in doc["pins"]), empty=tuple(doc["empty"]))

    def where(self, path: str | os.PathLike) -> str:
        """`path` (a served file or directory, absolute) as the server sees it: under PLACEHOLDER."""
        path = os.path.normpath(os.fspath(path))
        for p in self.pins:
            if path == p.src or path.startswith(p.src + os.sep):
                return f"{PLACEHOLDER}/{p.dest}{path[len(p.src):]}"
        rel = os.path.relpath(path, self.root)
        if rel.startswith(".."):
            raise ValueError(f"{path} is neither copied nor pinned")
        return f"{PLACEHOLDER}/{rel}"


# --- the private directory --------------------------------------------------------------------------

def _safe_parents(path: Path) -> None:
    """Every directory above `path` is root's or this user's, and writable by no one else unless sticky
    (as /tmp is: others may add entries there, never rename or remove this user's)."""
    for d in [path, *path.parents]:
        st = d.lstat()
        if st.st_uid not in (0, os.getuid()):
            raise PrivateDirError(f"{d} belongs to uid {st.st_uid}: the directory for servers' private copies "
                                  f"must lie where only root and you can rename things; set TMPDIR elsewhere")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise PrivateDirError(f"{d} is writable by others (mode {st.st_mode & 0o7777:o}, not sticky): the "
                                  "directory for servers' private copies must not lie below it; set TMPDIR elsewhere")


def private_base(root: str | os.PathLike | None = None) -> Path:
    """`<tmp>/perfdag-private-<uid>`: this user's, mode 0700, not under the artifacts `root`, below no
    directory others could rename it in. Made when missing; anything else there is refused."""
    tmp = Path(os.path.realpath(tempfile.gettempdir()))
    base = tmp / f"perfdag-private-{os.getuid()}"
    if not _SHELL_SAFE.match(str(base)):
        raise PrivateDirError(f"{base}: the temporary directory's path has characters Triton's Python backend "
                              "cannot pass through its shell; set TMPDIR to a plain path (letters, digits, '_./-')")
    if root is not None:
        real = os.path.realpath(root)
        if str(base) == real or str(base).startswith(real + os.sep):
            raise PrivateDirError(f"{base} lies in the artifacts root {real}, which others may write; set TMPDIR "
                                  "to a directory outside it")
    _safe_parents(tmp)
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    st = base.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PrivateDirError(f"{base} is not a directory of yours that only you can use (mode "
                              f"{st.st_mode & 0o7777:o}, uid {st.st_uid}); remove it: perfdag makes it anew")
    return base


def private_dir(token: str, base: Path | None = None) -> Path:
    return (base or private_base()) / token


def remove(token: str) -> None:
    """Removes the private directory of the server launched with `token`, once no process carries it."""
    if not isinstance(token, str) or not TOKEN.fullmatch(token) or processes_with_token(token):
        return
    with contextlib.suppress(OSError, PrivateDirError):
        d = private_dir(token)
        if d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)


def orphans(min_age_s: float = 60.0) -> list[Path]:
    """Private directories whose server is gone (no process carries their token: a killed run's, or a
    server that died), older than `min_age_s` so that one being made is never touched."""
    import psutil  # (as processes.py does: off the import of this module, which runs before every server)

    try:
        base = private_base()
    except (OSError, PrivateDirError):
        return []
    live = {(p.info.get("environ") or {}).get(TOKEN_ENV) for p in psutil.process_iter(["environ"])}
    out = []
    for d in sorted(base.iterdir()):
        with contextlib.suppress(OSError):
            st = d.lstat()
            if TOKEN.fullmatch(d.name) and stat.S_ISDIR(st.st_mode) and d.name not in live \
                    and time.time() - st.st_mtime > min_age_s:
                out.append(d)
    return out


def wrap(argv: Iterable[str]) -> list[str]:
    """The command that makes the private directory, then becomes `argv` (PLACEHOLDER filled in)."""
    return [sys.executable, "-c", BOOT, "--", *map(str, argv)]


# --- what a launch plans (in the launching process) ---------------------------------------------------

def copies_of(artifact_dir: str | os.PathLike, manifest: Mapping, root: str | os.PathLike,
              sub: str = "") -> list[Copied]:
    """The published files of an artifact (those under `sub`), to be copied to the same place
    relative to the root, with the digests its manifest published."""
    artifact_dir = os.path.normpath(os.fspath(artifact_dir))
    rel = os.path.relpath(artifact_dir, root)
    prefix = f"{sub.rstrip('/')}/" if sub else ""
    if any(name.startswith(prefix) for name in manifest.get("links") or {}):
        raise NotAsVerified(f"{artifact_dir}: publishes links under {sub or '.'}; a server's private copy "
                            "holds files only")
    return [Copied(src=os.path.join(artifact_dir, name), dest=f"{rel}/{name}", digest=info["digest"])
            for name, info in sorted((manifest.get("files") or {}).items()) if name.startswith(prefix)]


def file_copy(src: str | os.PathLike, dest: str, mode: int = 0o600) -> Copied:
    """A file of perfdag's own environment (not under the root), copied with the digest it has now."""
    fd = os.open(src, os.O_RDONLY)
    try:
        digest, _ = integrity.fd_digest(fd)
    finally:
        os.close(fd)
    return Copied(src=os.fspath(src), dest=dest, digest=digest, mode=mode)


def copy_changes(plan: Plan, private: Path) -> list[str]:
    """The private copies that no longer hold what was verified (nobody else can write them)."""
    out = []
    for c in plan.copies:
        try:
            fd = os.open(private / c.dest, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            out.append(f"{private / c.dest}: {e.strerror or e}")
            continue
        try:
            if integrity.fd_digest(fd, fresh=True)[0] != c.digest:
                out.append(f"{private / c.dest}: differs from {c.src} as it was verified")
        finally:
            os.close(fd)
    return out


# --- what runs in place of the server -----------------------------------------------------------------

def _copy(c: Copied, into: Path) -> None:
    dest = into / c.dest
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    src = os.open(c.src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, c.mode)
        try:
            name, h = integrity._hasher()
            while block := os.read(src, integrity.CHUNK):
                h.update(block)
                os.write(out, block)
        finally:
            os.close(out)
    finally:
        os.close(src)
    if f"{name}:{h.hexdigest()}" != c.digest:
        raise NotAsVerified(f"{c.src}: content differs from what was verified before the launch; not starting "
                            "the server on it")
    check = os.open(dest, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if integrity.fd_digest(check, fresh=True)[0] != c.digest:
            raise NotAsVerified(f"{dest}: the copy differs from what was read")
    finally:
        os.close(check)


def _pin_here(p: Pinned, into: Path) -> None:
    fd = os.open(p.src, os.O_RDONLY | os.O_DIRECTORY)
    st = os.fstat(fd)
    if (st.st_ino, st.st_ctime_ns) != tuple(p.ident):
        os.close(fd)
        raise NotAsVerified(f"{p.src}: replaced, or its entries changed, since it was verified before the launch; "
                            "not starting the server on it")
    os.set_inheritable(fd, True)  # held by the server (after exec) for as long as it lives
    link = into / p.dest
    link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.symlink(f"/proc/{os.getpid()}/fd/{fd}", link)


def build(plan: Plan, into: Path) -> None:
    """Fills the new private directory `into`: copies, pins, blockers, and the plan itself."""
    for c in plan.copies:
        _copy(c, into)
    for p in plan.pins:
        _pin_here(p, into)
    for name in [*plan.empty, PLAN_FILE]:
        (into / name).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(into / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    (into / PLAN_FILE).write_text(plan.to_json())


def dir_problems(into: Path) -> list[str]:
    """How a live server's private directory differs from its plan: its copies read again, its pins
    through its /proc links (every byte: `status --verify`). Empty: as it was made."""
    try:
        plan = Plan.from_json((into / PLAN_FILE).read_text())
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{into}: no plan to check it against ({e})"]
    return copy_changes(plan, into) + changes(plan.pins, into, mode="fresh")


def _search_path(value: str, root: str) -> str:
    """PYTHONPATH without entries in the artifacts root (or relative ones, which would name the root
    for a process started there): what others can write never shadows a module."""
    real = os.path.realpath(root)
    kept = [e for e in value.split(os.pathsep) if e and os.path.isabs(e)
            and not (os.path.realpath(e) + os.sep).startswith(real + os.sep)]
    return os.pathsep.join(kept)


def main() -> None:
    """`python -c BOOT -- <server argv>`: makes the private directory, then becomes the server."""
    argv = sys.argv[sys.argv.index("--") + 1:]
    token = os.environ.get(TOKEN_ENV, "")
    into = None
    try:
        if PLAN_ENV not in os.environ or not TOKEN.fullmatch(token):
            raise PrivateDirError(f"no plan ({PLAN_ENV}) or launch token ({TOKEN_ENV}) in the environment: "
                                  "perfdag's launch starts this, not a person")
        plan = Plan.from_json(os.environ.pop(PLAN_ENV))
        into = private_base(plan.root) / token
        into.mkdir(mode=0o700)  # a new one: its name is the launch's random token
        build(plan, into)
    except (OSError, KeyError, ValueError, ArtifactError, ServingError) as e:
        print(f"perfdag: not starting the server: {e}", file=sys.stderr, flush=True)
        if into is not None and into.is_dir():
            shutil.rmtree(into, ignore_errors=True)
        sys.exit(3)
    if "PYTHONPATH" in os.environ:
        os.environ["PYTHONPATH"] = _search_path(os.environ["PYTHONPATH"], plan.root)
    os.chdir(into)
    argv = [a.replace(PLACEHOLDER, str(into)) for a in argv]
    os.execvp(argv[0], argv)
