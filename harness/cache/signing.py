"""Signed manifests for shared artifacts roots (opt-in): an HMAC-SHA256 over each manifest.

A manifest lists every published file's digest, so a signature over the manifest covers the
artifact's content. Without the key, someone who can write to the root can edit a file and rewrite
its digest in the manifest (checksums catch accidents, not forgers); with it, they cannot produce
a manifest that verifies. The key is a file only those who may publish can read.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from harness.cache.hashing import canonical_json
from harness.errors import InputError
from harness.untrusted.files import read_regular

FIELD = "signature"
ALGORITHM = "hmac-sha256"
KEY_MAX_BYTES = 4096  # a key is tens of bytes; more is the wrong file


def load_key(path: str | os.PathLike) -> bytes:
    """The key file's bytes (surrounding whitespace dropped); a clear error if it is unusable."""
    p = Path(path).expanduser()
    try:  # a FIFO would block, /dev/zero never ends: a regular file of at most KEY_MAX_BYTES only
        key = read_regular(p, "signing key file", KEY_MAX_BYTES,
                           "a key is tens of random bytes; is this the key file?").strip()
        mode = p.stat().st_mode
    except OSError as e:
        raise InputError(f"signing key file {p}: {e.strerror or e}; set PERFDAG_SIGNING_KEY_FILE "
                         "(or [perfdag] signing_key_file in luigi.cfg) to a readable file") from None
    if mode & 0o077:  # a key that others can read lets them sign forgeries
        raise InputError(f"signing key file {p}: mode {mode & 0o777:03o}, open to other users; run `chmod 600 {p}`")
    if len(key) < 16:
        raise InputError(f"signing key file {p}: {len(key)} bytes; use at least 16 random bytes "
                         "(e.g. `(umask 077; head -c 32 /dev/urandom | base64 > key)`)")
    return key


def signature(manifest: dict, key: bytes) -> str:
    """'hmac-sha256:<hex>' over the manifest's canonical JSON, its own signature field left out."""
    body = {k: v for k, v in manifest.items() if k != FIELD}
    mac = hmac.new(key, canonical_json(body).encode(), hashlib.sha256).hexdigest()
    return f"{ALGORITHM}:{mac}"


def problem(manifest: dict, key: bytes | None) -> str | None:
    """Why the manifest's signature does not hold (None: it holds, or no key is configured)."""
    if key is None:
        return None
    got = manifest.get(FIELD)
    if not isinstance(got, str) or not got:
        return "manifest is not signed, and a signing key is configured: not trusted"
    if not hmac.compare_digest(got, signature(manifest, key)):
        return "manifest signature is wrong (edited after publishing, or signed with another key): not trusted"
    return None
