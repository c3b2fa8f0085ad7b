"""Writes the site: one HTML page per view, its data file (data/<page>.json, and data/<page>.js: the same
document for the page to load from disk, where a browser refuses to fetch a file:// JSON), plotly.js
copied once from the plotly wheel (plotly.min.js, referenced by relative path: no CDN, no network), the
site's own script and style, and the verified observations' reports the charts link to."""
from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from harness.errors import InputError
from harness.site.collect import collect, hide

PAGES = (("overview", "Overview"), ("trends", "Trends"), ("frontier", "Frontier"), ("search", "Search history"),
         ("cost", "Cost"), ("runs", "Runs"))
#: An observation's files the site copies beside its charts (what a point links to).
REPORT_FILES = ("report.json", "report.md")


def plotly_js() -> str:
    """plotly.js as the plotly wheel ships it (imported here: plotly stays off every other command's path)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise InputError("site: the plotly package is missing; install perfdag's site extra: "
                         "pip install -c constraints/cpu.txt -e '.[site]'") from None
    return get_plotlyjs()


def _page_html(name: str, title: str, generated: str) -> str:
    here = ' class="here"'
    nav = " ".join(f'<a href="{p}.html"{here if p == name else ""}>{html.escape(t)}</a>' for p, t in PAGES)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>perfdag: {html.escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="site.css"></head>
<body data-page="{name}">
<header><strong>perfdag results</strong> <nav>{nav}</nav>
<span class="generated">built {html.escape(generated)} from the artifacts root; data: <a href="data/{name}.json">data/{name}.json</a></span></header>
<main id="page"><h1>{html.escape(title)}</h1><p id="how"></p><div id="content"></div></main>
<script src="plotly.min.js"></script>
<script src="data/{name}.js"></script>
<script src="site.js"></script>
</body></html>
"""


def _copy_reports(observations: dict, out: Path, root: Path) -> None:
    for ref, o in observations.items():
        if not o.get("verified") or not o.get("dir"):
            continue
        dest = out / "reports" / ref.replace("@", "-")
        dest.mkdir(parents=True, exist_ok=True)
        for name in REPORT_FILES:
            src = Path(o["dir"]) / name
            if src.is_file():
                (dest / name).write_text(hide(src.read_text(errors="replace"), root))


def build(store, out: Path, price_per_gpu_hour: float | None = None, generated: str = "") -> dict[str, int]:
    """Writes the site into `out` (replaced whole, as one rename: a reader never sees half a site) and
    returns each page's count of configurations, series or runs."""
    if price_per_gpu_hour is not None and not price_per_gpu_hour > 0:
        raise InputError(f"--price-per-gpu-hour {price_per_gpu_hour}: give a price above 0, e.g. 2.5")
    out = Path(out)
    if out.exists() and not (out / "site.js").is_file() and any(out.iterdir()):
        raise InputError(f"--out {out}: a directory that is not a perfdag site and not empty; name a new or "
                         "empty directory (the site replaces its --out whole)")
    js = plotly_js()
    pages = collect(store, price_per_gpu_hour)
    observations = pages.pop("_observations")
    root = Path(store.root)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "data").mkdir()
        (tmp / "plotly.min.js").write_text(js)
        assets = resources.files("harness.site") / "assets"
        for name in ("site.js", "site.css"):
            (tmp / name).write_text(assets.joinpath(name).read_text())
        for name, title in PAGES:
            text = hide(json.dumps(pages[name], indent=1, default=str), root)
            (tmp / "data" / f"{name}.json").write_text(text + "\n")
            (tmp / "data" / f"{name}.js").write_text(f"window.PERFDAG_DATA = {text};\n")
            (tmp / f"{name}.html").write_text(_page_html(name, title, generated))
        (tmp / "index.html").write_text(_page_html("overview", "Overview", generated))
        _copy_reports(observations, tmp, root)
        os.chmod(tmp, 0o755)
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"configurations": len(pages["overview"]["configurations"]), "trend series": len(pages["trends"]["series"]),
            "frontiers": len(pages["frontier"]["sweeps"]), "searched points": len(pages["search"]["series"]),
            "runs": len(pages["runs"]["runs"])}
