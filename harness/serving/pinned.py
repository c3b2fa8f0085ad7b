"""Weights a server reads in place, pinned: what a directory held when it was verified, and how it
differs now.

A launch records every file of each directory its servers read in place (an engine's or a
checkpoint's: weights and their JSON) with its inode, size, mtime, ctime and digest, and the inode
and ctime of the directory and of each sub-directory (`pin`, compared with the published manifest).
The servers reach that very directory through a /proc link (harness/serving/private.py), and look
files up by name in it, so `changes` compares what it holds now with that record: an edit moves a
file's ctime, a rename its inode or its directory's ctime, whatever bytes it holds afterwards; and
every byte is read again ("fresh"), or once per identity in this process ("memo"), or not at all
("identity": a stat per entry, for a cached run's reuse). Any difference is named.
"""
from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from harness.cache import integrity
from harness.errors import ArtifactError


class NotAsVerified(ArtifactError):
    """What a server would load, or loaded, is not what was verified before it started."""


@dataclass(frozen=True)
class Pinned:
    """A directory read in place, pinned for the server's life; what it held when it was verified."""
    src: str                               # absolute
    dest: str                              # the link's path, relative to the private directory
    ident: tuple[int, int]                 # (inode, ctime_ns) of the directory
    dirs: Mapping[str, tuple[int, int]]    # relative sub-directory: (inode, ctime_ns)
    files: Mapping[str, tuple]             # relative file: (inode, size, mtime_ns, ctime_ns, digest)
    # relative link inside it: (its target, and what it leads to: as `files` for a file, else nothing more)
    links: Mapping[str, tuple] = field(default_factory=dict)



def from_doc(doc: dict) -> Pinned:
    """A pin as written down (JSON: lists for tuples)."""
    return Pinned(src=doc["src"], dest=doc["dest"], ident=tuple(doc["ident"]),
                  dirs={k: tuple(v) for k, v in doc["dirs"].items()},
                  files={k: tuple(v) for k, v in doc["files"].items()},
                  links={k: tuple(v) for k, v in (doc.get("links") or {}).items()})


def _file(entry: str, fd: int, mode: str, follow: bool) -> tuple:
    """(inode, size, mtime_ns, ctime_ns, digest or None) of a file in the open directory `fd`, read
    through its own descriptor."""
    ffd = os.open(entry, os.O_RDONLY | (0 if follow else os.O_NOFOLLOW), dir_fd=fd)
    try:
        digest, st = (None, os.fstat(ffd)) if mode == "identity" else integrity.fd_digest(ffd, fresh=mode == "fresh")
    finally:
        os.close(ffd)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest


def _walk(fd: int, manifest: Mapping[str, dict] | None, under: str, mode: str,
          rel: str = "") -> tuple[dict, dict, dict, list[str]]:
    """(dirs, files, links, problems) of the open directory `fd`, every file hashed through its own
    descriptor (`mode`: "fresh" reads every byte, "memo" once per identity in this process, "identity"
    none: its digest is None); with `manifest` (an artifact's files; those below `under`, a prefix
    ending in '/' or ''), compared with it."""
    dirs, files, links, problems = {}, {}, {}, []
    for entry in sorted(os.listdir(fd)):
        name = f"{rel}{entry}"
        st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                d, f, ln, pr = _walk(sub, manifest, under, mode, f"{name}/")
                dirs[name] = (os.fstat(sub).st_ino, os.fstat(sub).st_ctime_ns)
            finally:
                os.close(sub)
            dirs.update(d), files.update(f), links.update(ln)
            problems += pr
        elif stat.S_ISLNK(st.st_mode):  # (a Hugging Face snapshot's files are links to its blobs)
            target = os.readlink(entry, dir_fd=fd)
            try:
                led = os.stat(entry, dir_fd=fd)
            except OSError:
                led = None
            links[name] = (target, *(_file(entry, fd, mode, follow=True) if led and stat.S_ISREG(led.st_mode) else ()))
        elif stat.S_ISREG(st.st_mode):
            files[name] = _file(entry, fd, mode, follow=False)
        else:
            problems.append(f"{name}: a {integrity.kind(st.st_mode)}")
    if manifest is not None and not rel:
        published = {r[len(under):]: v for r, v in manifest.items() if r.startswith(under)}
        for name, (*_, digest) in files.items():
            if name == integrity.MANIFEST and not under:
                continue
            if name not in published:
                problems.append(f"{name}: not part of the published artifact")
            elif published[name]["digest"] != digest:
                problems.append(f"{name}: content differs from what was published")
        problems += [f"{name}: missing" for name in published if name not in files]
    return dirs, files, links, problems


