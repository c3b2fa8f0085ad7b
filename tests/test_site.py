"""The results site (`python -m pipeline site`), as a user sees it: built from a root of three real nights
over two engines (FAST's engines of batch 4 and 8, at concurrency 4; the third night with a parameter
changed), opened from disk in headless Chromium (Debian's `chromium`, driven by playwright) with
every network request refused: every page loads without a console error, its charts hold the expected
points, and a page whose data file is gone says so and fails the check. The site holds no path of the
build host and no network URL of its own."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAST, REPO, copied_root, run_luigi

from harness.site.write import PAGES

pytestmark = pytest.mark.timeout(1800)  # the first test waits for the nights (and built_fast)

TINY = (f"{FAST},dataset.num_samples=16,loadgen.min_duration_ms=500,loadgen.min_query_count=16,"
        "accuracy.num_samples=8,accuracy.target=0.05,loadgen.scenario=Offline,harness.stream=true,"
        "loadgen.offline_expected_qps=auto")
NIGHTS = ("2026-11-01", "2026-11-02", "2026-11-03")
ENGINES, LEVELS = (4, 8), (4,)  # a level more costs each night a measurement per engine
PRICE = 2.5


@pytest.fixture(scope="module")
def nights_root(built_fast, tmp_path_factory):
    """Three nights of one sweep over two engines; the third changes a LoadGen parameter and
    refreshes a site at its end (`Nightly --site`, into <tmp>/nightly-site)."""
    tmp = tmp_path_factory.mktemp("site")
    sweep = tmp / "frontier-nightly.yaml"
    sweep.write_text(f"name: frontier-nightly\nbase: {REPO / 'params' / 'default.yaml'}\noverrides: \"{TINY}\"\n"
                     f"grid:\n  build.max_batch_size: {list(ENGINES)}\n  harness.max_in_flight: {list(LEVELS)}\n")
    with copied_root(built_fast, tmp / "artifacts") as root:
        for i, date in enumerate(NIGHTS):
            extra = ("--overrides", "loadgen.min_query_count=24", "--site", str(tmp / "nightly-site")) \
                if i == 2 else ()
            run_luigi("Nightly", "--date", date, "--sweep", str(sweep), *extra, artifacts=root, check=False)
            assert (root / "Nightly" / "frontier-nightly" / date / "nightly.json").is_file(), date
        yield root


def build_site(root: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "site", "--out", str(out), *extra], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)})


@pytest.fixture(scope="module")
def site(nights_root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built") / "site"
    proc = build_site(nights_root, out, "--price-per-gpu-hour", str(PRICE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "perfdag site: " in proc.stdout and f"{len(ENGINES) * len(LEVELS)} configurations" in proc.stdout, \
        proc.stdout
    return out


def data(site: Path, page: str) -> dict:
    doc = json.loads((site / "data" / f"{page}.json").read_text())
    js = (site / "data" / f"{page}.js").read_text()
    assert json.loads(js.removeprefix("window.PERFDAG_DATA = ").rstrip().rstrip(";")) == doc  # one document, twice
    return doc


def test_each_page_has_its_data_file_with_every_night_engine_and_run(site, nights_root):
    over = data(site, "overview")
    assert len(over["configurations"]) == len(ENGINES) * len(LEVELS)
    for c in over["configurations"]:
        assert c["date"] == NIGHTS[-1] and c["compared_with"] == NIGHTS[-2]
        assert c["valid"].endswith("/1") and c["checks"]  # the night's own verdicts, with their evidence
        assert all(o["verified"] and (site / o["report"]).is_file() for o in c["observations"])
        tps = next(k for k in c["checks"] if k["metric"] == "tokens_per_s")
        assert tps["judged"] and tps["verdict"] == "not judged" and tps["now"]["n"] == 1  # one repeat: said so
    assert [c["regression"] for c in over["configurations"]] == sorted(
        (c["regression"] for c in over["configurations"]), reverse=True)  # regressions first

    trends = data(site, "trends")
    assert len(trends["series"]) == len(ENGINES) * len(LEVELS)
    for s in trends["series"]:
        assert [n["date"] for n in s["nights"]] == list(NIGHTS)
        assert [len(m["points"]) for m in s["metrics"].values()] and all(
            len(m["points"]) == 3 for m in s["metrics"].values())
        changed = [n for n in s["nights"] if n["param_changes"]]
        assert [n["date"] for n in changed] == [NIGHTS[2]]
        assert {c["param"] for c in changed[0]["param_changes"]} == {"loadgen.min_query_count"}

    frontier = data(site, "frontier")
    (sweep,) = frontier["sweeps"]
    assert sweep["engine_keys"] == ["build.max_batch_size"] and sweep["level_key"] == "harness.max_in_flight"
    assert [n["date"] for n in sweep["nights"]] == list(NIGHTS)
    for n in sweep["nights"]:
        assert n["per"] == "system" and len(n["rows"]) == len(ENGINES) * len(LEVELS)  # CPU: no GPU serves
        assert {r["engine"] for r in n["rows"]} == {f"build.max_batch_size={e}" for e in ENGINES}
        assert any(r["on_front"] for r in n["rows"])

    cost = data(site, "cost")
    assert cost["price_per_gpu_hour"] == PRICE and "3600" in cost["formula"]
    assert cost["power_measured"] is False and "no power figure was measured" in cost["no_power"]
    for n in cost["sweeps"][0]["nights"]:
        for p in n["points"]:
            assert p["cost_per_million_tokens"] == pytest.approx(PRICE / (p["tokens_per_s"] * 3600) * 1e6)
            assert p["tokens_per_s_per_kw"] is None

    runs = data(site, "runs")["runs"]
    assert len(runs) >= len(NIGHTS) and all(r["outcome"] for r in runs)
    assert data(site, "search")["series"] == []  # no point of this sweep is a search


def test_the_site_holds_no_path_of_the_build_host_and_no_network_url(site, nights_root):
    """Every file but plotly.js (the wheel's, copied unchanged) is checked: the root's path, the temporary
    directory's and the home directory's appear nowhere, and no page or data file names an http(s) URL (the
    copied reports may: their server-side metrics name each server's endpoint, as the run recorded it)."""
    import plotly.offline

    assert (site / "plotly.min.js").read_text() == plotly.offline.get_plotlyjs()
    host_paths = {str(nights_root), str(nights_root.resolve()), str(Path.home()), str(REPO)}
    for f in site.rglob("*"):
        if not f.is_file() or f.name == "plotly.min.js":
            continue
        text = f.read_text()
        assert not [p for p in host_paths if p in text], f
        if "reports" not in f.relative_to(site).parts:  # copied reports name the servers they measured
            assert "http://" not in text and "https://" not in text, f
    for page, _ in PAGES:
        html = (site / f"{page}.html").read_text()
        assert '<script src="plotly.min.js">' in html and f'<script src="data/{page}.js">' in html


def test_nightly_refreshes_the_site_with_its_night(nights_root):
    site = nights_root.parent / "nightly-site"
    over = json.loads((site / "data" / "overview.json").read_text())
    assert {c["date"] for c in over["configurations"]} == {NIGHTS[-1]}
    assert len(over["configurations"]) == len(ENGINES) * len(LEVELS)
    assert (site / "plotly.min.js").is_file() and (site / "index.html").is_file()


def test_a_bad_price_or_a_foreign_out_directory_is_one_line(nights_root, tmp_path):
    proc = build_site(nights_root, tmp_path / "s", "--price-per-gpu-hour", "0")
    assert proc.returncode == 2 and "--price-per-gpu-hour 0.0: give a price above 0" in proc.stderr
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    proc = build_site(nights_root, tmp_path / "mine")
    assert proc.returncode == 2 and "not a perfdag site and not empty" in proc.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me" and "Traceback" not in proc.stderr


def test_a_tampered_observation_is_shown_refused_and_its_report_not_copied(nights_root, tmp_path):
    """An observation whose report was edited after it was published is what `history` refuses: the site
    lists it as refused, with why, and copies nothing of it."""
    root = tmp_path / "artifacts"
    shutil.copytree(nights_root, root, ignore=shutil.ignore_patterns("PrepareModel", "Quantize", "BuildEngine"))
    night = json.loads((root / "Nightly" / "frontier-nightly" / NIGHTS[-1] / "nightly.json").read_text())
    row = night["rows"][0]
    report = root / "FullRun" / row["fullrun_key"] / "report.json"
    report.write_text(report.read_text().replace('"passed": true', '"passed": false', 1) + " ")
    proc = build_site(root, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    (c,) = [c for c in data(tmp_path / "site", "overview")["configurations"]
            if all(c["point"][k] == row[k] for k in c["point"])]
    (o,) = c["observations"]
    assert o["ref"] == f"{row['fullrun_key']}@{row['observation']}" and not o["verified"] and o["refused"]
    assert o["report"] is None and not (tmp_path / "site" / "reports" / o["ref"].replace("@", "-")).exists()


def test_a_night_naming_a_path_as_its_observation_writes_nothing_outside_the_site(tmp_path):
    """nightly.json is a file in the root: an observation named `<key>@../../x` is refused, never a path."""
    root = tmp_path / "artifacts"
    night = root / "Nightly" / "n" / "2026-11-01"
    night.mkdir(parents=True)
    rows = [{"scenario": "Offline", "tokens_per_s": 10.0, "valid": True, "fullrun_key": "0123456789abcdef",
             "observation": "../../../escaped", "repeat": 1, "x": 1}]
    night.joinpath("nightly.json").write_text(json.dumps({"date": "2026-11-01", "rows": rows, "varied": ["x"],
                                                          "points": [], "param_changes": {}}))
    proc = build_site(root, tmp_path / "out" / "site")
    assert proc.returncode == 0, proc.stderr
    (series,) = data(tmp_path / "out" / "site", "trends")["series"]
    (o,) = series["nights"][0]["observations"]
    assert o["refused"] == "not an observation's name (KEY16@OBSERVATION)" and o["report"] is None
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "out" / "escaped").exists()


def test_a_night_of_performance_runs_is_verified_on_the_site(built_fast, tmp_path):
    """`Nightly --no-accuracy`: its points are PerformanceRuns (no accuracy run); the site finds each point's
    observation under that stage and verifies it, as it does a FullRun's."""
    sweep = tmp_path / "perf-nightly.yaml"
    sweep.write_text(f"name: perf-nightly\nbase: {REPO / 'params' / 'default.yaml'}\noverrides: \"{TINY}\"\n"
                     "grid:\n  harness.max_in_flight: [2]\n")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        run_luigi("Nightly", "--date", NIGHTS[0], "--sweep", str(sweep), "--no-accuracy", artifacts=root, check=False)
        (row,) = json.loads((root / "Nightly" / "perf-nightly" / NIGHTS[0] / "nightly.json").read_text())["rows"]
        assert (root / "PerformanceRun" / row["fullrun_key"]).is_dir() and row["accuracy_passed"] is None, row
        proc = build_site(root, tmp_path / "site")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        seen = [o for c in data(tmp_path / "site", "overview")["configurations"] for o in c["observations"]]
        assert seen and all(o["verified"] and o["ref"].startswith(row["fullrun_key"]) for o in seen), seen


# ---- in a real browser ----

@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium (`apt-get install chromium`; .ci/run installs it): where it is missing the browser
    tests skip, unless PERFDAG_REQUIRE_CHROMIUM=1 (CI), where they fail."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        why = "no chromium on PATH (apt-get install -y chromium)"
        if os.environ.get("PERFDAG_REQUIRE_CHROMIUM") == "1":
            pytest.fail(why + " (PERFDAG_REQUIRE_CHROMIUM=1)", pytrace=False)
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield browser
        browser.close()


def open_page(browser, site: Path, page: str, shots: Path | None = None) -> dict:
    """The page opened from disk, every request that is not file:// refused: what it logged, what it asked
    of the network, and each chart's trace point counts."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    asked: list[str] = []

    def refuse(route):
        asked.append(route.request.url)
        route.abort()

    ctx.route(lambda url: not url.startswith("file://"), refuse)
    tab = ctx.new_page()
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.goto((site / f"{page}.html").as_uri())
    tab.wait_for_load_state("load")
    rendered = tab.evaluate("document.body.dataset.rendered === 'yes'")
    charts = tab.evaluate("""[...document.querySelectorAll('.js-plotly-plot')].map(
        d => ({id: d.id, points: d.data.map(t => (t.x || []).length)}))""")
    text = tab.inner_text("#content")
    if shots is not None:
        tab.screenshot(path=str(shots / f"{page}.png"), full_page=False)
    out = {"errors": errors, "asked": asked, "rendered": rendered, "charts": charts, "text": text, "tab": tab,
           "ctx": ctx}
    return out


def test_every_page_renders_from_disk_without_network_with_its_points(chromium, site, tmp_path):
    shots = Path(os.environ.get("PERFDAG_SITE_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    seen = {}
    for page, _ in PAGES:
        got = open_page(chromium, site, page, shots)
        assert got["errors"] == [] and got["asked"] == [] and got["rendered"], (page, got["errors"], got["asked"])
        seen[page] = got
        assert (shots / f"{page}.png").stat().st_size > 10_000
    # Trends: a chart per point and metric, each night one median; the repeats' dots beside them.
    trends = seen["trends"]["charts"]
    assert len(trends) >= len(ENGINES) * len(LEVELS) and all(c["points"][0] == len(NIGHTS) for c in trends), trends
    # Frontier: per engine its two levels, and the front; the night selector redraws another night.
    (front,) = seen["frontier"]["charts"]
    assert front["points"][:2] == [len(LEVELS)] * len(ENGINES) and front["points"][2] >= 1
    tab = seen["frontier"]["tab"]
    assert "night 2026-11-03" in tab.evaluate("document.getElementById('frontier-0').layout.title.text")
    tab.select_option("#night-0", "0")
    assert "night 2026-11-01" in tab.evaluate("document.getElementById('frontier-0').layout.title.text")
    (cost,) = seen["cost"]["charts"]
    assert sum(cost["points"]) == len(ENGINES) * len(LEVELS)
    assert "no power figure was measured" in seen["cost"]["text"]
    assert f"{len(ENGINES) * len(LEVELS)} configuration(s)" in seen["overview"]["text"] and "LoadGen's" in seen["overview"]["text"]
    assert "run(s):" in seen["runs"]["text"]
    for got in seen.values():
        got["ctx"].close()


def test_a_page_whose_data_file_is_removed_fails_the_check(chromium, site, tmp_path):
    broken = tmp_path / "site"
    shutil.copytree(site, broken)
    (broken / "data" / "trends.js").unlink()
    got = open_page(chromium, broken, "trends")
    assert not got["rendered"] and got["charts"] == []
    assert any("data file (data/trends.js) is missing" in e for e in got["errors"]), got["errors"]
    got["ctx"].close()
