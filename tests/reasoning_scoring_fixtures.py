"""Deterministic synthetic deepseek-r1 and gpt-oss-120b accuracy logs and datasets for the scorer
cross-check (tests/golden/mlperf_scoring/reasoning.json holds what MLCommons' scripts printed on
them; change nothing here without re-running the scripts, see that directory's README).

`build(benchmark, tokenizer)` returns (DataFrame in the benchmark's MLPerf format, parsed
mlperf_log_accuracy.json entries). The tokenizer is tests/mlperf_scoring_fixtures.save_tokenizer's.

Edge cases: multiple choice as "Answer: C", "ANSWER: (B)", "Final Answer = D", "C." alone, an
option past the row's last one, "Answer: Because", lower case, a list repr, escaped newlines,
MMLU-Pro's lone-letter fallback (which the word "I" or "a" also satisfies); several \\boxed{},
nested braces, an unclosed box, \\frac vs a/b vs 0.5, unreduced fractions, units (\\text{ cm},
degrees), spaces, "x = 5", thousands commas, tuples vs intervals, sympy-equal polynomials; AIME
boxed vs "Answer: N", "Answer: 12." (not read), out of range, leading zeros; code blocks first vs
last, none, plain ```; gpt-oss harmony analysis/final sections (bold, a corrupted final marker, an
answer only in the analysis); a long chain of thought (thousands of tokens); no answer at all;
empty outputs and special tokens only; missing ground truth; repeated qsl_idx (deepseek: first
wins; gpt-oss: all count); rows absent from the log; shuffled log order.
"""
from __future__ import annotations

import hashlib
import random

import numpy as np

SEED = 20261126
ROWS = {"deepseek-r1": 420, "gpt-oss-120b": 360}
FILLER = ("Let me think about this step by step. First we consider the given quantities and what the "
          "question asks. Then we check each case carefully, since a small slip changes the result. ")


def to_hex(ids) -> str:
    return np.asarray(ids, dtype=np.int32).tobytes().hex().upper()


def fake_code_pass(question_id: str, code: str) -> bool:
    """The stand-in for LiveCodeBench's test run (both sides use it): a program 'passes' when it
    defines something and a hash of problem and program says so."""
    h = int(hashlib.sha256(f"{question_id}\n{code}".encode()).hexdigest(), 16)
    return "def " in code and h % 3 != 0


def fake_code_runner(question_ids, codes) -> list[bool]:
    return [fake_code_pass(q, c) for q, c in zip(question_ids, codes)]


def _thought(rng: random.Random) -> str:
    n = rng.choice([0, 1, 2, 3, 8]) if rng.random() < 0.97 else 60  # 60: ~11,000 tokens
    return (FILLER * n)[: len(FILLER) * n]


# --------------------------------------------------------------------------------------
# Answers written the ways models write them
# --------------------------------------------------------------------------------------

def choice_text(rng: random.Random, truth: str, last: str) -> str:
    letters = "ABCDEFGHIJ"[: "ABCDEFGHIJ".index(last) + 1]
    other = rng.choice([c for c in letters if c != truth])
    pick = truth if rng.random() < 0.6 else other
    forms = [f"Answer: {pick}", f"ANSWER: ({pick})", f"Final Answer = {pick}", f"answer: {pick.lower()}",
             f"{pick}.", f"The answer is {pick}.", f"Answer: {other}\nWait, recheck.\nFINAL ANSWER: {pick}",
             f"Answer: {pick}\nActually no. Answer: {other}", "Answer: Because it is the best option.",
             f"Answer: {'K' if last == 'J' else 'E'}", f"['Answer: {pick}']", f"Answer:\\n{pick}",
             f"I think it is ({pick})", f"So the choice is {pick} and a {other} is wrong.", "",
             f"**Answer: {pick}**", f"Answer: {pick}pple"]
    return rng.choice(forms)


