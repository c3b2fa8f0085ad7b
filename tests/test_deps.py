"""Declared dependencies: ranges that admit TensorRT-LLM 1.x's pins, exact versions for the CPU quick start.

Offline checks of the files; .ci/run resolves the same files against the package index (metadata
only) and runs the export tests in TensorRT-LLM 1.2's stack.
"""
from __future__ import annotations

import re

import pytest
import tomllib
from conftest import REPO
from packaging.requirements import Requirement
from packaging.version import Version

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
CONSTRAINTS = REPO / "constraints"
# What each TensorRT-LLM release ships (its release notes), and what uv resolved with its pins.
SHIPS = {
    "trtllm-1.0": {"torch": "2.7.1", "transformers": "4.53.1", "nvidia-modelopt": "0.33.1"},
    "trtllm-1.1": {"torch": "2.9.0", "transformers": "4.56.0", "nvidia-modelopt": "0.37.0"},
    "trtllm-1.2": {"torch": "2.9.1", "transformers": "4.57.3", "nvidia-modelopt": "0.37.0"},
    "trtllm-main-2026-08": {"torch": "2.13.0", "transformers": "5.5.4", "nvidia-modelopt": "0.47.0"},
}


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(*extras: str) -> dict[str, Requirement]:
    """perfdag's requirements with these extras; an extra that names perfdag's own ("perfdag[vl]")
    stands for that extra's requirements."""
    out: dict[str, Requirement] = {}
    for r in PROJECT["dependencies"] + [r for e in extras for r in PROJECT["optional-dependencies"][e]]:
        req = Requirement(r)
        if canon(req.name) == canon(PROJECT["name"]):
            out.update({k: v for k, v in declared(*req.extras).items() if k not in out})
        else:
            out[canon(req.name)] = req
    return out


def constraint_lines(name: str) -> dict[str, Requirement]:
    out = {}
    for line in (CONSTRAINTS / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            assert not req.extras, f"{name}: pip refuses extras in constraints ({line})"
            out[canon(req.name)] = req
    return out


def _readme_quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_quick_start_is_two_commands_with_the_cpu_constraints():
    run, test = _readme_quick_start()
    for cmd in (run, test):
        assert cmd.startswith("python3 -m venv .venv && .venv/bin/pip install ")
        assert "-c constraints/cpu.txt" in cmd and "[cpu" in cmd
    assert run.endswith(".venv/bin/luigi --module pipeline FullRun --local-scheduler")
    assert test.endswith(".venv/bin/python -m pytest -q") and "test]" in test
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test in ci, ".ci/run must run exactly the README's test command"


def test_cpu_constraints_pin_the_tested_stack_inside_the_declared_ranges():
    pins = constraint_lines("cpu.txt")
    assert str(pins["torch"].specifier) == "==2.13.0"  # the local CPU wheel; a free resolve pulls CUDA wheels
    assert str(pins["nvidia-modelopt"].specifier) == "==0.47.0"
    assert Version(str(pins["transformers"].specifier).removeprefix("==")).major == 5
    missing, outside = [], []
    for name, req in declared("cpu", "test").items():
        if name not in pins:
            missing.append(name)
            continue
        version = str(pins[name].specifier).removeprefix("==")
        if not req.specifier.contains(version, prereleases=True):
            outside.append(f"{name}=={version} vs {req}")
    assert not missing and not outside, (missing, outside)


@pytest.mark.parametrize("release", sorted(SHIPS))
def test_each_trtllm_release_pins_admit_perfdag(release):
    """The versions a release ships satisfy both its own pins and perfdag's declared ranges (the
    resolver check in .ci/run covers every other package)."""
    pins, deps = constraint_lines(f"{release}.txt"), declared()
    for name, version in SHIPS[release].items():
        if name in pins:
            assert pins[name].specifier.contains(version, prereleases=True), (release, name, version)
        assert deps[name].specifier.contains(version, prereleases=True), (release, name, version, str(deps[name]))


def test_gpu_environments_get_no_cpu_only_serving_dependency():
    """nvidia-pytriton (its bundled CPU tritonserver) needs numpy<2: not a base dependency, so the
    TensorRT-LLM containers (numpy 2 from 1.2's base image on) keep theirs."""
    base = declared()
    assert "nvidia-pytriton" not in base and "nvidia-pytriton" in declared("cpu")
    assert "httpx" in base
    for name in ("fastapi", "uvicorn", "openai", "starlette"):  # transformers' `serving` extra
        assert name in declared("cpu")


def test_compat_environment_is_trtllm_12s_python_stack():
    pins = constraint_lines("compat-trtllm-1.2.txt")
    assert str(pins["torch"].specifier) == "==2.13.0"
    assert str(pins["transformers"].specifier) == "==" + SHIPS["trtllm-1.2"]["transformers"]
    assert pins["nvidia-modelopt"].specifier.contains(SHIPS["trtllm-1.2"]["nvidia-modelopt"])
    assert "-c constraints/compat-trtllm-1.2.txt" in (REPO / ".ci" / "run").read_text()
