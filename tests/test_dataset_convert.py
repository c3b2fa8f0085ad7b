"""Issue 49 item 5: `python -m pipeline dataset convert` of the real datasets' published forms, on small files
written here in those forms: qwen3-vl's Hugging Face parquet (the Image feature's bytes), endpoints' BFCL v4
single-turn parquet (JSON-string columns) and endpoints' agentic JSONL (metadata rows, per-row fields)."""
from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO
from PIL import Image

from harness.converters import FORMATS, converter
from harness.mlperf.bfcl.worker import FLOOR
from harness.mlperf.benchmarks.qwen3_vl_235b_a22b import SYSTEM_PROMPT, user_text
from harness.sessions.trajectories import read_trajectory_file


def convert(fmt: str, src: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "dataset", "convert", "--format", fmt, str(src), str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def _image(fmt: str, colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (12, 9), colour).save(buf, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


def test_the_registry_names_one_module_per_format():
    assert {"qwen3-vl-parquet", "bfcl-parquet", "agentic-jsonl"} <= set(FORMATS)
    for name in FORMATS:
        module = converter(name)
        assert callable(module.convert) and module.DESCRIPTION


def test_qwen3_vl_parquet_becomes_the_references_chat(tmp_path):
    """Two Hugging Face split files (train read first); the image goes as the reference sends it: decoded and
    saved again by PIL in its format, `data:image/JPEG;base64`; categories printed as a Python list."""
    rows = [{"product_title": f"Mug {i}", "product_description": "<p>a mug</p>",
             "potential_product_categories": ["Home > Mugs", "Sports > Balls"],
             "product_image": {"bytes": _image("JPEG" if i else "PNG", (200, 10 * i, 30)), "path": f"{i}.jpg"},
             "ground_truth_category": "Home > Mugs", "ground_truth_brand": "Acme", "ground_truth_is_secondhand": i == 1}
            for i in range(3)]
    src = tmp_path / "catalogue"
    (src / "data").mkdir(parents=True)
    pd.DataFrame(rows[2:]).to_parquet(src / "data" / "test-00000-of-00001.parquet")
    pd.DataFrame(rows[:2]).to_parquet(src / "data" / "train-00000-of-00001.parquet")
    out = tmp_path / "qwen3-vl.jsonl"
    proc = convert("qwen3-vl-parquet", src, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "qwen3-vl-parquet: 3 rows" in proc.stdout
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["product_title"] for g in got] == ["Mug 0", "Mug 1", "Mug 2"]  # train, then test
    text = user_text("Mug 1", "<p>a mug</p>", ["Home > Mugs", "Sports > Balls"])
    assert "['Home > Mugs', 'Sports > Balls']" in text
    sysmsg, user = got[1]["messages"]
    assert sysmsg == {"role": "system", "content": SYSTEM_PROMPT} and user["content"][0] == {"type": "text", "text": text}
    url = user["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/JPEG;base64,") and got[0]["messages"][1]["content"][1]["image_url"]["url"] \
        .startswith("data:image/PNG;base64,")
    again = io.BytesIO()
    Image.open(io.BytesIO(rows[1]["product_image"]["bytes"])).save(again, format="JPEG")  # PIL's default quality
    assert base64.b64decode(url.split(",", 1)[1]) == again.getvalue() != rows[1]["product_image"]["bytes"]
    assert json.loads(got[1]["output"]) == {"category": "Home > Mugs", "brand": "Acme", "is_secondhand": True}
    assert got[1]["ground_truth_is_secondhand"] is True and got[1]["potential_product_categories"] == \
        ["Home > Mugs", "Sports > Balls"]
    # the scorer reads it: the truths as the answers score F1 1.0
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([{"seq_id": i, "qsl_idx": i, "data": g["output"].encode().hex().upper(), "token_count": 2}
                               for i, g in enumerate(got)]))
    score = subprocess.run([sys.executable, "-m", "pipeline", "score", "--benchmark", "qwen3-vl-235b-a22b", "--log",
                            str(log), "--dataset", str(out), "--json"], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert score.returncode == 0 and json.loads(score.stdout)["scores"]["f1"] == 1.0, score.stdout + score.stderr


def test_bfcl_parquet_is_sampled_as_the_accuracy_set(tmp_path):
    """Each category's share of each subset's first rows (62 / 10 / 10 %, a subset of at most 25 rows whole),
    subsets in sorted order; a subset of no category (live_relevance) left out; JSON strings decoded."""
    def rows(subset, n):
        return [{"messages": json.dumps([{"role": "user", "content": f"{subset} {i}"}]),
                 "tools": json.dumps([{"type": "function", "function": {"name": "f", "parameters": {}}}]),
                 "tool_choice": "auto", "ground_truth": json.dumps([{"f": {"a": [i]}}]), "func_description": "[]",
                 "subset": subset, "sample_id": f"{subset}_{i}"} for i in range(n)]
    df = pd.DataFrame(rows("simple_python", 40) + rows("live_simple", FLOOR) + rows("irrelevance", 50)
                      + rows("live_relevance", 5))
    src, out = tmp_path / "bfcl_v4_single_turn.parquet", tmp_path / "bfcl.jsonl"
    df.to_parquet(src)
    proc = convert("bfcl-parquet", src, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    counts = {s: sum(g["subset"] == s for g in got) for s in ("irrelevance", "live_simple", "simple_python")}
    assert counts == {"irrelevance": 5, "live_simple": FLOOR, "simple_python": 24}
    assert [g["subset"] for g in got] == ["irrelevance"] * 5 + ["live_simple"] * FLOOR + ["simple_python"] * 24
    assert got[0]["sample_id"] == "irrelevance_0" and got[0]["messages"] == [{"role": "user", "content": "irrelevance 0"}]
    assert got[0]["tools"][0]["function"]["name"] == "f" and got[0]["ground_truth"] == json.dumps([{"f": {"a": [0]}}])
    bad = tmp_path / "bad.parquet"
    df.drop(columns=["func_description"]).to_parquet(bad)
    proc = convert("bfcl-parquet", bad, tmp_path / "bad.jsonl")
    assert proc.returncode == 2 and "no column(s) func_description" in proc.stderr
    assert not (tmp_path / "bad.jsonl").exists()


def test_agentic_jsonl_keeps_metadata_rows_and_per_row_fields(tmp_path):
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}
    meta = {"_type": "dataset_metadata", "name": "agentic_coding", "generated_turns": 2}
    rows = [meta,
            {"conversation_id": "a", "turn": 2, "role": "assistant", "tool_calls": [call]},
            {"conversation_id": "a", "turn": 1, "role": "user", "content": "go", "system": "s", "model": "m",
             "max_completion_tokens": 64, "stream": True},
            {"conversation_id": "a", "turn": 3, "role": "tool", "tool_results": [{"tool_call_id": "c1", "content": "x"}],
             "delay_seconds": 0.5, "max_new_tokens": 8}]
    src, out = tmp_path / "agentic.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = convert("agentic-jsonl", src, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got[0] == meta and [g["turn"] for g in got[1:]] == [1, 2, 3]  # metadata first, turns in order
    assert got[1] == rows[2] and got[3] == rows[3]  # every field kept
    assert "request_fields: ['max_completion_tokens', 'max_new_tokens', 'model', 'stream']" in proc.stdout
    f = read_trajectory_file(out)
    assert f.metadata == [meta] and f.trajectories[0].turns[1].request["max_tokens"] == 8
    rows[1]["tool_calls"] = [{k: v for k, v in call.items() if k != "id"}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = convert("agentic-jsonl", src, tmp_path / "refused.jsonl")
    assert proc.returncode == 2 and "line 2: tool_calls[0] needs a non-empty string 'id'" in proc.stderr
    assert not (tmp_path / "refused.jsonl").exists()


@pytest.mark.parametrize("args, words", [
    (["--format", "nope"], "invalid choice: 'nope'"),
])
def test_bad_arguments_are_one_line(tmp_path, args, words):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "dataset", "convert", *args, "a", "b"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and words in proc.stderr


def test_an_existing_output_or_missing_source_is_refused(tmp_path):
    (tmp_path / "out.jsonl").write_text("keep me\n")
    proc = convert("agentic-jsonl", REPO / "harness/data/standins/agentic-trajectories.jsonl", tmp_path / "out.jsonl")
    assert proc.returncode == 2 and "exists; give a new file to write" in proc.stderr
    assert (tmp_path / "out.jsonl").read_text() == "keep me\n"
    proc = convert("qwen3-vl-parquet", tmp_path / "none", tmp_path / "x.jsonl")
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