def pin(src: str | os.PathLike, dest: str, manifest: Mapping | None = None, under: str = "") -> Pinned:
    """What `src` holds now (each file read once per identity in this process: the check before the
    launch read it already), compared with the published `manifest` (of the artifact `src` lies in, at
    `under` inside it) when given."""
    src = os.path.normpath(os.fspath(src))
    prefix = f"{under.rstrip('/')}/" if under else ""
    fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    try:
        st = os.fstat(fd)
        dirs, files, links, problems = _walk(fd, None if manifest is None else manifest.get("files") or {},
                                             prefix, "memo")
        if os.fstat(fd).st_ctime_ns != st.st_ctime_ns:
            problems.append("its entries changed while it was verified")
    finally:
        os.close(fd)
    if manifest is not None:
        published = {k[len(prefix):]: v for k, v in (manifest.get("links") or {}).items() if k.startswith(prefix)}
        problems += [f"{name}: symlink to {led[0]}, not part of the published artifact"
                     for name, led in links.items() if published.get(name) != led[0]]
    if problems:
        raise NotAsVerified(f"{src}: not what was verified", problems)
    return Pinned(src=src, dest=dest, ident=(st.st_ino, st.st_ctime_ns), dirs=dirs, files=files, links=links)


def pins_for(root: str | os.PathLike, verified: Mapping[str, Mapping], copied: Iterable[str] = (),
             outside: Iterable[str | os.PathLike] = ()) -> tuple[Pinned, ...]:
    """The pins of a launch: every verified artifact (its directory: manifest) but those `copied`, at its
    place relative to the root, compared with its manifest; directories `outside` the root (a checkpoint a
    server loads from there) as `outside/<i>`."""
    out = [pin(d, os.path.relpath(d, root), m) for d, m in sorted(verified.items()) if d not in set(copied)]
    out += [pin(d, f"outside/{i}") for i, d in enumerate(outside)]
    return tuple(out)


def pins_doc(pins: Iterable[Pinned], root: str | os.PathLike) -> list[dict]:
    """What a LaunchServers manifest keeps of its servers' pins (the measuring stages check them again),
    each once, by its path relative to the root where it lies in it (the root may move)."""
    out: dict[str, dict] = {}
    for p in pins:
        rel = os.path.relpath(p.src, root)
        out.setdefault(p.src, {**asdict(p), "src": p.src if rel.startswith("..") else rel})
    return list(out.values())


def pins_of(doc, root: str | os.PathLike) -> list[Pinned]:
    """The pins a LaunchServers manifest recorded (none for one made before pins, or a malformed one)."""
    try:
        pins = [from_doc(d) for d in doc or []]
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
    return [Pinned(**{**asdict(p), "src": os.path.normpath(os.path.join(root, p.src))}) for p in pins]


def changes(pins: Iterable[Pinned], private: Path | None = None, *, mode: str = "fresh") -> list[str]:
    """How the pinned directories differ from what was verified: through the server's own links under
    its `private` directory, else through their paths (a server on another node, or a measurement).
    `mode`: "fresh" reads every file again, "memo" once per identity in this process, "identity" only
    compares inodes, sizes, times (a stat per entry). Empty: the same inodes, ctimes and bytes."""
    out = []
    for p in pins:
        path = private / p.dest if private is not None else Path(p.src)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            out.append(f"{p.src}: {e.strerror or e}")
            continue
        try:
            st = os.fstat(fd)
            if (st.st_ino, st.st_ctime_ns) != tuple(p.ident):
                out.append(f"{p.src}: the directory was replaced or its entries changed since it was verified")
                continue
            dirs, files, links, problems = _walk(fd, None, "", mode)
        finally:
            os.close(fd)
        out += [f"{p.src}/{x}" for x in problems]
        for name in sorted(set(p.files) | set(files)):
            out += _differs(f"{p.src}/{name}", p.files.get(name), files.get(name))
        for name in sorted(set(p.links) | set(links)):
            then, now = p.links.get(name), links.get(name)
            if then and now and then[0] != now[0]:
                out.append(f"{p.src}/{name}: a link to {now[0]} now, to {then[0]} when it was verified")
            elif then and now:  # what the link leads to (a file: as any file)
                out += _differs(f"{p.src}/{name} (-> {then[0]})", tuple(then[1:]) or None, tuple(now[1:]) or None)
            else:
                out += _differs(f"{p.src}/{name}", then, now)
        for name in sorted(set(p.dirs) | set(dirs)):
            if tuple(p.dirs.get(name, ())) != tuple(dirs.get(name, ())):
                out.append(f"{p.src}/{name}/: replaced or changed since it was verified")
    return out


def _differs(what: str, then: tuple | None, now: tuple | None) -> list[str]:
    """How a file (inode, size, mtime_ns, ctime_ns, digest or None) differs from when it was verified."""
    if then is None and now is None:
        return []
    if then is None or now is None:
        return [f"{what}: {'appeared' if then is None else 'gone'} since it was verified"]
    if tuple(now[:4]) != tuple(then[:4]):
        now_bytes = "" if now[4] is None else (": other bytes now" if now[4] != then[4] else
                                               ": the same bytes now, but not since then")
        return [f"{what}: written, touched or replaced since it was verified{now_bytes}"]
    if now[4] is not None and now[4] != then[4]:
        return [f"{what}: content differs from what was verified"]
    return []
