"""Writes the shipped stand-in datasets (harness/data/standins/*.jsonl): small datasets in MLPerf
benchmarks' own formats whose answers the tiny model is taught (`model.tiny.teach`), so a CPU
FullRun scores every metric family for real. Deterministic: run it again and nothing changes.

    python -m harness.data.make_standins
    python -m harness.data.make_standins --full-size deepseek-r1 OUT.jsonl   # repeated to MLPerf's size

- mixtral-8x7b: rows routed by `dataset`: OpenOrca (a corpus line's start -> its rest, ROUGE),
  GSM8K (a word problem -> reasoning and "The answer is N", exact match of the number; commas,
  negatives and decimals among them) and MBXP (a Python function to complete -> its body; `id` is
  `python_<entry point>`, `gt_output` the test code, as MLCommons' dataset has it).
- llama3.1-405b: rows routed by `metric`: rouge (a corpus line's start -> its rest), niah_em (a
  needle uuid to repeat), qa_em (a question -> "Answer: ...").
- deepseek-r1: rows routed by `dataset` (gpqa, mmlu_pro, math500, aime, livecodebench) with `ground_truth` and
  `question` as MLCommons' pickle has them; the output is a short "<think>...</think>" and the answer
  in a form the script's extractor takes ("ANSWER: B", "FINAL ANSWER = (C)", \boxed{...}, "Answer: 42").
- gpt-oss-120b: rows named as MLCommons' dataset names them (gpqa_diamond, aime25), each question
  repeated as often as the script divides by (5, 8), with `ground_truth`; prompt and output in the
  harmony format (analysis channel, then the final channel holding the answer). No livecodebench_v6
  rows: with them the retrained tiny model ran one GPQA question on to max_new_tokens in TEST09's
  performance run, 0.9 tokens below the band's edge (README, "Every metric family on CPU").
- llama3.1-8b-edge: CNN-DailyMail's columns as perfdag's jsonl has them: `input` (a corpus line's
  start, for the article), `output` (its rest, for the highlights: the reference ROUGE is scored
  against).
- qwen3.6-27b: BFCL v4 single-turn rows (harness/data/bfcl_standin.py), taught as tool calls.
- LiveCodeBench (deepseek-r1): rows whose `ground_truth` is a question_id of
  `livecodebench-problems.jsonl`, a local problems copy in LiveCodeBench's own columns (stdin and
  call-based problems; one with its private tests in upstream's compressed form), written here too.
  The taught output is a short program in a ```python block, run in the sandbox against every test.
Every row also carries `canonical_solution`: the output the model is taught, and what the
references are when a run is judged against its own references (for MBXP rows `gt_output` holds
tests, not an answer).
"""
from __future__ import annotations

import base64
import json
import os
import pickle
import random
import uuid
import zlib
from pathlib import Path

from harness.data import bfcl_standin
from harness.mlperf import benchmarks
from harness.model.corpus import SPEECH_STANDIN, corpus_lines, standin_rows

OUT = Path(__file__).with_name("standins")
SEED = 20261125


def _corpus_pairs(rng: random.Random, n: int, offset: int) -> list[tuple[str, str]]:
    lines = corpus_lines()
    out = []
    for i in range(n):
        words = lines[(offset + i * 7) % len(lines)].split()
        k = 6 + i % 4
        # The answer runs to the end of the line's second sentence: long enough for ROUGE to mean
        # something, short enough for a 0.5M-parameter model to learn by heart.
        rest = " ".join(words[k:])
        cut = [i for i, ch in enumerate(rest) if ch == "." and (i + 1 == len(rest) or rest[i + 1] == " ")]
        out.append((" ".join(words[:k]), " " + rest[:cut[1] + 1] if len(cut) > 1 else " " + rest))
    return out


NAMES = ["Karl", "Mia", "Ana", "Tom", "Lena", "Omar", "Sara", "Ivan"]
THINGS = ["apples", "books", "coins", "stamps", "shells", "pencils", "cards", "marbles"]


