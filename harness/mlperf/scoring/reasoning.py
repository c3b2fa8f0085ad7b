"""Answer extraction and judging shared by the reasoning benchmarks (deepseek-r1, gpt-oss-120b), as
their ``eval_accuracy.py`` scripts in mlcommons/inference extract and judge. Each row's ``dataset``
value picks its rule by substring, first match in this order: gpqa, mmlu_pro, math500, aime,
livecodebench (gpt-oss adds mmlu last).

- multiple choice: the last "Answer: X" / "FINAL ANSWER = (X)" whose letter is within the row's
  options (A-D for GPQA, A-J for MMLU-Pro), and for A-J the last standalone letter otherwise;
- math: the content of the last ``\\boxed{`` up to its matching brace, judged by PRM800K's grader;
- AIME: the last ``\\boxed{<digits>}``, else the last "Answer: <digits>" (not followed by "."),
  an integer 0..999;
- code: the first ```python block (deepseek), the last one of the harmony final section (gpt-oss).

gpt-oss outputs are harmony text (special tokens kept): multiple choice and code look first in the
``<|channel|>final<|message|>`` section.
"""
from __future__ import annotations

import math
import re

from harness.mlperf.scoring.math_grade import grade_answer

FAMILIES = ("gpqa", "mmlu_pro", "math500", "aime", "livecodebench")
GPT_OSS_FAMILIES = FAMILIES + ("mmlu",)
OPTIONS = {"gpqa": "D", "mmlu_pro": "J", "mmlu": "J"}


def is_missing(v) -> bool:
    """The scripts' ``pd.isna`` on a scalar: None and NaN."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def clean(text) -> str:
    """The scripts' ``validate_text_input``: missing -> "", else str, stripped."""
    return "" if is_missing(text) else str(text).strip()


def family(dataset_value, families=FAMILIES) -> str | None:
    """The rule a row's ``dataset`` value selects (lower-cased substring match, first wins)."""
    name = str(dataset_value).lower()
    return next((f for f in families if f in name), None)


# --------------------------------------------------------------------------------------
# Multiple choice
# --------------------------------------------------------------------------------------

def _answer_re(last: str) -> re.Pattern:
    return re.compile(rf"\b(?:ANSWER|FINAL\s*ANSWER)\b\s*[:=]?\s*(?:\(?\s*([A-{last}])\s*\)?)(?:\s*$|[^A-Za-z])",
                      re.IGNORECASE)


def _unescape(text: str) -> str:
    return text.replace(r"\n", "\n").replace(r"\'", "'")


def _unwrap_list_repr(text: str) -> str:
    if text.startswith(("['", '["')) and text.endswith(("']", '"]')):
        return text[2:-2].strip()
    return text


def choice_deepseek(text, last: str = "D") -> str | None:
    text = clean(text)
    if not text:
        return None
    text = _unescape(_unwrap_list_repr(text))
    found = list(_answer_re(last).finditer(text))
    if found:
        return found[-1].group(1).upper()
    if last == "J":  # MMLU-Pro: the last standalone letter
        letters = list(re.finditer(r"\b([A-J])\b", text, re.IGNORECASE))
        if letters:
            return letters[-1].group(1).upper()
    return None


_FINAL_RE = re.compile(r"<\|channel\|>final[^<]*<\|message\|>(.*?)(?:<\|return\|>|$)", re.DOTALL)


def harmony_final(text) -> str:
    """The harmony final section's content (markers with junk after "final" accepted), else the text."""
    text = clean(text)
    if not text:
        return ""
    m = _FINAL_RE.search(text)
    return m.group(1).strip() if m else text


def choice_gpt_oss(text, last: str = "D") -> str | None:
    text = clean(text)
    if not text:
        return None
    final = _unescape(_unwrap_list_repr(re.sub(r"\*\*([^*]+)\*\*", r"\1", harmony_final(text))))
    # 1: a letter leading the final section; 2: its first "Answer: X"
    m = re.match(rf"^[^a-zA-Z]*([A-{last}])(?:[^a-zA-Z]|$)", final.strip(), re.IGNORECASE)
    if m:
        return m.group(1).upper()
    m = re.search(rf"\b(?:Answer|ANSWER)\s*[:.]?\s*([A-{last}])\b", final, re.IGNORECASE)
    if m:
        return m.group(1).upper()
    # 3: the last ANSWER pattern of the whole text; 4 (A-J): the final section's last lone letter
    found = list(_answer_re(last).finditer(_unescape(text)))
    if found:
        return found[-1].group(1).upper()
    if last == "J":
        letters = list(re.finditer(rf"\b([A-{last}])\b", final, re.IGNORECASE))
        if letters:
            return letters[-1].group(1).upper()
    return None


def choice_correct(parsed, truth, last: str) -> bool:
    if not parsed or not truth:
        return False
    parsed, truth = parsed.upper(), str(truth).upper()
    return parsed in "ABCDEFGHIJ"[:"ABCDEFGHIJ".index(last) + 1] and parsed == truth


# --------------------------------------------------------------------------------------
# Math, AIME, code
# --------------------------------------------------------------------------------------

def boxed(text) -> str | None:
    """The last \\boxed{...}'s content (nested braces matched), stripped; None if unclosed."""
    text = clean(text)
    start = text.rfind("\\boxed{")
    if not text or start == -1:
        return None
    depth = 0
    for i in range(start + 7, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                return text[start + 7:i].strip()
            depth -= 1
    return None


def math_correct(parsed, truth) -> bool:
    if not parsed or not truth:
        return False
    parsed = str(parsed).strip()
    return bool(parsed) and grade_answer(parsed, str(truth))


_AIME_BOXED = re.compile(r"\\boxed{\s*(\d+)\s*}")
_AIME_ANSWER = re.compile(r"Answer:\s*(\d+)(?!\.)\b", re.IGNORECASE | re.MULTILINE)


def aime(text) -> int | None:
    text = clean(text)
    if not text:
        return None
    found = list(_AIME_BOXED.finditer(text)) or list(_AIME_ANSWER.finditer(text))
    if not found:
        return None
    value = int(found[-1].group(1))
    return value if 0 <= value <= 999 else None


def aime_correct(parsed, truth) -> bool:
    if parsed is None:
        return False
    try:
        return int(parsed) == int(truth)
    except (ValueError, TypeError):
        return False


def code_deepseek(text) -> str | None:
    text = clean(text)
    m = re.search(r"```python(.*?)```", text, re.DOTALL) if text else None
    return m.group(1).strip() if m else None


def _last_block(text: str) -> str | None:
    py = list(re.finditer(r"```python(.*?)```", text, re.DOTALL))
    if py:
        return py[-1].group(1).strip()
    plain = list(re.finditer(r"```(.*?)```", text, re.DOTALL))
    if plain:
        return re.sub(r"^(?:python|py)\s*\n", "", plain[-1].group(1).strip(), flags=re.IGNORECASE)
    return None


def code_gpt_oss(text) -> str | None:
    text = clean(text)
    if not text:
        return None
    final = harmony_final(text)
    if final != text:
        got = _last_block(final)
        if got is not None:
            return got
    return _last_block(text)
