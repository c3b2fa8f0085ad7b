"""Writes the shipped stand-in datasets (harness/data/standins/*.jsonl): small datasets in MLPerf
benchmarks' own formats whose answers the tiny model is taught (`model.tiny.teach`), so a CPU
FullRun scores every metric family for real. Deterministic: run it again and nothing changes.

    python -m harness.data.make_standins

- mixtral-8x7b: rows routed by `dataset`: OpenOrca (a corpus line's start -> its rest, ROUGE),
  GSM8K (a word problem -> reasoning and "The answer is N", exact match of the number; commas,
  negatives and decimals among them) and MBXP (a Python function to complete -> its body; `id` is
  `python_<entry point>`, `gt_output` the test code, as MLCommons' dataset has it).
- llama3.1-405b: rows routed by `metric`: rouge (a corpus line's start -> its rest), niah_em (a
  needle uuid to repeat), qa_em (a question -> "Answer: ...").
Every row also carries `canonical_solution`: the output the model is taught, and what the
references are when a run is judged against its own references (for MBXP rows `gt_output` holds
tests, not an answer).
"""
from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

from ..corpus import corpus_lines

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


def write(name: str, rows: list[dict]) -> Path:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    return path


def main() -> None:
    rng = random.Random(SEED)
    mixtral = openorca_rows(rng, 16, 3, dataset="OpenOrca") + gsm8k_rows(rng, 16) + mbxp_rows()
    # MLPerf's mixtral rows are interleaved, not grouped; a stable shuffle keeps this deterministic.
    random.Random(SEED).shuffle(mixtral)
    print(write("mixtral-8x7b", mixtral))
    llama405 = openorca_rows(rng, 12, 11, metric="rouge") + niah_rows(rng, 12) + qa_rows(24)[:12]
    random.Random(SEED + 1).shuffle(llama405)
    print(write("llama3.1-405b", llama405))


if __name__ == "__main__":
    main()