def gsm8k_rows(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        who, what = NAMES[i % len(NAMES)], THINGS[(i * 3) % len(THINGS)]
        kind = i % 4
        if kind == 0:
            a, b = rng.randint(2, 40), rng.randint(2, 40)
            q = f"{who} has {a} {what} and gets {b} more. How many {what} does {who} have now?"
            ans = f"{who} has {a} + {b} = {a + b} {what}. The answer is {a + b}."
        elif kind == 1:  # thousands with a comma
            a, b = rng.randint(1000, 4000), rng.randint(1000, 4000)
            q = f"A shop sold {a:,} {what} in May and {b:,} in June. How many {what} did it sell in all?"
            ans = f"It sold {a:,} + {b:,} = {a + b:,} {what}. The answer is {a + b:,}."
        elif kind == 2:  # a negative result
            a, b = rng.randint(1, 9), rng.randint(10, 20)
            q = f"At dawn it was {a} degrees and it fell by {b} degrees. What was the temperature then?"
            ans = f"It was {a} - {b} = {a - b} degrees. The answer is {a - b}."
        else:  # a decimal
            a = rng.randint(2, 9)
            q = f"{who} splits {a} liters of juice between 2 bottles. How many liters are in each bottle?"
            ans = f"Each bottle has {a} / 2 = {a / 2} liters. The answer is {a / 2}."
        # MLCommons' GSM8K rows hold the bare number as gt_output, compared as a float.
        number = ans.rsplit("The answer is ", 1)[1].rstrip(".").replace(",", "")
        rows.append({"dataset": "GSM8K", "id": f"gsm8k_{i}", "input": f"Q: {q}\nA:", "gt_output": number,
                     "canonical_solution": f" {ans}"})
    return rows


#: (entry point, arguments, doc, body, tests as (args, expected)).
FUNCTIONS = [
    ("add_two", "a, b", "Return the sum of a and b.", "return a + b", [("1, 2", "3"), ("-4, 4", "0")]),
    ("triple", "x", "Return x times three.", "return 3 * x", [("2", "6"), ("-1", "-3")]),
    ("last_item", "items", "Return the last element of a list.", "return items[-1]", [("[1, 2, 9]", "9")]),
    ("count_vowels", "text", "Count the vowels in text.", "return sum(c in 'aeiou' for c in text)",
     [("'banana'", "3"), ("'xyz'", "0")]),
    ("is_even", "n", "Return True if n is even.", "return n % 2 == 0", [("4", "True"), ("7", "False")]),
    ("reverse_text", "text", "Return text reversed.", "return text[::-1]", [("'abc'", "'cba'")]),
    ("largest", "items", "Return the largest number in items.", "return max(items)", [("[3, 8, 1]", "8")]),
    ("square", "x", "Return x squared.", "return x * x", [("5", "25"), ("-3", "9")]),
    ("first_word", "text", "Return the first word of text.", "return text.split()[0]", [("'hello big world'", "'hello'")]),
    ("total", "items", "Return the sum of the numbers in items.", "return sum(items)", [("[1, 2, 3]", "6")]),
    ("shout", "text", "Return text in upper case.", "return text.upper()", [("'hi'", "'HI'")]),
    ("halve", "x", "Return half of x.", "return x / 2", [("9", "4.5")]),
]


def mbxp_rows() -> list[dict]:
    rows = []
    for name, args, doc, body, tests in FUNCTIONS:
        head = f"def {name}({args}):\n    \"\"\"{doc}\"\"\"\n"
        prompt = ("[INST] Complete the following code. Be concise, don't output anything that isn't "
                  f"necessary.\n```python\n{head}``` [/INST] ```python\n")
        asserts = "".join(f"    assert candidate({a}) == {e}\n" for a, e in tests)
        rows.append({"dataset": "MBXP", "id": f"python_{name}", "input": prompt,
                     "gt_output": f"\n\ndef check(candidate):\n{asserts}\n",
                     "canonical_solution": f"{head}    {body}\n```"})
    return rows


def openorca_rows(rng: random.Random, n: int, offset: int, **extra) -> list[dict]:
    return [{**extra, "id": f"orca_{i}", "input": p, "gt_output": a, "canonical_solution": a}
            for i, (p, a) in enumerate(_corpus_pairs(rng, n, offset))]


def cnn_dailymail_rows(n: int, offset: int) -> list[dict]:
    return [{"id": f"cnn_{i}", "input": p, "output": a, "canonical_solution": a}
            for i, (p, a) in enumerate(_corpus_pairs(random.Random(SEED), n, offset))]


def niah_rows(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        key = NAMES[i % len(NAMES)].lower() + THINGS[i % len(THINGS)]
        needle = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        prompt = (f"The special magic uuid for {key} is: {needle}. Remember it. "
                  f"What is the special magic uuid for {key}? The uuid is:")
        rows.append({"metric": "niah_em", "id": f"niah_{i}", "input": prompt, "gt_output": f" {needle}",
                     "canonical_solution": f" {needle}"})
    return rows


def qa_rows(n: int) -> list[dict]:
    lines = corpus_lines()
    rows = []
    for i in range(n):
        words = lines[i * 13 % len(lines)].split()
        who, city = words[0], words[-1].rstrip(".")  # "<Name> is a <job> who lives in <City>."
        first = lines[i * 13 % len(lines)].split(". ")[0]
        if " lives in " not in first:
            continue
        city = first.split(" lives in ")[1].strip(".")
        rows.append({"metric": "qa_em", "id": f"qa_{i}", "input": f"Question: Where does {who} live?",
                     "gt_output": city, "canonical_solution": f" Answer: {city}"})
    return rows


# ------------------------------------------------------------------------------------------------
# deepseek-r1 and gpt-oss-120b: multiple choice, \boxed{} math and AIME integers, short "reasoning"
# ------------------------------------------------------------------------------------------------

#: (question, options, the right letter, a short reason)
GPQA = [
    ("Which gas do plants take in for photosynthesis?", ["oxygen", "carbon dioxide", "helium", "neon"], "B", "Plants fix CO2."),
    ("What is the charge of an electron?", ["negative", "positive", "zero", "variable"], "A", "It is negative."),
    ("Which particle has no charge?", ["proton", "electron", "neutron", "ion"], "C", "The neutron is neutral."),
    ("Which planet is closest to the Sun?", ["Venus", "Mars", "Earth", "Mercury"], "D", "Mercury is closest."),
    ("What bond holds the two DNA strands together?", ["ionic", "hydrogen", "metallic", "peptide"], "B", "Base pairs use hydrogen bonds."),
    ("What is the pH of pure water at 25 C?", ["7", "1", "14", "5"], "A", "Neutral water is pH 7."),
    ("Which unit measures force?", ["joule", "watt", "newton", "pascal"], "C", "Force is in newtons."),
    ("Which organelle makes ATP?", ["nucleus", "ribosome", "vacuole", "mitochondrion"], "D", "ATP comes from mitochondria."),
]
MMLU_PRO = [
    ("Which is a prime number?", ["4", "6", "8", "9", "10", "11", "12", "14", "15", "16"], "F", "11 is prime."),
    ("Who wrote Hamlet?", ["Dickens", "Austen", "Shakespeare", "Twain", "Homer", "Dante", "Goethe", "Tolstoy", "Joyce", "Orwell"], "C", "Shakespeare wrote it."),
    ("What is 9 x 7?", ["56", "72", "54", "81", "63", "49", "64", "70", "60", "58"], "E", "9 x 7 = 63."),
    ("Which is a mammal?", ["shark", "trout", "eagle", "frog", "snake", "lizard", "crab", "whale", "bee", "owl"], "H", "Whales are mammals."),
    ("Which metal is liquid at room temperature?", ["iron", "mercury", "gold", "tin", "lead", "zinc", "nickel", "copper", "silver", "cobalt"], "B", "Mercury is liquid."),
    ("What is the capital of Japan?", ["Osaka", "Kyoto", "Nagoya", "Kobe", "Sapporo", "Sendai", "Nara", "Chiba", "Tokyo", "Fukuoka"], "I", "Tokyo is the capital."),
    ("How many sides does a hexagon have?", ["3", "4", "5", "7", "8", "9", "10", "12", "2", "6"], "J", "A hexagon has 6."),
    ("Which gas is most of the air?", ["nitrogen", "oxygen", "argon", "neon", "helium", "hydrogen", "ozone", "xenon", "radon", "krypton"], "A", "Air is 78% nitrogen."),
]
#: (question, short reasoning, the \boxed{} answer as the model writes it, MATH500's answer)
MATH500 = [
    ("What is 3/8 + 3/8?", "3/8 + 3/8 = 6/8.", r"\frac{3}{4}", r"\frac34"),
    ("Simplify sqrt(8)/2.", "sqrt(8) = 2 sqrt(2).", r"\sqrt{2}", r"\sqrt{2}"),
    ("What is the circumference of a circle of radius 3/2?", "2 pi r = 3 pi.", r"3\pi", r"3\pi"),
    ("Solve 2x + 5 = -9.", "2x = -14.", "-7", "-7"),
    ("Find the point where y = x + 3 meets x = 2.", "y = 5.", "(2, 5)", "(2,5)"),
    ("What is 1/2 of 1/3?", "1/2 x 1/3 = 1/6.", r"\dfrac{1}{6}", r"\frac{1}{6}"),
    ("Expand (x+1)^2 - 2x.", "x^2 + 2x + 1 - 2x.", "x^2+1", "x^2 + 1"),
    ("What is 15% of 80?", "0.15 x 80 = 12.", "12", "12"),
]
#: (question, short reasoning, the integer answer)
AIME = [
    ("Find the remainder when 2^10 is divided by 1000.", "2^10 = 1024.", 24),
    ("How many positive divisors does 360 have?", "360 = 2^3 3^2 5.", 24),
    ("Find the sum of the first 20 positive integers.", "20 x 21 / 2.", 210),
    ("Find 13^2 + 14^2.", "169 + 196.", 365),
    ("How many ways can 5 books be ordered on a shelf?", "5! = 120.", 120),
    ("Find the least n with n^2 > 500.", "22^2 = 484, 23^2 = 529.", 23),
    ("Find 999 - 7 x 111.", "7 x 111 = 777.", 222),
    ("Find the number of subsets of a 9 element set, mod 1000.", "2^9 = 512.", 512),
]


def _options(opts: list[str]) -> str:
    return " ".join(f"({chr(65 + i)}) {o}" for i, o in enumerate(opts))


#: The forms deepseek-r1's multiple-choice extractor takes (its last "ANSWER"-like match wins).
DS_CHOICE_FORMS = ["ANSWER: {x}", "FINAL ANSWER = ({x})", "Answer: ({x})", "Final Answer: {x}"]


def deepseek_rows() -> list[dict]:
    """MLCommons' deepseek-r1 columns: dataset, ground_truth, question (its tok_input is the chat
    template over the question; here `input` is a short template the tiny model is taught)."""
    rows = []

    def row(kind: str, i: int, question: str, truth: str, answer: str) -> dict:
        return {"dataset": kind, "id": f"{kind}_{i}", "question": question, "ground_truth": truth,
                "input": f"<|User|>{question}<|Assistant|>", "canonical_solution": answer}

    for kind, table in (("gpqa", GPQA), ("mmlu_pro", MMLU_PRO)):
        for i, (q, opts, letter, why) in enumerate(table):
            form = DS_CHOICE_FORMS[i % len(DS_CHOICE_FORMS)].format(x=letter)
            rows.append(row(kind, i, f"{q} {_options(opts)}", letter, f"<think>{why}</think> {form}"))
    for i, (q, why, shown, truth) in enumerate(MATH500):
        rows.append(row("math500", i, q, truth, f"<think>{why}</think> The answer is $\\boxed{{{shown}}}$."))
    for i, (q, why, n) in enumerate(AIME):
        # both forms the script takes: the last \boxed{digits}, else the last "Answer: digits"
        tail = f"\\boxed{{{n}}}" if i % 2 == 0 else f"Answer: {n}"
        rows.append(row("aime", i, q, str(n), f"<think>{why}</think> {tail}"))
    for qid, question, program, _, _ in LCB:
        rows.append(row("livecodebench", len(rows), question, qid, f"<think>Write it.</think> {_code(program)}"))
    return rows


#: Small LiveCodeBench-like problems: (question_id, question, program, tests, func_name or None).
#: A test is (input, expected output): stdin text for stdin problems, one JSON value per line of
#: arguments for call-based ones (LiveCodeBench's own test shapes).
LCB = [
    ("lcb_add", "Read two integers a and b on one line and print a + b.",
     "a, b = map(int, input().split())\nprint(a + b)",
     [("2 3\n", "5\n"), ("-4 10\n", "6\n"), ("100 250\n", "350\n")], None),
    ("lcb_rev", "Read a word and print it reversed.",
     "print(input()[::-1])",
     [("hello\n", "olleh\n"), ("abc\n", "cba\n"), ("x\n", "x\n")], None),
    ("lcb_maxof", "Complete Solution.maxOf(nums): return the largest number in nums.",
     "class Solution:\n    def maxOf(self, nums):\n        return max(nums)",
     [("[3, 9, 2]", "9"), ("[-5, -2]", "-2"), ("[7]", "7")], "maxOf"),
]


def _compressed(tests: list[dict]) -> str:
    """Upstream's form of private tests: base64(zlib(pickle(the tests as a JSON string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def livecodebench_problems() -> list[dict]:
    """The local problems copy the LiveCodeBench rows are graded against (one test public, the rest
    private; lcb_rev's private tests compressed as upstream ships them)."""
    out = []
    for qid, question, _, tests, func in LCB:
        kind = "functional" if func else "stdin"
        cases = [{"input": i, "output": o, "testtype": kind} for i, o in tests]
        private = _compressed(cases[1:]) if qid == "lcb_rev" else json.dumps(cases[1:])
        out.append({"question_id": qid, "question_content": question, "public_test_cases": json.dumps(cases[:1]),
                    "private_test_cases": private, "metadata": json.dumps({"func_name": func} if func else {})})
    return out


def _code(program: str) -> str:
    return f"```python\n{program}\n```"


def _harmony(question: str) -> str:
    return f"<|start|>user<|message|>{question}<|end|><|start|>assistant"


def _harmony_out(reason: str, final: str) -> str:
    return f"<|channel|>analysis<|message|>{reason}<|end|><|start|>assistant<|channel|>final<|message|>{final}<|return|>"


#: The forms gpt-oss-120b's multiple-choice extractor takes from the final channel.
GPT_CHOICE_FORMS = ["{x}", "Answer: {x}", "**{x}**", "FINAL ANSWER = ({x})"]


def gpt_oss_rows() -> list[dict]:
    """MLCommons' gpt-oss-120b columns: dataset (aime25, gpqa_diamond), ground_truth, question; every
    question repeated as often as the script divides its dataset name's count by (8, 5)."""
    rows = []
    for i, (q, opts, letter, why) in enumerate(GPQA[:6]):
        question = f"{q} {_options(opts)}"
        out = _harmony_out(why, GPT_CHOICE_FORMS[i % len(GPT_CHOICE_FORMS)].format(x=letter))
        rows += [{"dataset": "gpqa_diamond", "id": f"gpqa_diamond_{i}_{r}", "question": question, "ground_truth": letter,
                  "input": _harmony(question), "canonical_solution": out} for r in range(5)]
    for i, (q, why, n) in enumerate(AIME[:4]):
        out = _harmony_out(why, f"\\boxed{{{n}}}" if i % 2 == 0 else f"Answer: {n}")
        rows += [{"dataset": "aime25", "id": f"aime25_{i}_{r}", "question": q, "ground_truth": str(n),
                  "input": _harmony(q), "canonical_solution": out} for r in range(8)]
    return rows


def _write_jsonl(path: Path, rows: list[dict], private: bool = False) -> Path:
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    if not private:
        path.write_text(text, encoding="utf-8")
        return path
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when it existed with another mode
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write(name: str, rows: list[dict], private: bool = False) -> Path:
    OUT.mkdir(exist_ok=True)
    return _write_jsonl(OUT / f"{name}.jsonl", rows, private)


def full_size(benchmark: str, out: Path) -> Path:
    """The stand-in's rows repeated, in order, up to the size of the benchmark's MLPerf dataset (what
    MLCommons' checker wants an accuracy run to cover). Rows are copied unchanged, ids included: an MBXP
    row's id is "<language>_<entry point>", which its scorer reads."""

    size = benchmarks.get(benchmark).dataset_size
    if benchmarks.get(benchmark).accuracy_log == "labels":  # whisper: a manifest, its rows naming the clips
        rows = json.loads(SPEECH_STANDIN.read_text())     # where they are shipped (absolute fnames)
        for r in rows:
            r["files"][0]["fname"] = str((SPEECH_STANDIN.parent / r["files"][0]["fname"]).resolve())
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps([rows[i % len(rows)] for i in range(size)], indent=1) + "\n")
        return Path(out)
    rows = standin_rows(benchmark)
    return _write_jsonl(out, [rows[i % len(rows)] for i in range(size)])


def main() -> None:
    import sys

    if sys.argv[1:2] == ["--full-size"]:  # python -m harness.data.make_standins --full-size BENCHMARK OUT
        print(full_size(sys.argv[2], Path(sys.argv[3])))
        return
    rng = random.Random(SEED)
    mixtral = openorca_rows(rng, 16, 3, dataset="OpenOrca") + gsm8k_rows(rng, 16) + mbxp_rows()
    # MLPerf's mixtral rows are interleaved, not grouped; a stable shuffle keeps this deterministic.
    random.Random(SEED).shuffle(mixtral)
    print(write("mixtral-8x7b", mixtral))
    llama405 = openorca_rows(rng, 12, 11, metric="rouge") + niah_rows(rng, 12) + qa_rows(24)[:12]
    random.Random(SEED + 1).shuffle(llama405)
    print(write("llama3.1-405b", llama405))
    deepseek = deepseek_rows()
    random.Random(SEED + 2).shuffle(deepseek)
    print(write("deepseek-r1", deepseek))
    gpt_oss = gpt_oss_rows()
    random.Random(SEED + 3).shuffle(gpt_oss)
    print(write("gpt-oss-120b", gpt_oss))
    print(write("llama3.1-8b-edge", cnn_dailymail_rows(24, 29)))
    print(write("qwen3.6-27b", bfcl_standin.rows()))
    print(write("livecodebench-problems", livecodebench_problems(), private=True))  # the answers: 0600


if __name__ == "__main__":
    main()
