"""A LoadGen run (real LoadGen, perfdag's TestSettings) against a SUT that answers every sample at once
with the answer it is given: the logs of a shortened run for the submission-tree tests.

    python tests/answering_sut.py CONFIG.json

CONFIG: {"out_dir", "scenario", "mode", "settings" (harness.loadgen.settings keys), "answers": [hex per
sample], "tokens": [count per sample], "audit": text of an audit.config or null}. A streamed scenario
reports each answer's first 4 bytes as its first token. Run in its own process: LoadGen reads its
built-in mlperf.conf once per process. Not a benchmark of anything: the tree tests check files.
"""
from __future__ import annotations

import array
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlperf_loadgen as lg  # noqa: E402

from harness.loadgen.settings import build_test_settings  # noqa: E402


def main(config_path: str) -> None:
    cfg = json.loads(Path(config_path).read_text())
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    answers = [bytes.fromhex(h) for h in cfg["answers"]]
    tokens = cfg["tokens"]
    if cfg.get("audit"):
        (out / "audit.config").write_text(cfg["audit"])
    os.chdir(out)  # LoadGen reads audit.config from its working directory
    settings, perf = build_test_settings(lg, cfg["scenario"], cfg["mode"], cfg["settings"], len(answers), out)
    streamed = cfg["scenario"] != "Offline"
    kept = []

    def issue(queries):
        for q in queries:
            data = answers[q.index]
            buf = array.array("B", data)
            kept.append(buf)
            addr, _ = buf.buffer_info()
            if streamed:
                first = array.array("B", data[:4])
                kept.append(first)
                lg.FirstTokenComplete([lg.QuerySampleResponse(q.id, first.buffer_info()[0], len(first))])
            lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, addr, len(data), tokens[q.index])])

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(len(answers), perf, lambda idx: None, lambda idx: None)
    log = lg.LogOutputSettings()
    log.outdir = str(out)
    log.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = log
    log_settings.enable_trace = False
    lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)


if __name__ == "__main__":
    main(sys.argv[1])
