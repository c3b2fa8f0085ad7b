"""load_tokenizer gives what AutoTokenizer gives (class, vocabulary, special tokens, encodings and
decodings) without importing torch, for each kind of tokenizer perfdag's stand-ins save, and leaves
to AutoTokenizer what it cannot decide alone."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

from harness.model.tokenizer import load_tokenizer

TEXTS = ["Hello world", "  two  spaces and\ttabs\n", "naïve café – ünïcödé 你好", "<s> special </s> inside",
         "", "x" * 300]


def _llama_like(tmp_path):
    from harness.model.tiny import train_tokenizer
    train_tokenizer(300, tmp_path, corpus=False, extra_texts=TEXTS * 3)
    return tmp_path


def _whisper_like(tmp_path):
    from harness.model.tiny_whisper import train_tokenizer
    train_tokenizer([t for t in TEXTS if t], tmp_path, 300).save_pretrained(tmp_path)
    return tmp_path


@pytest.mark.parametrize("make", [_llama_like, _whisper_like])
def test_same_tokenizer_as_autotokenizer(make, tmp_path):
    from transformers import AutoTokenizer
    path = make(tmp_path)
    ours, auto = load_tokenizer(path), AutoTokenizer.from_pretrained(str(path))
    assert type(ours) is type(auto)
    assert ours.get_vocab() == auto.get_vocab() and ours.all_special_tokens == auto.all_special_tokens
    for text in TEXTS:
        for special in (True, False):
            ids = auto.encode(text, add_special_tokens=special)
            assert ours.encode(text, add_special_tokens=special) == ids
            assert ours.decode(ids, skip_special_tokens=True) == auto.decode(ids, skip_special_tokens=True)
    assert ours.batch_decode([[1, 2, 3], [40, 41]]) == auto.batch_decode([[1, 2, 3], [40, 41]])


def test_loads_without_torch(tmp_path):
    path = _llama_like(tmp_path)
    code = ("import sys; from harness.model.tokenizer import load_tokenizer; "
            f"t = load_tokenizer({str(path)!r}); t.encode('a b'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


@pytest.mark.parametrize("config", [
    None,  # no tokenizer_config.json
    "not json",
    {"tokenizer_class": "NoSuchTokenizerAnywhere"},
    {"tokenizer_class": "__import__('os')"},
    {"tokenizer_class": "PreTrainedTokenizerFast", "auto_map": {"AutoTokenizer": ["x.Y", None]}},
])
def test_autotokenizer_decides_what_the_config_does_not_name(config, tmp_path, monkeypatch):
    import transformers

    from harness.model import tokenizer as module
    asked = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(lambda cls, p: asked.append(p)))
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    module.load_tokenizer(tmp_path)
    assert asked == [str(tmp_path)]