MATH_CASES = [  # (ground truth, answers a model may box)
    ("\\frac{1}{2}", ["\\frac{1}{2}", "1/2", "0.5", "\\dfrac12", "\\frac{2}{4}", "\\tfrac{1}{2}", "1/3"]),
    ("5", ["5", "5\\text{ cm}", "5 degrees", "x = 5", "5.0", "05", "6", "\\text{5}"]),
    ("1000", ["1000", "1,000", "1{,}000", "1000.", "10^3", "999"]),
    ("(1,2)", ["(1,2)", "(1, 2)", "[1,2)", "(2,1)", "1,2"]),
    ("3\\sqrt{2}", ["3\\sqrt{2}", "3\\sqrt2", "\\sqrt{18}", "3 \\sqrt{2}", "4.2426"]),
    ("x^2+2x+1", ["x^2+2x+1", "(x+1)^2", "x^2 + 2x + 1", "x^2+1"]),
    ("\\frac{\\sqrt{3}}{2}", ["\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", "\\sqrt{3}/2", "\\frac{1}{2}\\sqrt{3}"]),
    ("\\text{Monday}", ["Monday", "\\text{Monday}", "monday", "Tuesday"]),
    ("90^\\circ", ["90", "90^\\circ", "90^{\\circ}", "90 degrees", "\\frac{\\pi}{2}"]),
    ("-\\frac{3}{4}", ["-\\frac{3}{4}", "-3/4", "\\frac{-3}{4}", "- \\frac{3}{4}", "-0.75"]),
    ("10\\%", ["10\\%", "10", "10%", "0.1"]),
    ("2\\pi", ["2\\pi", "2 \\pi", "\\pi \\cdot 2", "6.28"]),
]


def math_text(rng: random.Random, answer: str) -> str:
    forms = [f"The answer is $\\boxed{{{answer}}}$.", f"\\boxed{{7}} is wrong, so \\boxed{{{answer}}}",
             f"So we get \\boxed{{{answer}}}", f"\\boxed{{{answer}}} and then \\boxed{{0}}",
             f"Result: \\boxed{{{answer}", f"\\boxed {{{answer}}}", f"Final: {answer}", ""]
    w = [5, 2, 4, 1, 1, 1, 1, 1]
    return rng.choices(forms, weights=w)[0]


def aime_text(rng: random.Random, truth: int) -> str:
    pick = truth if rng.random() < 0.6 else rng.randint(0, 999)
    forms = [f"\\boxed{{{pick}}}", f"\\boxed{{ {pick} }}", f"Answer: {pick}", f"Answer: {pick}.",
             f"\\boxed{{{pick:03d}}}", f"\\boxed{{{pick + 1000}}}\nAnswer: {pick}", f"answer:{pick}",
             f"\\boxed{{-{pick}}}\nAnswer: {pick}", f"\\boxed{{{pick}}} ... \\boxed{{{(pick + 1) % 1000}}}",
             f"The value is {pick}.", ""]
    return rng.choice(forms)


def code_text(rng: random.Random, i: int) -> str:
    body = rng.choice([f"def solve():\n    return {i}\n", f"x = {i}\nprint(x)\n", f"def f(a):\n    return a * {i}\n"])
    other = f"def g():\n    pass  # draft {i}\n"
    forms = [f"```python\n{body}```", f"```python\n{other}```\nBetter:\n```python\n{body}```",
             f"```\n{body}```", f"```py\n{body}```", f"Here is code:\n{body}", f"```python\n{body}",
             "```python\n```"]
    return rng.choice(forms)


# --------------------------------------------------------------------------------------
# deepseek-r1
# --------------------------------------------------------------------------------------

DS_NAMES = {"gpqa": ["gpqa", "GPQA_diamond"], "mmlu_pro": ["mmlu_pro", "MMLU_Pro"], "math500": ["math500"],
            "aime": ["aime1983", "AIME2024"], "livecodebench": ["livecodebench"]}


def _deepseek_rows(rng: random.Random, n: int):
    rows, outputs = [], []
    fams = list(DS_NAMES)
    for i in range(n):
        fam = fams[i % len(fams)]
        name = rng.choice(DS_NAMES[fam])
        if fam in ("gpqa", "mmlu_pro"):
            last = "D" if fam == "gpqa" else "J"
            truth = rng.choice("ABCDEFGHIJ"[: "ABCDEFGHIJ".index(last) + 1])
            out = choice_text(rng, truth, last)
        elif fam == "math500":
            truth, answers = rng.choice(MATH_CASES)
            out = math_text(rng, rng.choice(answers))
        elif fam == "aime":
            t = rng.randint(0, 999)
            truth = rng.choice([str(t), f"{t:03d}", t])
            out = aime_text(rng, t)
        else:
            truth = f"lcb_{i:04d}"
            out = code_text(rng, i)
        if rng.random() < 0.04:
            truth = None  # no ground truth: never correct
        rows.append({"dataset": name, "gt_output": truth, "question": f"Question {i}?"})
        outputs.append(_thought(rng) + out)
    return rows, outputs


