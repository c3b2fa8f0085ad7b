"""MATH500 answers judged as PRM800K's grader (openai/prm800k, commit 7ecc7947, the submodule
MLCommons' deepseek-r1 and gpt-oss-120b evaluations import) judges them: equal after the MATH
("mathd") normalisation, or equal after PRM800K's own normalisation, or, element by element of a
tuple/interval, equal under sympy (never for unreduced fractions, and never between an integer and
a non-integer).

Needs sympy and pylatexenc (the grader's LaTeX-to-text step); a missing pylatexenc is a one-line
error, since without it answers with a backslash would be judged differently.
"""
from __future__ import annotations

import re

from harness.mlperf.scoring.common import ScoringInputError

_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week",
          "month", "year", "foot", "feet", "inch", "yard")
_TUPLE_CHARS = "()[]"
# Expressions sympy may never finish simplifying are not tried.
_NO_EVAL_SUBSTRINGS = ("^{", "^(")
_NO_EVAL_RE = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
_TEXT_RE = re.compile(r"^\\text\{(?P<text>.+?)\}$")


# --------------------------------------------------------------------------------------
# The MATH ("mathd") normalisation
# --------------------------------------------------------------------------------------

def _braced_fracs(s: str) -> str:
    r"""\frac12 -> \frac{1}{2}, \frac1{72} -> \frac{1}{72}; the input unchanged when a \frac has
    one character after it; an error when it has none (the whole normalisation is then dropped)."""
    head, *rest = s.split("\\frac")
    out = head
    for part in rest:
        out += "\\frac"
        if part[0] == "{":
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, tail = part[0], part[1], part[2:]
        out += "{" + a + "}" + (b + tail if b == "{" else "{" + b + "}" + tail)
    return out


def _slash_to_frac(s: str) -> str:
    """'3/4' (two plain integers, written canonically) -> \\frac{3}{4}."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _braced_sqrt(s: str) -> str:
    if "\\sqrt" not in s:
        return s
    head, *rest = s.split("\\sqrt")
    return head + "".join("\\sqrt" + (p if p[:1] == "{" else "{" + p[0] + "}" + p[1:]) for p in rest)


def _mathd_strip(s: str) -> str:
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"),
                     ("\\left", ""), ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", "")):
        s = s.replace(old, new)
    if "\\text{ " in s:  # a unit on the right; more than one is an error (answer left as is)
        parts = s.split("\\text{ ")
        if len(parts) != 2:
            raise ValueError("several units")
        s = parts[0]
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    halves = s.split("=")
    if len(halves) == 2 and len(halves[0]) <= 2:  # "k = 5" -> "5"
        s = halves[1]
    s = _braced_sqrt(s).replace(" ", "")
    s = _braced_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_to_frac(s)


def mathd_normalize(answer: str | None) -> str | None:
    if answer is None:
        return None
    answer = answer.strip()
    try:
        m = _TEXT_RE.search(answer)
        if m is not None:
            answer = m.group("text").strip()
        return _mathd_strip(answer)
    except Exception:  # noqa: BLE001 - any failure leaves the answer as it was (as the grader does)
        return answer


# --------------------------------------------------------------------------------------
# PRM800K's own normalisation
# --------------------------------------------------------------------------------------

def _latex_to_text(expr: str) -> str:
    try:
        from pylatexenc import latex2text
    except ImportError:
        raise ScoringInputError("MATH500 grading needs the Python package pylatexenc (PRM800K's grader "
                                "converts LaTeX with it); install it") from None
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for old, new in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        expr = expr.replace(old, new)
    return expr.strip()


def _float_or_none(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _near_int(x: float) -> bool:
    try:
        return abs(x - int(round(x))) <= 1e-7
    except (OverflowError, ValueError):
        return False


_THOUSANDS_RE = re.compile(r"(\d)(,)(\d\d\d)($|\D)")


def _drop_thousands_commas(expr: str) -> str:
    while True:
        nxt = _THOUSANDS_RE.sub(r"\1\3\4", expr)
        if nxt == expr:
            return nxt
        expr = nxt


def _is_int_text(s: str) -> bool:
    try:
        return _near_int(float(_drop_thousands_commas(s)))
    except (ValueError, OverflowError):
        return False


def _is_fraction_text(s: str) -> bool:
    return bool(re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", s))


def prm_normalize(expr: str | None) -> str | None:
    if expr is None:
        return None
    m = _TEXT_RE.search(expr)
    if m is not None:
        expr = m.group("text")
    for old, new in (("\\%", "%"), ("\\$", "$"), ("$", ""), ("%", ""), (" or ", " , "), (" and ", " , "),
                     ("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12")):
        expr = expr.replace(old, new)
    for unit in _UNITS:
        expr = re.sub(unit + r"(es)?(s)? *(\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    f = _float_or_none(expr)
    if f is not None and _near_int(f):
        expr = str(int(round(f)))
    if "\\" in expr:
        try:
            expr = _latex_to_text(expr)
        except ScoringInputError:
            raise
        except Exception:  # noqa: BLE001 - unparsable LaTeX stays as written, as in the grader
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", r"\1+\2", expr)  # a mixed number 7 3/4 -> 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _is_int_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _tuple_elements(expr: str) -> list[str]:
    expr = _drop_thousands_commas(expr)
    if not expr:
        return []
    if (len(expr) > 2 and expr[0] in _TUPLE_CHARS and expr[-1] in _TUPLE_CHARS
            and not any(c in expr[1:-1] for c in _TUPLE_CHARS)):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def _may_eval(expr: str) -> bool:
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2:
        return False
    return not any(b in expr for b in _NO_EVAL_SUBSTRINGS) and not any(r.search(expr) for r in _NO_EVAL_RE)


def _sympy_equal(truth: str, given: str) -> bool:
    expr = f"({truth})-({given})"
    try:
        if not _may_eval(expr):
            return False
        import sympy
        from sympy.parsing import sympy_parser

        parsed = sympy_parser.parse_expr(
            expr.replace("^", "**"),
            transformations=sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,))
        return sympy.simplify(parsed) == 0
    except Exception:  # noqa: BLE001 - what sympy cannot parse or simplify is not equal
        return False


def grade_answer(given: str | None, truth: str) -> bool:
    """Whether ``given`` is a correct answer for ground truth ``truth``."""
    if given is None:
        return False
    if mathd_normalize(truth) == mathd_normalize(given):
        return True
    t, g = prm_normalize(truth), prm_normalize(given)
    if t is None:
        return False
    if t == g:
        return True
    if not g:
        return False
    t_elems, g_elems = _tuple_elements(t), _tuple_elements(g)
    if len(t_elems) > 1 and (t[0] != g[0] or t[-1] != g[-1]):
        return False  # (a, b) is not [a, b]
    if len(t_elems) != len(g_elems):
        return False
    for te, ge in zip(t_elems, g_elems):
        if _is_fraction_text(te) and _is_fraction_text(ge):
            ok = te == ge  # an unreduced fraction is wrong, so no simplifying
        elif _is_int_text(te) != _is_int_text(ge):
            ok = False
        else:
            ok = _sympy_equal(te, ge)
        if not ok:
            return False
    return True
