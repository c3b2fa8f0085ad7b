"""What a generated program names that could decide its own verdict from inside its process. No luigi
imports; the program's text is searched, never run.

Where the reference decides in the program's process (mxeval: a Python row's exec() returning, every
other language's exit status), a program can pass without passing its tests: exit 0 before they run,
or find the runner's verdict channel and write to it. mbxp.py lists what a row's solution names of
that kind in its `reaches`, and the passing rows that name any in `flagged`: evidence to look at, not
a verdict (an honest solution may name one of these; the row is scored as MLCommons scores it).
`#define` counts when it redefines a name the row's test uses.
"""
from __future__ import annotations

import re

PATTERNS: dict[str, list[str]] = {
    "python": [
        r"__main__", r"_getframe", r"\bf_(?:back|locals|globals|code)\b", r"\b(?:tb|gi|cr|ag)_frame\b",
        r"\bcurrentframe\b", r"\b(?:settrace|setprofile|addaudithook|_current_frames)\b",
        r"\bget_(?:objects|referrers|referents)\b", r"\bctypes\b", r"\b_exit\b", r"\bfdopen\b", r"\bFileIO\b",
        r"\bos\s*\.\s*(?:read|write|pread|pwrite|readv|writev|sendfile|splice|dup2?|open|closerange)\b",
        r"\bposix\b", r"/proc/", r"__subclasses__", r"__globals__", r"__builtins__", r"__import__",
        r"\bimportlib\b", r"\b(?:exec|eval|compile)\s*\(", r"\batexit\b", r"\bsignal\b", r"\b_?thread(?:ing)?\b",
        r"\binspect\b", r"\bimport\s+gc\b", r"\bgc\s*\.", r"\bsys\s*\.\s*modules\b", r"\bmmap\b",
    ],
    "cpp": [r"\b(?:exit|_exit|_Exit|quick_exit|abort|atexit|at_quick_exit|raise|kill|syscall|execv\w*)\s*\(",
            r"\b(?:asm|__asm__)\b", r"/proc/"],
    "javascript": [r"\bprocess\s*\.\s*(?:exit|reallyExit|kill|abort|exitCode|on|once|binding)\b",
                   r"\beval\s*\(", r"\bFunction\s*\(", r"\bchild_process\b"],
    "php": [r"\b(?:exit|die)\b", r"\bregister_shutdown_function\b", r"\bposix_kill\b", r"\beval\s*\(",
            r"\b(?:exec|system|passthru|shell_exec|proc_open|popen)\s*\("],
    "ruby": [r"\bexit!?", r"\babort\b", r"\bat_exit\b", r"\bProcess\b", r"\beval\b", r"\bKernel\b",
             r"\b(?:system|exec|spawn|fork)\b", r"`"],
}
PATTERNS["typescript"] = PATTERNS["javascript"]
_COMPILED = {lang: [re.compile(p) for p in pats] for lang, pats in PATTERNS.items()}
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)
MAX_FOUND = 10


def reaches(language: str, solution: str, test: str = "") -> list[str]:
    """The distinct texts in `solution` that match the language's patterns (at most MAX_FOUND), plus
    each C/C++ `#define NAME` whose NAME the test uses."""
    found: list[str] = []
    for pattern in _COMPILED.get(language, []):
        for m in pattern.finditer(solution):
            text = re.sub(r"\s+", "", m.group(0))
            if text not in found:
                found.append(text)
    if language == "cpp":
        for name in _DEFINE.findall(solution):
            if re.search(rf"\b{re.escape(name)}\b", test) and f"#define {name}" not in found:
                found.append(f"#define {name}")
    return found[:MAX_FOUND]
