"""PrepareDataset: the benchmark samples as token ids, with their accuracy references.

For the built-in dataset the references are the unquantized model's greedy outputs (run once
here with transformers); other datasets bring their own reference outputs. Which reference
scores apply is CheckAccuracy's business, so changing them never re-prepares the dataset.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.backends import backend_for
from harness.backends.checkpoint import TOKENIZER_FILES, copy_tokenizer_files
from harness.cache.hashing import dir_content_hash, file_sha256
from harness.cache.versions import versions
from harness.model.corpus import corpus_sha256
from harness.mlperf.benchmarks.whisper import PROMPT as TRANSCRIBE_PROMPT
from harness.model.datasets import Sample, load_dataset, write_jsonl
from harness.model.speech import read_manifest
from harness.model.tokenizer import load_tokenizer
from harness.model.references import greedy_references
from tasks.base import StageTask, log
from tasks.prepare_model import PrepareModel, checkpoint_dir
from tasks.registry import register
from tasks.settings import may_write_root

SAMPLES_FILE = "samples.jsonl"
AUDIO_DIR = "audio"  # an audio dataset's clips, copied byte for byte: what the measurements upload
TOKENIZER_DIR = "tokenizer"  # dataset.tokenizer's files, copied: the measurements read them from here


@register
class PrepareDataset(StageTask):
    stage = "PrepareDataset"

    @property
    def reads(self):  # prompts longer than the engine takes are cut; a server run elsewhere takes them whole
        return ("dataset",) if self.whole_prompts else ("dataset", "build.max_input_len")

    @property
    def whole_prompts(self) -> bool:
        return backend_for(self.params).launch.serves_elsewhere(self.params)
    # not self-contained: the tokenizer the measurements and the scorer use is the model's (or, with
    # dataset.tokenizer, its own copy of that one)

    @property
    def greedy_references(self) -> bool:
        """The built-in dataset, scored against the unquantized model's own outputs (there is no model
        with dataset.tokenizer: the dataset's own references stay)."""
        p = self.params
        return p.dataset.format == "builtin" and p.accuracy.reference_scores != "mlperf" and not p.dataset.tokenizer

    def upstream(self):
        if self.params.dataset.tokenizer:  # a server perfdag did not build: no model to prepare
            return {}
        return {"model": self.clone(PrepareModel)}

    def tools(self):
        return versions("transformers", "torch")

    def code(self):
        return ("harness.model.datasets", "harness.model.tokenizer", "harness.model.corpus", "harness.model.synthetic",
                "harness.model.messages",
                "harness.model.speech", "harness.mlperf.benchmarks.whisper",  # audio: the clips' checks, the prompt
                "harness.backends.checkpoint") + (  # which tokenizer files a dataset.tokenizer copies
            ("harness.model.references",) if self.greedy_references else ())

    def key_inputs(self):
        d = self.params.dataset
        out = {"greedy_references": self.greedy_references}
        if d.format in ("builtin", "synthetic"):  # prompts are cut from the shipped corpus
            out["corpus_sha256"] = corpus_sha256()
        if d.tokenizer is not None:  # its files only: the directory may hold a model's weights too
            out["tokenizer_files"] = {f: file_sha256(Path(d.tokenizer) / f) for f in (*TOKENIZER_FILES, "config.json")
                                      if (Path(d.tokenizer) / f).is_file()}
        if d.path is not None:
            out["dataset_sha256"] = dir_content_hash(d.path, self.store.root / ".hashcache" / "files.json",
                                                     update=may_write_root(), rehash=self.full_verify)
        if d.format == "librispeech":  # the clips the manifest names enter by content too
            out["audio_sha256"] = [dir_content_hash(c.audio, self.store.root / ".hashcache" / "files.json",
                                                    update=may_write_root(), rehash=self.full_verify)
                                   if c.audio.is_file() else f"missing: {c.audio}"
                                   for c in read_manifest(d.path, d.audio_dir)[:d.num_samples]]
        return out

    def build(self, out_dir: Path) -> dict:
        p, d = self.params, self.params.dataset
        if d.tokenizer:
            model_dir = out_dir / TOKENIZER_DIR
            model_dir.mkdir()
            copy_tokenizer_files(d.tokenizer, model_dir)
            if (Path(d.tokenizer) / "config.json").is_file():  # some tokenizers name their class only there
                shutil.copy2(Path(d.tokenizer) / "config.json", model_dir / "config.json")
        else:
            up = self.upstream()["model"]
            model_dir = checkpoint_dir(up.artifact_dir, up.manifest())
        cap = None if self.whole_prompts else p.build.max_input_len
        samples = load_dataset(d.format, d.path, model_dir, d.num_samples, cap, sha256=d.sha256,
                               max_line_bytes=d.max_line_bytes, synthetic=d.synthetic,
                               max_new_tokens=d.max_new_tokens, audio_dir=d.audio_dir, prompt=TRANSCRIBE_PROMPT)
        if d.format == "librispeech":
            copy_clips(samples, out_dir)
        tok = load_tokenizer(model_dir)
        source = "the dataset's reference outputs"
        if self.greedy_references:
            refs = greedy_references(model_dir, [s.input_ids for s in samples], d.max_new_tokens, log=log.info)
            texts = tok.batch_decode(refs, skip_special_tokens=True)
            for s, ids, text in zip(samples, refs, texts):
                s.reference_ids, s.reference_text = ids, text
            source = "unquantized model, transformers greedy"
        write_jsonl(samples, out_dir / SAMPLES_FILE)
        return {"num_samples": len(samples), "reference_source": source, "end_id": tok.eos_token_id,
                "pad_id": tok.pad_token_id,
                "tokenizer": TOKENIZER_DIR if d.tokenizer else os.path.relpath(model_dir, self.artifact_dir)}


def copy_clips(samples: list[Sample], out_dir: Path) -> None:
    """Each sample's clip into the artifact (audio/<index><suffix>), the sample pointing at its copy."""
    (out_dir / AUDIO_DIR).mkdir()
    for s in samples:
        cols = s.meta["columns"]
        src = Path(cols["audio"])
        rel = f"{AUDIO_DIR}/{s.index:06d}{src.suffix.lower()}"
        shutil.copyfile(src, out_dir / rel)
        cols["audio"] = rel


def read_samples(artifact_dir: Path, manifest: dict) -> list[Sample]:
    samples = load_dataset("jsonl", artifact_dir / SAMPLES_FILE, None, manifest["num_samples"])
    for s in samples:  # an audio dataset's clips, where this artifact holds them
        cols = s.meta.get("columns", {})
        if isinstance(cols.get("audio"), str):
            cols["audio"] = str((artifact_dir / cols["audio"]).resolve())
    return samples


def tokenizer_dir(artifact_dir: Path, manifest: dict) -> Path:
    return (artifact_dir / manifest["tokenizer"]).resolve()
