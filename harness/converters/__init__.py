"""`python -m pipeline dataset convert --format NAME SRC OUT`: a dataset in the form it is published in,
written as what perfdag reads (pipeline/cli/dataset.py).

One module per format, registered here by name: each has `DESCRIPTION` (a line) and
`convert(src: Path, out: Path) -> dict` (what it wrote: rows, and what else it counted), writes `out`
whole or not at all (a temporary file or directory beside it, renamed), and refuses bad input in one
line naming the file, the row and the field. OUT is a new file, or, for a module that sets
`WRITES_DIRECTORY` (librispeech: a manifest and its clips), a new or empty directory it checks itself. A module is imported only when its format is asked for (pyarrow for
parquet). Converters sit above the packages whose facts they use (a benchmark's prompt, BFCL's
sampling, the trajectory reader), so they are their own package.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from harness.errors import InputError

#: name -> module. A new format is one module and one line here.
FORMATS = {
    "qwen3-vl-parquet": "harness.converters.qwen3_vl",   # Shopify product catalogue (Hugging Face parquet)
    "bfcl-parquet": "harness.converters.bfcl",           # endpoints' BFCL v4 single-turn parquet -> the 995-row set
    "agentic-jsonl": "harness.converters.agentic",       # endpoints' agentic trajectories, checked and kept
    "librispeech": "harness.converters.librispeech",     # LibriSpeech's dev split -> whisper's manifest and clips
}


def converter(name: str) -> ModuleType:
    if name not in FORMATS:
        raise InputError(f"--format: unknown {name!r}; one of {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[name])


def convert(name: str, src: str | os.PathLike, out: str | os.PathLike) -> dict:
    """Converts `src` with the `name` converter into `out` (which must not exist)."""
    module = converter(name)
    src, out = Path(src), Path(out)
    if not src.exists():
        raise InputError(f"{src}: no such file or directory; give the dataset to convert")
    if getattr(module, "WRITES_DIRECTORY", False):
        return module.convert(src, out)
    if out.exists():
        raise InputError(f"{out}: exists; give a new file to write")
    if not out.parent.is_dir():
        raise InputError(f"{out.parent}: no such directory; create it first")
    return module.convert(src, out)


def write_jsonl(out: Path, rows) -> int:
    """`rows` as JSON lines into `out`, whole or not at all; the number written."""
    import json

    tmp = out.with_name(f".{out.name}.partial")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def parquet_files(src: Path) -> list[Path]:
    """`src` itself, or a directory's *.parquet files: train splits first, then the rest, each sorted (the
    Hugging Face layout, as `split="train+test"` reads them)."""
    if src.is_file():
        return [src]
    files = sorted(src.rglob("*.parquet"))
    if not files:
        raise InputError(f"{src}: no .parquet files in it; give a parquet file or a directory of them")
    return sorted(files, key=lambda p: (not p.name.startswith("train"), str(p)))


def read_parquet(path: Path):
    """A parquet file as a DataFrame (pyarrow: the `data` extra, imported only here)."""
    try:
        import pyarrow  # noqa: F401 - pandas reads parquet with it
    except ImportError:
        raise InputError("reading parquet needs pyarrow: pip install -e '.[data]'") from None
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow's many errors for a file that is not parquet
        raise InputError(f"{path}: not a readable parquet file ({type(e).__name__}: {str(e)[:200]})") from None
