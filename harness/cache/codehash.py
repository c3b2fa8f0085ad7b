"""perfdag's own code in the stage keys: a digest of what a module *does*, not how it is written.

A module's digest is the sha256 of its AST with docstrings removed (`ast.dump` without line
numbers), so comments, docstrings and formatting never count, while any change of behaviour does.
Stages declare the modules whose behaviour shapes their output; `import_closure` lets a test
check that nothing a stage uses for its work is missing from its list.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from harness import CHECKOUT

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


def _memo_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfdag" / f"code-digests-py{sys.version_info.major}{sys.version_info.minor}.json"


_MEMO: dict | None = None


def _memo() -> dict:
    """Digests computed earlier, by (path, size, mtime_ns): parsing ~30 modules per `status` costs
    more than the rest of it. A cache, not a source of truth: unreadable or unwritable is fine."""
    global _MEMO
    if _MEMO is None:
        try:
            _MEMO = json.loads(_memo_file().read_text())
        except (OSError, ValueError):
            _MEMO = {}
    return _MEMO


def _save_memo() -> None:
    f = _memo_file()
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f".{f.name}.{os.getpid()}")
        tmp.write_text(json.dumps(_memo()))
        os.replace(tmp, f)
    except OSError:
        pass


@lru_cache(maxsize=None)
def _digest_cached(path: str, size: int, mtime_ns: int) -> str:
    ident = f"{path}|{size}|{mtime_ns}"
    memo = _memo()
    if ident in memo:
        return memo[ident]
    tree = _strip_docstrings(ast.parse(Path(path).read_text(), filename=path))
    digest = hashlib.sha256(ast.dump(tree, annotate_fields=False, include_attributes=False).encode()).hexdigest()
    memo[ident] = digest
    _save_memo()
    return digest


def source_digest(path: str | Path) -> str:
    """Digest of a Python file's behaviour: AST without docstrings, comments or layout."""
    st = Path(path).stat()
    return _digest_cached(str(path), st.st_size, st.st_mtime_ns)


def code_digests(modules: Iterable[str]) -> dict[str, str]:
    """{repo-relative path: digest} for the declared modules (first 16 hex digits are plenty)."""
    out = {}
    for m in modules:
        p = module_path(m)
        out[p.relative_to(REPO_ROOT).as_posix()] = source_digest(p)[:16]
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
