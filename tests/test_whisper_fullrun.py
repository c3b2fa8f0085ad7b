"""whisper on CPU end to end: luigi FullRun of params/standins/whisper.yaml. PrepareModel teaches the tiny
Whisper (model.checkpoint: builtin-whisper) the shipped clips, BuildEngine saves it for a real
`transformers serve`, which answers the transcription core's multipart uploads on
/v1/audio/transcriptions; real LoadGen in Offline; CheckAccuracy scores the logged label indices as
accuracy_eval.py does, against the stand-in's own transcripts."""
from __future__ import annotations

import json

import numpy as np
from conftest import REPO, openai_servers_under, run_luigi, run_records, statuses

from harness.mlperf.benchmarks.whisper import LABELS
from harness.model.corpus import SPEECH_STANDIN

PARAMS = REPO / "params" / "standins" / "whisper.yaml"


def _one(root, stage: str):
    (d,) = [d for d in (root / stage).iterdir() if not d.name.startswith(".")]
    return d


def test_a_fullrun_of_the_whisper_standin_is_valid_and_passes(tmp_path):
    root = tmp_path / "artifacts"
    proc = run_luigi("FullRun", "--params-file", str(PARAMS), artifacts=root, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "result     VALID" in proc.stdout, out[-4000:]
    assert "accuracy   PASS" in proc.stdout, out[-4000:]
    (first,) = run_records(root)
    assert statuses(first)["PrepareModel"] == "built"
    engine = _one(root, "BuildEngine") / "engine"
    assert json.loads((engine / "config.json").read_text())["architectures"] == ["WhisperForConditionalGeneration"]
    result = json.loads((_one(root, "RunLoadgen") / "result.json").read_text())
    assert result["scenario"] == "Offline" and result["valid"] == "VALID"
    assert result["harness"]["methods"]["output_tokens"] == "tokenizer+end"  # transformers serve sends no usage
    conf = (_one(root, "RunLoadgen") / "user.conf").read_text()
    assert "whisper.Offline." in conf or "*.Offline." in conf
    # what LoadGen logged: every clip once, the transcription as the reference SUT hands it over
    transcripts = [r["transcript"] for r in json.loads(SPEECH_STANDIN.read_text())]
    entries = json.loads((_one(root, "RunAccuracy") / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(24))
    heard = {e["qsl_idx"]: "".join(LABELS[int(c)] for c in np.frombuffer(bytes.fromhex(e["data"]), dtype="<i8"))
             for e in entries}
    exact = sum(heard[i] == transcripts[i] for i in range(24))
    assert exact >= 20, heard
    assert all(e["token_count"] >= 2 for e in entries)
    acc = json.loads((_one(root, "CheckAccuracy") / "accuracy.json").read_text())
    assert acc["benchmark"] == "whisper" and acc["passed"] and acc["reference_scores"]["accuracy"] == 100.0
    assert acc["scores"]["accuracy"] >= 99.0 and acc["samples"] == 24
    assert openai_servers_under(root) == []
