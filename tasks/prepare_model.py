"""PrepareModel: the built-in tiny Llama, tiny LLaVA or tiny Whisper, or a user's Hugging Face checkpoint by content hash."""
from __future__ import annotations

from pathlib import Path

from harness.cache.hashing import dir_content_hash
from harness.cache.versions import versions
from harness.errors import ArtifactError, InputError
from harness.config.schema import BUILTIN_CHECKPOINTS
from harness.model.corpus import (
    SPEECH_STANDIN,
    corpus_sha256,
    speech_standin_sha256,
    standin_path,
    standin_rows,
    standins_sha256,
)
from harness.model.tiny import build_tiny_llama
from harness.model.speech import speech_clips
from harness.model.tiny_vl import VL_STANDIN, build_tiny_llava
from harness.model.tiny_whisper import build_tiny_whisper
from harness.sessions.lessons import lesson_rows
from tasks import lifecycle
from tasks.base import StageTask, log
from tasks.registry import register
from tasks.settings import may_write_root


#: The session stand-in (harness/data/standins/agentic-trajectories.jsonl), taught by its client turns.
TRAJECTORIES = "agentic-trajectories"


@register
class PrepareModel(StageTask):
    stage = "PrepareModel"
    self_contained = True  # nothing upstream

    @property
    def builtin(self) -> bool:
        return self.params.model.checkpoint in BUILTIN_CHECKPOINTS

    @property
    def vl(self) -> bool:
        return self.params.model.checkpoint == "builtin-vl"

    @property
    def speech(self) -> bool:
        return self.params.model.checkpoint == "builtin-whisper"

    @property
    def reads(self):  # a real checkpoint enters by content, not by path or label
        if self.speech:  # its architecture is fixed in its code; what it is taught, by these
            return ("model.checkpoint", "model.tiny.seed", "model.tiny.train_steps", "model.tiny.learning_rate")
        if self.vl:  # the LLaVA's architecture is fixed in its code; only the seed is a parameter
            return ("model.checkpoint", "model.tiny.seed")
        return ("model.tiny",) if self.builtin else ()

    def tools(self):
        return versions("torch", "transformers", "tokenizers") if self.builtin else {}

    def code(self):
        if self.speech:
            return ("harness.model.tiny_whisper", "harness.model.training", "harness.model.speech",
                    "harness.model.corpus")
        if self.vl:
            return ("harness.model.tiny_vl", "harness.model.tiny", "harness.model.training", "harness.model.corpus",
                    "harness.model.messages")
        sessions = ("harness.sessions.lessons", "harness.sessions.trajectories") if TRAJECTORIES in self.teach else ()
        return ("harness.model.tiny", "harness.model.training", "harness.model.corpus", "harness.model.messages",
                *sessions) if self.builtin else ()

    @property
    def teach(self) -> list[str]:
        return list(self.params.model.tiny.teach)

    def lessons(self) -> list[dict]:
        """What the tiny model is taught: each named stand-in's rows; a trajectory file's client turns
        and their recorded answers (harness/sessions/lessons.py)."""
        return [r for b in self.teach
                for r in (lesson_rows(standin_path(b)) if b == TRAJECTORIES else standin_rows(b))]

    def key_inputs(self):
        if self.speech:  # taught the stand-in's clips and transcripts
            return {"speech_standin_sha256": speech_standin_sha256()}
        if self.vl:  # its tokenizer is trained on the stand-in's texts
            return {"standins_sha256": standins_sha256([VL_STANDIN])}
        if self.builtin:
            teach = self.params.model.tiny.teach
            return {"corpus_sha256": corpus_sha256(), **({"standins_sha256": standins_sha256(teach)} if teach else {})}
        log.info("PrepareModel: hashing %s (%s)", self.params.model.checkpoint,
                 "every byte: --verify" if self.full_verify else "memoised by size, mtime, ctime and inode")
        return {"checkpoint_sha256": self.checkpoint_sha256(self.params.model.checkpoint, rehash=self.full_verify)}

    def checkpoint_sha256(self, checkpoint: str | Path, rehash: bool) -> str:
        return dir_content_hash(checkpoint, self.store.root / ".hashcache" / "files.json", update=may_write_root(),
                                rehash=rehash)

    def own_problems(self, manifest: dict, full: bool = False) -> list[str]:
        """A checkpoint outside the root is used as it is (Quantize reads it; a pass-through backend
        serves it): with `full`, every byte of it is read again (--verify, a launch that serves it)."""
        out = super().own_problems(manifest, full)
        if full and not self.builtin and not out:
            where = manifest.get("checkpoint")  # what the stages after it follow
            out = self.checkpoint_problems(checkpoint_dir(self.artifact_dir, manifest) if isinstance(where, str)
                                           else Path(self.params.model.checkpoint))
        return out

    def checkpoint_problems(self, where: Path) -> list[str]:
        """The external checkpoint, re-hashed, must hold the content this run keyed it by."""
        try:
            same = self.checkpoint_sha256(where, rehash=True) == self.key_doc["params"]["checkpoint_sha256"]
        except (OSError, InputError) as e:
            return [f"{self.stage} {self.key[:16]}: model.checkpoint {where}: {e}"]
        return [] if same else [f"{self.stage} {self.key[:16]}: model.checkpoint {where}: changed since this run "
                                "hashed it (a checkpoint enters by content: a rerun keys what it holds now)"]

    @property
    def moves_aside(self) -> bool:  # a manifest pointing at a checkpoint outside: nothing in it to keep
        return self.builtin

    def build(self, out_dir: Path) -> dict:
        if not self.builtin:  # published under a key made from its content: it must still hold that content
            if problems := self.checkpoint_problems(Path(self.params.model.checkpoint).resolve()):
                raise ArtifactError(f"PrepareModel {self.key[:16]}: not publishing; {lifecycle.rerun_hint()}",
                                    problems)
            return {"checkpoint": self.params.model.checkpoint}

        if self.speech:
            t = self.params.model.tiny
            info = build_tiny_whisper(out_dir / "model", speech_clips(SPEECH_STANDIN), seed=t.seed,
                                      steps=t.train_steps, learning_rate=t.learning_rate, log=log.info)
            return {"checkpoint": "model", "tiny_model": info}
        if self.vl:
            build_tiny_llava(out_dir / "model", [r["input"] for r in standin_rows(VL_STANDIN)],
                             seed=self.params.model.tiny.seed)
            log.info("PrepareModel: tiny LLaVA (untrained weights, tokenizer of the %s stand-in)", VL_STANDIN)
            return {"checkpoint": "model", "tiny_model": {"family": "llava"}}
        info = build_tiny_llama(self.params.model.tiny, out_dir / "model", log=log.info, rows=self.lessons())
        return {"checkpoint": "model", "tiny_model": info}


def checkpoint_dir(artifact_dir: Path, manifest: dict) -> Path:
    """Where a PrepareModel/Quantize artifact's checkpoint is (inside it, or an external path)."""
    return (artifact_dir / manifest["checkpoint"]).resolve()
