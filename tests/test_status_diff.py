"""`status` says what changed: each changed input once, at the first stage it enters; downstream stages in
one line each; a config file or argv as its changed lines; only the stages the task builds; about 20
lines at 80 columns for one changed parameter."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from conftest import FAST, REPO, run_luigi

from pipeline.status import blob_diff, explained, print_status, why_lines

PBTXT_T = 'name: "tiny"\nbackend: "python"\nmax_batch_size: MBS\nengine: "../../BuildEngine/ENGINE/engine"\n' + "\n".join(
    f'parameters {{ key: "k{i}" value: {{ string_value: "{i}" }} }}' for i in range(100))


def pbtxt(batch: int, template: str = PBTXT_T, engine: str = "a" * 16) -> str:
    return template.replace("MBS", str(batch)).replace("ENGINE", engine)

ARGV = [["tritonserver", "--model-repository", "<root>/FillTritonRepo/{}/server_0", "--grpc-port", "<port>"]]


def key(c: str) -> str:
    return c * 64


def row(stage, k, status="missing", changed=(), built=True):
    return {"stage": stage, "key": k[:16], "full_key": k, "status": status, "changed": list(changed),
            "built_by_task": built}


def one_change_rows() -> list[dict]:
    """What _rows gives for `build.max_batch_size: 32 -> 8` on a fully cached FullRun."""
    def up(name, old, new, against):
        return {"field": f"upstream.{name}", "cached": key(old), "now": key(new), "compared_with": against[:16]}
    return [
        row("PrepareModel", key("1"), "cached"), row("PrepareDataset", key("2"), "cached"),
        row("Quantize", key("3"), "cached"),
        row("BuildEngine", key("b"), changed=[{"field": "params.build.max_batch_size", "cached": 32, "now": 8,
                                               "compared_with": "a" * 16}]),
        row("FillTritonRepo", key("d"), changed=[
            up("engine", "a", "b", "c" * 16),
            {"field": "params.build.max_batch_size", "cached": 32, "now": 8, "compared_with": "c" * 16},
            {"field": "executed.repos.server_0.tiny", "cached": pbtxt(32), "now": pbtxt(8, engine="b" * 16),
             "compared_with": "c" * 16}]),
        row("LaunchServers", key("f"), changed=[
            up("repo", "c", "d", "e" * 16),
            {"field": "executed.argv", "cached": json.loads(json.dumps(ARGV).replace("{}", "c" * 16)),
             "now": json.loads(json.dumps(ARGV).replace("{}", "d" * 16)), "compared_with": "e" * 16}]),
        *[row(s, key(c), changed=[up("servers", "e", "f", "0" * 16)])
          for s, c in (("RunLoadgen", "5"), ("RunAccuracy", "6"))],
        row("CheckAccuracy", key("7"), changed=[up("log", "8", "6", "9" * 16)]),
        row("RunTest06", key("4"), changed=[{"field": "*", "reason": "no cached artifact of this stage"}], built=False),
        row("FullRun", key("9"), changed=[up("performance", "4", "5", "8" * 16), up("accuracy", "3", "7", "8" * 16)]),
    ]


def test_one_change_is_named_once_and_downstream_stages_say_why_in_a_line():
    """The parameter is named at BuildEngine only; every later stage says which upstream changes; the
    stage FullRun does not build is left out."""
    shown = {r["stage"]: r for r in explained(one_change_rows())}
    assert "RunTest06" not in shown and list(shown)[:3] == ["PrepareModel", "PrepareDataset", "Quantize"]
    text = {s: why_lines(r["changed"], header=False) for s, r in shown.items()}
    assert text["BuildEngine"] == ["params.build.max_batch_size: 32 -> 8"]
    assert text["FillTritonRepo"][0] == "rebuilds: upstream BuildEngine changes"
    assert "max_batch_size: 32 -> 8" not in "\n".join(text["FillTritonRepo"])  # named once, above
    # config.pbtxt's changed line; the engine's path names the new BuildEngine key, said above
    assert text["FillTritonRepo"][1:] == ["executed.repos.server_0.tiny:\n  - max_batch_size: 32\n  + max_batch_size: 8"]
    assert text["RunLoadgen"] == ["rebuilds: upstream LaunchServers changes"]
    assert text["FullRun"] == ["rebuilds: upstream RunLoadgen, CheckAccuracy change"]


def test_a_config_file_and_an_argv_show_their_changed_lines_only():
    """config.pbtxt: its one changed line, old and new, not 103 lines nor a cut prefix; an argv: the
    argument that differs, not the same first 60 characters on both sides."""
    assert blob_diff(pbtxt(32), pbtxt(8)) == ["- max_batch_size: 32", "+ max_batch_size: 8"]
    old = json.loads(json.dumps(ARGV).replace("{}", "c" * 16))
    new = json.loads(json.dumps(ARGV).replace("{}", "d" * 16))
    assert blob_diff(old, new) == [f"- [0] <root>/FillTritonRepo/{'c' * 16}/server_0",
                                   f"+ [0] <root>/FillTritonRepo/{'d' * 16}/server_0"]
    many = blob_diff(pbtxt(1), pbtxt(1, PBTXT_T.replace("string_value", "int_value")))
    assert len(many) == 7 and many[-1] == "… 194 more changed lines (status --full)"
    assert blob_diff(32, 8) is None and blob_diff("one line", "other") is None


def test_one_change_fits_twenty_lines_at_80_columns(monkeypatch, capsys):
    """The whole status of one changed parameter: at most 20 lines, none wider than 80 columns."""
    monkeypatch.setenv("COLUMNS", "80")
    print_status(one_change_rows())
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= 20, "\n".join(lines)
    assert max(len(x) for x in lines) <= 80
    assert sum("max_batch_size: 32 -> 8" in x for x in lines) == 1
    assert "    - max_batch_size: 32" in lines and "    + max_batch_size: 8" in lines
    assert not any("FillTritonRepo/" in x for x in lines)  # the argv names the new repository, nothing more


def test_a_real_status_for_one_changed_parameter(built_fast, tmp_path):
    """Against a real root: the changed parameter once, config.pbtxt's changed line, and <= 20 lines at 80
    columns, with the stages FullRun would build and no other."""
    root = tmp_path / "a"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs"))
    run_luigi("FillTritonRepo", "--overrides", FAST, artifacts=root)
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root), "COLUMNS": "80"}
    out = subprocess.run([sys.executable, "-m", "pipeline", "status", "--overrides", f"{FAST},build.max_batch_size=8"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert len(lines) <= 20 and max(len(x) for x in lines) <= 80, out
    assert sum("max_batch_size" in x and "->" in x for x in lines) == 1, out
    assert any(x.strip().startswith("- ") and "max_batch_size" in x for x in lines), out  # config.pbtxt's line
    assert any(x.strip().startswith("+ ") and "max_batch_size" in x for x in lines), out
    assert "rebuilds: upstream BuildEngine changes" in out and "RunTest06" not in out
