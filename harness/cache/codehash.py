"""perfdag's own code in the stage keys: a digest of what a module *does*, not how it is written.

A module's digest is the sha256 of its AST with docstrings removed (`ast.dump` without line
numbers), so comments, docstrings and formatting never count, while any change of behaviour does.
Stages declare the modules whose behaviour shapes their output; `import_closure` lets a test
check that nothing a stage uses for its work is missing from its list.

Parsing every module costs about a second per process, so digests are memoised across processes
in the user's cache directory (`~/.cache/perfdag/`, or $XDG_CACHE_HOME), by the sha256 of the
source's bytes as read now: an entry serves exactly those bytes, whichever clone, container or
edit they come from (a path, size and mtime say nothing about content: a same-size edit with its
mtime restored, or two images built with fixed mtimes, would keep an old digest). The memo is
read only when it and its directory belong to this user and nobody else can write them; a
digest computed under `--verify` never trusts it (docs/cache-and-trust.md).
"""
from __future__ import annotations

import ast
import hashlib
import sys
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from harness import CHECKOUT
from harness.cache import private_memo

REPO_ROOT = CHECKOUT
PACKAGES = ("harness",)  # perfdag's work; tasks/ and pipeline/ only wire it together


def module_path(module: str) -> Path:
    """The source file of a perfdag module ('harness.mlperf.accuracy' -> harness/mlperf/accuracy.py), or a
    repo-relative file path given as is ('harness/backends/torch/triton_model/model.py')."""
    if module.endswith(".py"):
        return REPO_ROOT / module
    parts = module.split(".")
    base = REPO_ROOT.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    raise ValueError(f"{module}: not a module of this checkout ({base}.py)")


def package_modules(names: Iterable[str]) -> tuple[str, ...]:
    """`names` with each package expanded into its modules (sorted), so a stage that uses a package
    declares every module in it; names that are not in this checkout are left out."""
    out: list[str] = []
    for name in names:
        base = REPO_ROOT.joinpath(*name.split("."))
        if base.is_dir() and (base / "__init__.py").is_file():
            out += sorted(f"{name}.{p.relative_to(base).with_suffix('').as_posix().replace('/', '.')}".removesuffix(".__init__")
                          for p in base.rglob("*.py") if "__pycache__" not in p.parts)
        elif base.with_suffix(".py").is_file():
            out.append(name)
    return tuple(dict.fromkeys(out))


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _ast_digest(source: bytes, path: str) -> str:
    tree = _strip_docstrings(ast.parse(source, filename=path))
    return hashlib.sha256(ast.dump(tree, annotate_fields=False, include_attributes=False).encode()).hexdigest()


#: The memo holds at most this many digests (a few per edited module); the oldest go first.
MEMO_ENTRIES = 20_000
_MEMO_BYTES = 4 << 20


@lru_cache(maxsize=1)
def _memo_file() -> Path:
    """One memo per Python version (ast.dump's format follows it) and per version of this module (its
    digest rule): a digest from another rule is never read as this one's."""
    rule = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return private_memo.path(f"code-digests-py{sys.version_info.major}{sys.version_info.minor}-{rule}.json")


_MEMO: dict | None = None
_FRESH: set[str] = set()  # entries this process computed or corrected, not yet written
_PARSED: set[str] = set()  # sources this process parsed itself (what --verify may take from the memo)


def _memo() -> dict:
    """Digests computed earlier, {sha256 of the source bytes: digest}; {} when the memo is absent,
    unreadable, malformed or not private to this user. A cache, not a source of truth."""
    global _MEMO
    if _MEMO is None:
        doc = private_memo.read(_memo_file(), _MEMO_BYTES)
        _MEMO = {k: v for k, v in doc.items() if isinstance(v, str) and len(v) == 64}
    return _MEMO


def _save_memo() -> None:
    """Adds this process's new digests to the memo (a private file, replaced whole); never fails."""
    if not _FRESH:
        return
    _FRESH.clear()
    private_memo.write(_memo_file(), dict(list(_memo().items())[-MEMO_ENTRIES:]))


def source_digest(path: str | Path, trust_memo: bool = True) -> str:
    """Digest of a Python file's behaviour: AST without docstrings, comments or layout. The file is
    read every time; the memo (`trust_memo`) only spares parsing bytes it has seen."""
    source = Path(path).read_bytes()
    content = hashlib.sha256(source).hexdigest()
    memo = _memo()
    digest = memo.get(content) if trust_memo or content in _PARSED else None
    if digest is None:
        digest = _ast_digest(source, str(path))
        _PARSED.add(content)
        if memo.get(content) != digest:
            memo.pop(content, None)  # re-inserted last: the newest entry
            memo[content] = digest
            _FRESH.add(content)
    return digest


def code_digests(modules: Iterable[str], trust_memo: bool = True) -> dict[str, str]:
    """{repo-relative path: digest} for the declared modules (first 16 hex digits are plenty);
    `trust_memo` False (--verify): every module parsed anew."""
    out = {}
    for m in modules:
        p = module_path(m)
        out[p.relative_to(REPO_ROOT).as_posix()] = source_digest(p, trust_memo)[:16]
    _save_memo()
    return dict(sorted(out.items()))


def _imports_of(path: Path, module: str) -> set[str]:
    """perfdag modules a file imports, at module level or inside functions (lazy imports count)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                resolved = _existing_module(name)
                if resolved:
                    found.add(resolved)
    return found


def _existing_module(name: str) -> str | None:
    """`name` if it is a module of this checkout, else its longest module prefix (a.b.func -> a.b)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        try:
            module_path(cand)
            return cand
        except ValueError:
            parts.pop()
    return None


def import_closure(modules: Iterable[str]) -> set[str]:
    """Every perfdag module the given ones import, directly or not (the given ones included)."""
    todo, seen = list(modules), set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        try:
            path = module_path(m)
        except ValueError:
            continue
        if m.endswith(".py"):
            m = m[:-3].replace("/", ".")
        todo += sorted(_imports_of(path, m) - seen)
    return seen
