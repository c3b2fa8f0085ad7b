"""PrepareModel: the built-in tiny Llama, or a user's Hugging Face checkpoint by content hash."""
from __future__ import annotations

from pathlib import Path

from harness.hashing import dir_content_hash
from harness.corpus import corpus_sha256, standins_sha256
from harness.versions import versions

from .base import StageTask, log, register
from .settings import may_write_root


@register
class PrepareModel(StageTask):
    stage = "PrepareModel"
    self_contained = True  # nothing upstream

    @property
    def builtin(self) -> bool:
        return self.params.model.checkpoint == "builtin"

    @property
    def reads(self):  # a real checkpoint enters by content, not by path or label
        return ("model.tiny",) if self.builtin else ()

    def tools(self):
        return versions("torch", "transformers", "tokenizers") if self.builtin else {}

    def code(self):
        return ("harness.tiny_model", "harness.corpus") if self.builtin else ()

    def key_inputs(self):
        if self.builtin:
            teach = self.params.model.tiny.teach
            return {"corpus_sha256": corpus_sha256(), **({"standins_sha256": standins_sha256(teach)} if teach else {})}
        memo = self.store.root / ".hashcache" / "files.json"
        log.info("PrepareModel: hashing %s (memoised by size and mtime)", self.params.model.checkpoint)
        return {"checkpoint_sha256": dir_content_hash(self.params.model.checkpoint, memo, update=may_write_root())}

    def build(self, out_dir: Path) -> dict:
        if not self.builtin:
            return {"checkpoint": self.params.model.checkpoint}
        from harness.tiny_model import build_tiny_llama

        info = build_tiny_llama(self.params.model.tiny, out_dir / "model", log=log.info)
        return {"checkpoint": "model", "tiny_model": info}


def checkpoint_dir(artifact_dir: Path, manifest: dict) -> Path:
    """Where a PrepareModel/Quantize artifact's checkpoint is (inside it, or an external path)."""
    return (artifact_dir / manifest["checkpoint"]).resolve()