# --------------------------------------------------------------------------------------
# gpt-oss-120b (harmony text, special tokens kept)
# --------------------------------------------------------------------------------------

GO_NAMES = {"gpqa": "gpqa_diamond", "aime": "aime25", "livecodebench": "livecodebench_v6"}


def harmony(rng: random.Random, analysis: str, final: str) -> str:
    marker = rng.choice(["<|channel|>final<|message|>", "<|channel|>final<|message|>",
                         "<|channel|>final 明<|message|>", "<|channel|>final537<|message|>"])
    end = rng.choice(["<|return|>", "<|return|>", "", "</s>"])
    form = rng.random()
    if form < 0.8:
        return f"<|channel|>analysis<|message|>{analysis}<|end|><|start|>assistant{marker}{final}{end}"
    if form < 0.9:
        return f"<|channel|>analysis<|message|>{analysis}"  # cut off before the final section
    return f"{analysis}\n{final}"


def _gpt_oss_rows(rng: random.Random, n: int):
    rows, outputs = [], []
    fams = list(GO_NAMES)
    for i in range(n):
        fam = fams[i % len(fams)]
        name = GO_NAMES[fam] if rng.random() < 0.9 else GO_NAMES[fam].upper()
        if fam == "gpqa":
            truth = rng.choice("ABCD")
            other = rng.choice([c for c in "ABCD" if c != truth])
            final = rng.choice([f"**{truth}**", f"{truth}) because", f"Answer: {truth}", f"The answer is {other}",
                                f"({truth})", "None of them.", f"Answer. {truth}", f"**Answer: {other}**",
                                choice_text(rng, truth, "D")])
            analysis = _thought(rng) + rng.choice(["", f"Answer: {truth}", f"FINAL ANSWER: {other}"])
        elif fam == "aime":
            t = rng.randint(0, 999)
            truth = str(t)
            final, analysis = aime_text(rng, t), _thought(rng) + rng.choice(["", f"\\boxed{{{t}}}"])
        else:
            truth = f"lcb_{i:04d}"
            final, analysis = code_text(rng, i), _thought(rng) + rng.choice(["", f"```python\ndef draft_{i}(): pass\n```"])
        if rng.random() < 0.03:
            truth = None
        rows.append({"dataset": name, "ground_truth": truth, "question": f"Question {i}?"})
        outputs.append(harmony(rng, analysis, final))
    return rows, outputs


# --------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------

def _encode(rng: random.Random, tok, text: str) -> list[int]:
    ids = tok.encode(text, add_special_tokens=False) if text else []
    kind = rng.random()
    if kind < 0.05:
        return [tok.eos_token_id] * rng.randint(1, 3)  # special tokens only
    if kind < 0.15:
        return [tok.bos_token_id] + ids + [tok.eos_token_id]
    return ids


def _log(rng: random.Random, tok, outputs: list[str]) -> list[dict]:
    n = len(outputs)
    absent = set(rng.sample(range(n), n // 20))
    entries = []
    for i in range(n):
        if i in absent:
            continue
        ids = _encode(rng, tok, outputs[i])
        entries.append({"seq_id": len(entries), "qsl_idx": i, "data": to_hex(ids), "token_count": len(ids)})
    rng.shuffle(entries)
    for e in rng.sample(entries, n // 25):  # repeats, with other outputs
        ids = _encode(rng, tok, rng.choice(outputs))
        entries.append({"seq_id": len(entries), "qsl_idx": e["qsl_idx"], "data": to_hex(ids), "token_count": len(ids)})
    return entries


def build(benchmark: str, tok):
    import pandas as pd

    rng = random.Random(f"{SEED}-{benchmark}")
    n = ROWS[benchmark]
    rows, outputs = (_deepseek_rows if benchmark == "deepseek-r1" else _gpt_oss_rows)(rng, n)
    return pd.DataFrame(rows), _log(rng, tok, outputs)


def without_code(df, log: list[dict]) -> list[dict]:
    """The log's entries of rows that are not LiveCodeBench: scored with no code runner."""
    code = {i for i, v in enumerate(df["dataset"]) if "livecodebench" in str(v).lower()}
    return [e for e in log if e["qsl_idx"] not in code]
