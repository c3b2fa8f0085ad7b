"""Deterministic synthetic MLPerf accuracy logs and datasets for the scorer cross-check.

`build(benchmark, tokenizer)` returns (DataFrame in the benchmark's MLPerf format, parsed
mlperf_log_accuracy.json entries).  Everything is seeded and uses its own word list and a
fixed byte-level tokenizer (`save_tokenizer`), so the golden numbers that MLCommons' scripts
printed on these fixtures (tests/golden/mlperf_scoring/*.json) stay valid; change nothing
here without re-running the scripts (tests/golden/mlperf_scoring/README.md says how).

Edge cases: (llama3.1-8b-edge also: whitespace-only, over-long, odd spacing, unicode, one word a
line) empty outputs, outputs of special tokens only, special tokens around text,
repeated qsl_idx entries (later ones differ and must be ignored), rows absent from the log,
log order shuffled as LoadGen's completion order is; GSM8K outputs with no number, commas,
negatives, decimals, "The answer is" (twice, or with no number after it), text after
"\\nQ:"; 405b UUID needles partly right or in upper case, "Answer: " twice or empty.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np

SEED = 20261125
ROWS = {"llama2-70b": 300, "llama3.1-8b": 300, "mixtral-8x7b": 450, "llama3.1-405b": 300, "llama3.1-8b-edge": 300}
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
# Words merged into single tokens (BPE merges), so token counts are not just byte counts.
MERGED_WORDS = ["Ġthe", "Ġanswer", "Ġis", "Ġand", "Ġof", "Ġmodel", "Ġrunning", "ing", "ed"]

WORDS = ("the a river city model runs quickly slowly answer question teacher student garden "
         "winter summer builds building built walks walking walked bright dark numbers market "
         "bread coffee train station morning evening window paper letter music painter library "
         "mountain valley engine signal bridge harbor island forest village doctor nurse farmer "
         "cat dog parrot horse carries carried carrying opens opened closes closed reads read").split()
NAMES = ["Karl", "Mia", "Zurich", "Oslo", "Ana", "Lagos", "Kyoto", "Chloé", "Łódź", "São Paulo"]


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------

def save_tokenizer(out_dir: str | Path) -> Path:
    """A byte-level BPE tokenizer with a fixed vocabulary (special tokens 0-3, the 256 byte
    symbols, a few merged words), saved as a HF tokenizer directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = []
    for w in MERGED_WORDS:
        for k in range(2, len(w) + 1):
            if w[:k] not in vocab:
                merges.append((w[:k - 1], w[k - 1]))
                vocab[w[:k]] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    out_dir = Path(out_dir)
    fast.save_pretrained(out_dir)
    return out_dir


