"""Every shell command in README.md and docs/*.md is well-formed as written, in a fresh clone after
the Quick start: a ```bash block holds commands to run, not a synopsis (usage lines with
placeholders go in ```text blocks).

For each command: the program is the venv's (`.venv/bin/...`) or a known tool, never a bare
`python`/`luigi` that only works with the venv activated; every file it names inside the
repository exists (or an earlier command on the same page made it); `python -m X` names an
importable module; and every `--flag` it passes to `python -m pipeline <command>`, a luigi task, a
bench script or mkdocs appears in that program's own `--help`. Commands that need Slurm or a GPU
are checked for form only. The commands that run no stage (status, history, servers list, gc's dry
run) are also run as written, against an empty root; the others are not run here.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib
import yaml
from conftest import REPO

VENV_BIN = Path(sys.executable).parent
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Console scripts that come with an optional extra the test venv may not have installed
# (.ci/run installs the docs extra after the suite): the extra must declare the package.
EXTRA_SCRIPTS = {"mkdocs": ("docs", "mkdocs")}
# Programs a command may name without a path: the shell's builtins and standard tools, Slurm's
# client commands (syntax only here), and the system python3 (the quick start's `-m venv`, and
# `-m pip` inside NVIDIA's containers, which have no .venv).
KNOWN_TOOLS = {"python3", "bash", "cd", "cp", "mkdir", "export", "source", "umask", "head", "base64",
               "cat", "tail", "date", "chmod", "sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo"}
# Bare names that only work with the venv activated: the docs prefix them with .venv/bin/.
VENV_ONLY = {"python", "luigi", "luigid", "pip", "pip3", "mkdocs", "pytest"}
# Top-level paths a command may write to or name before they exist (outputs, not inputs).
OUTPUT_ROOTS = {"artifacts", "build", "site", ".venv"}
PATH_SUFFIXES = (".yaml", ".yml", ".py", ".sh", ".txt", ".json", ".jsonl", ".md", ".toml", ".cfg")
CONTROL = {"&&", "||", ";", "|", "(", ")", "&"}
REDIRECT = {">", ">>", "<"}


@dataclass
class Command:
    where: str          # file:line, for messages
    argv: list[str]
    made: set[str] = field(default_factory=set)  # repo paths earlier commands on the page create


def bash_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every ```bash block, indented ones (in list items) included."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"^([ \t]*)```bash[ \t]*\n(.*?)^\1```", text, re.M | re.S):
        body = "\n".join(line[len(m.group(1)):] for line in m.group(2).splitlines())
        out.append((text[:m.start()].count("\n") + 2, body))
    return out


def split_commands(block: str) -> list[tuple[int, list[str], list[str]]]:
    """(line offset, argv, redirect targets) of each simple command: backslash continuations
    joined, comments dropped, split at &&, ||, ;, |, ( and ); leading VAR=value assignments dropped."""
    out = []
    logical: list[tuple[int, str]] = []
    buf, start = "", 0
    for i, line in enumerate(block.splitlines()):
        if not buf:
            start = i
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        logical.append((start, buf + line))
        buf = ""
    for offset, line in logical:
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        argv: list[str] = []
        targets: list[str] = []
        tokens = list(lex)
        i = 0
        while i <= len(tokens):
            tok = tokens[i] if i < len(tokens) else None
            if tok is None or tok in CONTROL:
                while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
                    argv.pop(0)
                if argv:
                    out.append((offset, argv, targets))
                argv, targets = [], []
            elif tok in REDIRECT:
                i += 1
                if i < len(tokens) and tok != "<":
                    targets.append(tokens[i])
            else:
                argv.append(tok)
            i += 1
    return out


def doc_commands() -> list[Command]:
    cmds = []
    for path in DOC_FILES:
        made: set[str] = set()
        rel = path.relative_to(REPO)
        for line, block in bash_blocks(path):
            for offset, argv, targets in split_commands(block):
                made.update(outputs(argv, targets))  # a command may name what it makes
                cmds.append(Command(f"{rel}:{line + offset}", argv, set(made)))
    return cmds


def outputs(argv: list[str], targets: list[str]) -> set[str]:
    """The paths a command creates: redirect targets, cp's destination, mkdir's directories."""
    out = set(targets)
    if argv[0] == "cp" and len(argv) >= 3:
        out.add(argv[-1])
    if argv[0] == "mkdir":
        out.update(a for a in argv[1:] if not a.startswith("-"))
    return out


COMMANDS = doc_commands()


@functools.cache
def help_text(argv: tuple[str, ...]) -> str:
    proc = subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NO_COLOR": "1"})
    return proc.stdout + proc.stderr


def _repo_top() -> set[str]:
    return {p.name for p in REPO.iterdir()} - OUTPUT_ROOTS


def repo_paths(cmd: Command) -> list[str]:
    """The arguments that name a file inside the repository (relative, under a top-level entry)."""
    top = _repo_top()
    out = []
    for arg in cmd.argv[1:]:
        if arg.startswith("--") and "=" in arg:
            arg = arg.split("=", 1)[1]
        if arg.startswith(("-", "/", "$", "~")) or any(c in arg for c in "*?[<>"):
            continue
        first = arg.split("/", 1)[0]
        if ("/" in arg or arg.endswith(PATH_SUFFIXES)) and first in top:
            out.append(arg)
    return out


def program(cmd: Command) -> tuple[str, list[str]]:
    """(what runs, the problems with naming it)."""
    exe = cmd.argv[0]
    if exe.startswith(".venv/bin/"):
        name = exe.removeprefix(".venv/bin/")
        if (VENV_BIN / name).exists():
            return str(VENV_BIN / name), []
        if name in EXTRA_SCRIPTS:
            extra, package = EXTRA_SCRIPTS[name]
            declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            if any(r.startswith(package) for r in declared.get(extra, [])):
                return "", []
            return "", [f"{exe}: the `{extra}` extra does not declare {package}"]
        return "", [f"{exe}: not in the venv ({VENV_BIN})"]
    if "/" in exe:
        target = REPO / exe
        if not target.is_file():
            return "", [f"{exe}: no such file in the repository"]
        if not os.access(target, os.X_OK):
            return "", [f"{exe}: not executable"]
        return str(target), []
    if exe in VENV_ONLY:
        return "", [f"{exe}: works only with the venv activated; write .venv/bin/{exe}"]
    if exe not in KNOWN_TOOLS:
        return "", [f"{exe}: neither the venv's nor a known tool"]
    return shutil.which(exe) or exe, []


def help_argv(cmd: Command, exe: str) -> tuple[str, ...] | None:
    """The command that prints the help listing the flags `cmd` uses; None: flags not checked."""
    argv, name = cmd.argv, Path(cmd.argv[0]).name
    if not exe:
        return None
    if name.startswith("python") and argv[1:3] == ["-m", "pipeline"] and len(argv) > 3:
        verb = argv[4:5] if len(argv) > 4 and not argv[4].startswith("-") else []  # `bfcl dataset`: its own flags
        return (exe, "-m", "pipeline", argv[3], *verb, "--help")
    if name.startswith("python") and len(argv) > 1 and argv[1].startswith("bench/"):
        script = REPO / argv[1]
        return (exe, argv[1], "--help") if script.is_file() and "argparse" in script.read_text() else None
    luigi_prefix = None
    if name == "luigi":
        luigi_prefix = [exe]
    elif name.startswith("python") and argv[1:2] == ["-c"] and "luigi_run" in argv[2]:
        luigi_prefix = [exe, "-c", argv[2]]
    if luigi_prefix is not None:
        rest = argv[len(luigi_prefix):]
        task = next((a for a in rest if re.fullmatch(r"[A-Z][A-Za-z0-9]+", a)), None)
        module = rest[rest.index("--module") + 1] if "--module" in rest else None
        return tuple(luigi_prefix + (["--module", module] if module else []) + [task, "--help-all"]) if task else None
    if name == "luigid":
        return (exe, "--help")
    if name == "mkdocs" and len(argv) > 1:
        return (exe, argv[1], "--help")
    return None


def problems(cmd: Command) -> list[str]:
    exe, out = program(cmd)
    argv = cmd.argv
    for path in repo_paths(cmd):
        if not (REPO / path).exists() and path not in cmd.made:
            out.append(f"{path}: no such file in the repository")
    if Path(argv[0]).name.startswith("python") and argv[1:2] == ["-m"] and len(argv) > 2:
        if importlib.util.find_spec(argv[2]) is None:
            out.append(f"-m {argv[2]}: no such module")
    if Path(argv[0]).name.startswith("python") and argv[1:2] == ["-c"]:
        try:
            compile(argv[2], "<-c>", "exec")
        except SyntaxError as e:
            out.append(f"-c: {e}")
    extras = [m.group(1) for a in argv for m in [re.fullmatch(r"\.\[([a-z,]+)\]", a)] if m]
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    out += [f"extra {e!r}: not in pyproject.toml" for x in extras for e in x.split(",") if e not in declared]
    h = help_argv(cmd, exe)
    if h is not None:
        text = help_text(h)
        for a in argv[1:]:
            flag = a.split("=", 1)[0]
            if re.fullmatch(r"--[A-Za-z][\w-]*", flag) and not re.search(re.escape(flag) + r"(?![\w-])", text):
                out.append(f"{flag}: not a flag of `{' '.join(h[:-1] if h[-1].startswith('--help') else h)}`")
    return out


def _prefetch_helps():
    """Runs the distinct --help commands two at a time (each is a Python start-up)."""
    todo = {h for c in COMMANDS for h in [help_argv(c, program(c)[0])] if h}
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(help_text, sorted(todo)))


@pytest.fixture(scope="module", autouse=True)
def helps():
    _prefetch_helps()


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_is_well_formed(cmd):
    """A command in a ```bash block runs as written after the Quick start: its program, its files,
    its module and its flags all exist."""
    assert not problems(cmd), f"{cmd.where}: {shlex.join(cmd.argv)}\n  " + "\n  ".join(problems(cmd))


def test_bash_blocks_hold_commands_not_synopses():
    """No <placeholder> or [--optional] synopsis in a ```bash block: those go in ```text blocks."""
    bad = []
    for path in DOC_FILES:
        for line, block in bash_blocks(path):
            for i, text in enumerate(block.splitlines()):
                code = text.split(" #", 1)[0]
                if re.search(r"<[A-Za-z][^>]*>", code) or re.search(r"\[--?\w", code):
                    bad.append(f"{path.relative_to(REPO)}:{line + i}: {text.strip()}")
    assert not bad, "\n".join(bad)


def test_the_docs_have_the_commands_a_user_needs():
    """The extraction finds the commands (a parser that found none would pass everything)."""
    joined = [shlex.join(c.argv) for c in COMMANDS]
    assert len(COMMANDS) >= 50, len(COMMANDS)
    for needed in (".venv/bin/luigi --module pipeline FullRun --local-scheduler",
                   ".venv/bin/python -m pipeline status", ".venv/bin/python -m pipeline gc",
                   ".venv/bin/python -m pipeline servers list", ".venv/bin/mkdocs build --strict"):
        assert any(j.startswith(needed) for j in joined), needed


@pytest.mark.parametrize("line, expected", [
    (".venv/bin/luigi --module pipeline FullRun --local-scheduler --no-such-flag", "--no-such-flag: not a flag"),
    (".venv/bin/python -m pipeline gc --keep-weeks 2", "--keep-weeks: not a flag"),
    (".venv/bin/luigi --module pipeline FullRun --local-scheduler --params-file params/my.yaml", "params/my.yaml: no such file"),
    ("luigi --module pipeline FullRun --local-scheduler", "works only with the venv activated"),
    ("python -m pipeline status", "works only with the venv activated"),
    (".venv/bin/python -m harness.no_such_module", "no such module"),
    (".venv/bin/python bench/no_such_bench.py", "bench/no_such_bench.py: no such file"),
    (".venv/bin/pip install -c constraints/cpu.txt -e '.[cpu,nosuchextra]'", "extra 'nosuchextra'"),
    ("frobnicate --all", "neither the venv's nor a known tool"),
])
def test_the_checker_catches_a_broken_command(line, expected):
    """Each kind of mistake the docs could make is reported: an unknown flag, a missing file, a bare
    venv program, a missing module, an undeclared extra, an unknown program."""
    (offset, argv, _), = split_commands(line)
    found = problems(Command("example", argv))
    assert any(expected in p for p in found), found


def test_a_file_made_earlier_on_the_page_counts_as_existing():
    """`cp params/default.yaml params/mine.yaml` then `--params-file params/mine.yaml` is valid as
    written; the same --params-file without the cp is not."""
    page = "```bash\ncp params/default.yaml params/mine.yaml\n.venv/bin/luigi --module pipeline FullRun --local-scheduler --params-file params/mine.yaml\n```\n"
    made: set[str] = set()
    cmds = []
    for _, block in re.findall(r"()```bash\n(.*?)```", page, re.S):
        for _, argv, targets in split_commands(block):
            made.update(outputs(argv, targets))
            cmds.append(Command("x", argv, set(made)))
    assert not problems(cmds[0]) and not problems(cmds[1])
    assert any("params/mine.yaml" in p for p in problems(Command("x", cmds[1].argv)))


def test_every_docs_page_is_in_the_mkdocs_nav_and_every_nav_entry_exists():
    """mkdocs.yml's nav lists each page of docs/ once, and nothing else."""
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    pages = [p for entry in nav for p in entry.values()]
    assert sorted(pages) == sorted(p.name for p in (REPO / "docs").glob("*.md")), pages
    assert len(pages) == len(set(pages))


def test_readme_links_resolve_and_readme_stays_short():
    """The README's relative links (mkdocs does not check them) name files and headings that exist,
    and it stays a short page over the docs."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+://", target):
            assert (REPO / target).exists(), target


# Documented commands that run no stage and change nothing: run as written (in this process, the
# program's own entry point), against an empty artifacts root. `gc` only without --delete.
RUNNABLE = ("status", "history", "servers", "gc")


def test_documented_commands_that_run_no_stage_run_as_written(artifacts, capsys):
    """Every documented `python -m pipeline status|history|servers|gc` command (gc without --delete)
    exits 0 as written, in a fresh root: no flag, file or argument the docs name is refused."""
    from pipeline.cli import main

    ran = []
    for cmd in COMMANDS:
        argv = cmd.argv
        if argv[:3] != [".venv/bin/python", "-m", "pipeline"] or len(argv) < 4 or argv[3] not in RUNNABLE \
                or "--delete" in argv or (argv[3] == "servers" and argv[4:5] != ["list"]) \
                or any("<" in a for a in argv):  # a placeholder for the reader's own file
            continue
        os.chdir(REPO)
        code = main(argv[3:])
        err = capsys.readouterr().err
        assert code == 0, f"{cmd.where}: {' '.join(argv)} exited {code}: {err[-500:]}"
        ran.append(argv[3])
    assert set(ran) == set(RUNNABLE), ran
