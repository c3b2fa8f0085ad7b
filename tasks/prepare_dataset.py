"""PrepareDataset: the benchmark samples as token ids, with their accuracy references.

For the built-in dataset the references are the unquantized model's greedy outputs (run once
here with transformers); other datasets bring their own reference outputs and MLPerf's
published reference scores.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.datasets import Sample, load_dataset, write_jsonl
from harness.versions import versions

from .base import StageTask, log, register
from .prepare_model import PrepareModel, checkpoint_dir

SAMPLES_FILE = "samples.jsonl"


@register
class PrepareDataset(StageTask):
    stage = "PrepareDataset"

    @property
    def reads(self):  # whose published scores apply matters only when they are used
        p = self.params
        own = p.dataset.format == "builtin" and p.accuracy.reference_scores == "auto"
        return ("dataset", "build.max_input_len", "accuracy.reference_scores") + (() if own else ("loadgen.mlperf_model",))

    def upstream(self):
        return {"model": self.clone(PrepareModel)}

    def tools(self):
        return versions("transformers", "torch")

    def key_inputs(self):
        d = self.params.dataset
        if d.path is None:
            return {}
        from harness.hashing import (
            dir_content_hash,  # a file enters by content, like checkpoints
        )
        return {"dataset_sha256": dir_content_hash(d.path, self.store.root / ".hashcache" / "files.json")}

    def build(self, out_dir: Path) -> dict:
        from transformers import AutoTokenizer

        from harness.accuracy import reference_scores_for, score_texts
        from harness.references import greedy_references

        p, d = self.params, self.params.dataset
        up = self.upstream()["model"]
        model_dir = checkpoint_dir(up.artifact_dir, up.manifest())
        samples = load_dataset(d.format, d.path, model_dir, d.num_samples, p.build.max_input_len)
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        if d.format == "builtin" and p.accuracy.reference_scores == "auto":
            refs = greedy_references(model_dir, [s.input_ids for s in samples], d.max_new_tokens, log=log.info)
            texts = tok.batch_decode(refs, skip_special_tokens=True)
            for s, ids, text in zip(samples, refs, texts):
                s.reference_ids, s.reference_text = ids, text
            scores = score_texts(texts, texts, [len(r) for r in refs])
            reference = {"source": "unquantized model, transformers greedy",
                         "scores": {k: scores[k] for k in ("rouge1", "rouge2", "rougeL", "tokens_per_sample")}}
        else:
            name = p.loadgen.mlperf_model if p.accuracy.reference_scores == "auto" else p.accuracy.reference_scores
            reference = {"source": f"MLPerf published scores of {name}", "scores": reference_scores_for(name)}
        write_jsonl(samples, out_dir / SAMPLES_FILE)
        (out_dir / "reference.json").write_text(json.dumps(reference, indent=2))
        return {"num_samples": len(samples), "reference": reference, "end_id": tok.eos_token_id,
                "pad_id": tok.pad_token_id, "tokenizer_dir": str(model_dir)}


def read_samples(artifact_dir: Path, manifest: dict) -> list[Sample]:
    return load_dataset("jsonl", artifact_dir / SAMPLES_FILE, None, manifest["num_samples"])