def load_tokenizer(tok_dir: str | Path):
    """As the scripts load it (their extra arguments do not change decoding)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir), padding_side="left", use_fast=False)


# --------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------

def sentence(rng: random.Random, n: int | None = None) -> str:
    words = [rng.choice(WORDS) for _ in range(n or rng.randint(4, 12))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(NAMES))
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), str(rng.randint(2, 9999)))
    words[0] = words[0][:1].upper() + words[0][1:]
    if len(words[-1]) == 1:  # "a." reads as an initial to punkt, not as a sentence end
        words.append("river")
    return " ".join(words) + rng.choice([".", ".", ".", "!", "?"])


def paragraph(rng: random.Random, lo: int = 1, hi: int = 5) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(lo, hi)))


def variant(rng: random.Random, ref: str, kind: int) -> str:
    """A model output for reference ``ref``: 10 kinds, from exact to unrelated."""
    sents = re.split(r"(?<=[.!?]) ", ref)
    words = ref.split()
    if kind == 0:
        return ref
    if kind == 1:
        return " ".join(w for w in words if rng.random() > 0.3)
    if kind == 2:
        rng.shuffle(sents)
        return " ".join(sents)
    if kind == 6:
        return paragraph(rng)
    if kind == 7:
        return "\n  " + "  ".join(sents) + " \n\n"
    if kind == 8:
        return " ".join(w + rng.choice(["", "s", "ing", "ed"]) if w.isalpha() else w for w in words)
    if kind == 9:
        return ref[: max(1, len(ref) * 2 // 3)]
    return ref  # kinds 3-5 are handled by the caller (empty, specials only, specials around)


# --------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------

def to_hex(ids, dtype=np.int32) -> str:
    return np.asarray(ids, dtype=dtype).tobytes().hex().upper()


def make_log(rng: random.Random, outputs: dict[int, list[int]], tok) -> list[dict]:
    """LoadGen-like entries: completion order shuffled, ~8% of samples logged again later
    with different ids (the scripts keep the first), every 37th row never logged."""
    order = [i for i in outputs if i % 37 != 36]
    rng.shuffle(order)
    entries = [{"seq_id": 0, "qsl_idx": i, "data": to_hex(outputs[i]), "token_count": len(outputs[i])}
               for i in order]
    for i in rng.sample(order, max(1, len(order) // 12)):
        other = tok.encode(paragraph(rng, 1, 2), add_special_tokens=False)
        entries.insert(rng.randint(entries.index(next(e for e in entries if e["qsl_idx"] == i)) + 1, len(entries)),
                       {"seq_id": 0, "qsl_idx": i, "data": to_hex(other), "token_count": len(other)})
    for n, e in enumerate(entries):
        e["seq_id"] = n
    return entries


def encode_output(rng: random.Random, tok, text: str, kind: int) -> list[int]:
    ids = tok.encode(text, add_special_tokens=False)
    if tok.decode(ids) != text:  # the logged ids must decode to the intended output
        raise AssertionError(f"tokenizer does not round-trip {text!r}")
    if kind == 3:
        return []
    if kind == 4:
        return [tok.bos_token_id, tok.eos_token_id, tok.pad_token_id]
    if kind == 5:
        return [tok.bos_token_id] + ids + [tok.eos_token_id] + [tok.pad_token_id] * rng.randint(0, 3)
    return ids


def summary_rows(rng: random.Random, n: int, tok) -> tuple[list[str], dict[int, list[int]]]:
    refs, outputs = [], {}
    for i in range(n):
        ref = paragraph(rng)
        kind = i % 10
        refs.append(ref)
        outputs[i] = encode_output(rng, tok, variant(rng, ref, kind), kind)
    return refs, outputs


# --------------------------------------------------------------------------------------
# GSM8K, MBXP, 405b rows
# --------------------------------------------------------------------------------------

def edge_output(rng: random.Random, ref: str, kind: int) -> str | None:
    """llama3.1-8b-edge's extra outputs (None: keep summary_rows'): whitespace only, over-long (the
    reference over and over, past 128 tokens), odd spacing (tabs, doubled spaces, a space before
    the stop), unicode words and punctuation, newlines between every word."""
    if kind == 11:
        return rng.choice([" ", "\n\n", " \t \n "])
    if kind == 12:
        return " ".join([ref] * rng.randint(4, 9))
    if kind == 13:
        return re.sub(r" ", lambda _: rng.choice(["  ", "\t", " ", "   "]), ref).replace(".", " .")
    if kind == 14:
        return f"{ref} Łódź, São Paulo und Zürich: «{rng.choice(NAMES)}» — naïve café. 東京 river."
    if kind == 15:
        return "\n".join(ref.split())
    return None


def gsm8k_case(rng: random.Random, i: int) -> tuple[str, str]:
    """(reference answer, model output) for GSM8K row ``i``: 12 kinds of edge cases."""
    ans = rng.choice([rng.randint(0, 99), rng.randint(1000, 999999), -rng.randint(1, 500),
                      round(rng.uniform(0, 100), 1)])
    ref = str(ans)
    fluff = sentence(rng)
    k = i % 12
    if k == 0:
        out = f"{fluff} The answer is {ans:,}."
    elif k == 1:
        out = f"{fluff} So we get {rng.randint(1, 9)} and then {ans}"
    elif k == 2:
        out = f"{fluff} I do not know."  # no number (unless the sentence has one)
    elif k == 3:
        out = f"{fluff} The answer is {ans}.\nQ: {sentence(rng)} The answer is {rng.randint(1, 99)}."
    elif k == 4:
        out = f"The answer is {ans} but {fluff} {rng.randint(100, 200)} The answer is {rng.randint(1, 9)}"
    elif k == 5:
        out = f"{ans} is computed. The answer is unclear."  # delimiter without a number after it
    elif k == 6:
        out = f"{fluff} The answer is {ans}0" if isinstance(ans, float) else f"The answer is {ans + 1}."
    elif k == 7:
        out = f"The answer is -{abs(ans)}." if ans != 0 else "The answer is -0."
    elif k == 8:
        out = f"The answer is {ans:,.2f}" if not isinstance(ans, float) else f"The answer is .{str(ans)[-1]}"
    elif k == 9:
        out = f"{fluff}\nQ: what is {ans}?"  # the answer only after the cut
    elif k == 10:
        out = f"We have 1,2,3 and {ans}. The answer is{ans}"
    else:
        out = f"  {fluff}  The answer is  {ans}  "
    return ref, out


def mbxp_row(rng: random.Random, i: int) -> tuple[str, str, str, str]:
    """(id, input, gt_output, output) of an MBXP-like row."""
    lang = ["python", "cpp", "javascript", "python", "ruby"][i % 5]
    name = f"func_{i}"
    prompt = f"Write a {lang} function {name} that adds two numbers."
    test = f"assert {name}(2, 3) == 5"
    body = ["def {n}(a, b):\n    return a + b", "def {n}(a, b):\n    return a - b", "", "int {n}(int a, int b) {{ return a + b; }}"]
    return f"{lang}_{name}", prompt, test, body[rng.randrange(len(body))].format(n=name)


def uuid(rng: random.Random) -> str:
    h = "".join(rng.choice("0123456789abcdef") for _ in range(32))
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def niah_case(rng: random.Random, i: int) -> tuple[str, str]:
    needles = [uuid(rng) for _ in range(rng.randint(1, 4))]
    label = ", ".join(needles)
    k = i % 7
    if k == 0:
        pred = "The special magic uuids are: " + ", ".join(needles) + "."
    elif k == 1:
        pred = "Found " + needles[0] + " only."
    elif k == 2:
        pred = "They are " + ", ".join(reversed(needles)).upper()
    elif k == 3:
        pred = "I could not find any."
    elif k == 4:
        pred = " ".join(needles + [uuid(rng) for _ in range(2)])
    elif k == 5:
        pred = needles[0][:-1] + "z and " + uuid(rng)
    else:
        pred = ""
    return label, pred


def qa_case(rng: random.Random, i: int) -> tuple[str, str]:
    answer = rng.choice(NAMES + ["New York", "the red bridge", "forty two"])
    label = answer if i % 2 else f"{answer}|{rng.choice(NAMES)}"
    k = i % 8
    if k == 0:
        pred = f"Answer: {answer}"
    elif k == 1:
        pred = f"{sentence(rng)} Answer: wrong. Answer: {answer.upper()}"
    elif k == 2:
        pred = f"The place is {answer.replace(' ', '  ')} indeed"
    elif k == 3:
        pred = "Answer: "
    elif k == 4:
        pred = f"Answer: {rng.choice(WORDS)}"
    elif k == 5:
        pred = sentence(rng)
    elif k == 6:
        pred = ""
    else:
        pred = f"answer: {answer}"
    return label, pred


# --------------------------------------------------------------------------------------
# Per benchmark
# --------------------------------------------------------------------------------------

def build(benchmark: str, tok):
    """(DataFrame, log entries) for ``benchmark``."""
    import pandas as pd

    rng = random.Random(f"{SEED}-{benchmark}")
    n = ROWS[benchmark]
    if benchmark in ("llama2-70b", "llama3.1-8b"):
        refs, outputs = summary_rows(rng, n, tok)
        inputs = [f"Summarize: {sentence(rng)}" for _ in range(n)]
        df = pd.DataFrame({"input": inputs, "tok_input": [tok.encode(t, add_special_tokens=False) for t in inputs],
                           "output": refs})
        return df, make_log(rng, outputs, tok)
    if benchmark == "llama3.1-8b-edge":
        refs, outputs = summary_rows(rng, n, tok)
        for i in range(n):  # beyond llama3.1-8b's cases: what a small edge model may print
            text = edge_output(rng, refs[i], i % 20)
            if text is not None:
                outputs[i] = encode_output(rng, tok, text, 0)
        inputs = [f"Summarize: {paragraph(rng, 2, 4)}" for _ in range(n)]
        df = pd.DataFrame({"input": inputs, "tok_input": [tok.encode(t, add_special_tokens=False) for t in inputs],
                           "output": refs})
        return df, make_log(rng, outputs, tok)
    if benchmark == "mixtral-8x7b":
        rows, outputs = [], {}
        for i in range(n):
            kind = ["OpenOrca", "GSM8K", "MBXP"][i % 3]
            if kind == "OpenOrca":
                ref = paragraph(rng)
                k = (i // 3) % 10
                row = {"id": f"orca_{i}", "input": sentence(rng), "gt_output": ref}
                outputs[i] = encode_output(rng, tok, variant(rng, ref, k), k)
            elif kind == "GSM8K":
                ref, out = gsm8k_case(rng, i // 3)
                row = {"id": f"gsm8k_{i}", "input": sentence(rng), "gt_output": ref}
                outputs[i] = encode_output(rng, tok, out, 5 if (i // 3) % 13 == 0 else 0)
            else:
                id_, prompt, test, out = mbxp_row(rng, i // 3)
                row = {"id": id_, "input": prompt, "gt_output": test}
                outputs[i] = encode_output(rng, tok, out, 0)
            rows.append({"dataset": kind, **row, "ref_output": row["gt_output"]})
        df = pd.DataFrame(rows)
        df["tok_input"] = [tok.encode(t, add_special_tokens=False) for t in df["input"]]
        return df, make_log(rng, outputs, tok)
    if benchmark == "llama3.1-405b":
        rows, outputs = [], {}
        for i in range(n):
            metric = ["rouge", "niah_em", "qa_em"][i % 3]
            if metric == "rouge":
                label = paragraph(rng, 2, 6)
                k = (i // 3) % 10
                outputs[i] = encode_output(rng, tok, variant(rng, label, k), k)
                subset = "govreport"
            else:
                label, pred = (niah_case if metric == "niah_em" else qa_case)(rng, i // 3)
                outputs[i] = encode_output(rng, tok, pred, 5 if (i // 3) % 11 == 0 else 0)
                subset = "ruler_niah" if metric == "niah_em" else "longbench_qa"
            rows.append({"dataset": subset, "input": sentence(rng), "gt_output": label, "metric": metric})
        df = pd.DataFrame(rows)
        df["tok_input"] = [tok.encode(t, add_special_tokens=False) for t in df["input"]]
        return df, make_log(rng, outputs, tok)
    raise KeyError(benchmark)


def fake_mbxp_percent(langs_and_responses) -> float:
    """The stand-in MBXP evaluation both sides of the cross-check use: a response "passes"
    when it contains "a + b"; only the languages MLCommons' evaluate_mbxp scores count."""
    scored = [(lang, r) for lang, r in langs_and_responses
              if lang in ("cpp", "python", "php", "javascript", "ruby", "typescript")]
    return 100 * sum("a + b" in r for _, r in scored) / len(scored)


def fake_code_runner(rows, texts) -> dict:
    """``code_runner`` for score_log, computing :func:`fake_mbxp_percent`."""
    langs = [str(i).split("_", 1)[0] for i in rows["id"]]
    pct = fake_mbxp_percent(list(zip(langs, texts)))
    return {"mbxp": pct, "scored": len(texts), "not_scored": 0, "not_scored_languages": []}


def only_subset(log: list[dict], df, subset: str) -> list[dict]:
    """The log entries of rows whose ``dataset`` column is ``subset`` (a GSM8K-only mixtral log)."""
    return [e for e in log if df["dataset"].iloc[e["qsl_idx"]] == subset]
