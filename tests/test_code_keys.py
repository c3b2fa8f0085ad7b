"""perfdag's own code in the keys: change what a module does and exactly the stages that depend on it
(and everything downstream) become missing; reword its comments and nothing does. Where an external
tool does the work, the key follows the command it is handed, not the code that renders it."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAST, REPO
from luigi.task_register import Register

from harness.cache.codehash import import_closure, module_path, package_modules
from pipeline import STAGES

ALL = set(STAGES)
SERVE = {"FillTritonRepo", "LaunchServers", "RunSessions"}  # RunSessions: the servers, nothing else upstream
MEASURE = {"RunLoadgen", "RunAccuracy", "CheckAccuracy", "RunTest01", "RunTest06", "RunTest07", "RunTest09", "FullRun"}
FROM_BUILD = {"BuildEngine"} | SERVE | MEASURE
FROM_QUANTIZE = {"Quantize"} | FROM_BUILD
H100 = "params/examples/llama2-70b-h100x8-offline.yaml"

# Modules a stage may use without listing them, and why they cannot change its output.
NOT_SHAPING = {
    "harness": "where the checkout and its shipped data are (paths, not behaviour)",
    "harness.errors": "exception types",
    "harness.cache.versions": "tool versions enter keys as values",
    "harness.config": "parameters enter keys as values", "harness.config.schema": "", "harness.config.resolve": "",
    "harness.config.rules": "", "harness.untrusted.yamlio": "", "harness.config.section": "", "harness.config.sessions": "",
    "harness.config.slo": "the schema validates search.slo with it; the measuring stages declare it (goodput)",
    "harness.cache.hashing": "how keys are made", "harness.cache.codehash": "", "harness.cache.integrity": "", "harness.cache.store": "",
    "harness.cache.executed": "", "harness.cache": "",
    "harness.cache.runs": "run records: what ran and was reused, not what a stage computes",
    # Benchmark data reach every stage through parameter validation; the stages whose output they
    # shape (the measuring stages: latency limits; CheckAccuracy: gates) declare them.
    "harness.mlperf": "", **{m: "" for m in package_modules(("harness.mlperf.benchmarks",))},
    # What FullRun prints on the terminal (why settings are not submittable, a sweep point's line),
    # not what it writes into its artifact.
    "harness.mlperf.readiness": "terminal output only", "harness.reports.sweep": "",
    "harness.reports.repeats": "--repeat's summary and when to stop repeating: terminal output and control only",
    "harness.backends": "dispatch", "harness.backends.base": "", "harness.backends.torch": "",
    "harness.backends.trtllm": "",
    "harness.serving.processes": "process plumbing: how processes start and die, not what they compute",
    "harness.serving.ports": "", "harness.serving.launcher": "", "harness.serving.registry": "",
    "harness.serving.spec": "", "harness.serving.elsewhere": "",
    "harness.gc.leftovers": "", "harness.serving.endpoints": "", "harness.serving.triton.client": "",
    "harness.serving.records": "checks what is read back of servers, never what a stage computes",
    "harness.serving.agreement": "checks records against the parameters (which are keyed), never what a stage computes",
    "harness.serving.private": "copies and pins what was verified, byte for byte; the command that does it is keyed "
                               "as executed",
    "harness.serving.pinned": "checks what servers read in place against what was verified; computes nothing",
    "harness.cache.signing": "checks a manifest's signature; computes nothing",
    "harness.untrusted.records": "reports records perfdag will not act on",
    "harness.loadgen.semaphores": "names the driver's semaphores so they can be cleaned up; no results",
    "harness.serving.triton.server": "what it renders (argv, env) is keyed as executed",
    "harness.serving.triton.pbtxt": "what it renders (config.pbtxt) is keyed as executed",
    "harness.backends.torch.repo": "what it renders (config.pbtxt) is keyed as executed",
    "harness.cpus": "how many torch threads run; unkeyed like the core count it replaces",
    "harness.untrusted.files": "opens a file or refuses it (not a regular file, too big); what is read is the caller's",
    "harness.untrusted.jsonio": "json.loads, or a refusal (nested too deep); what is read is the caller's",
    "harness.untrusted": "a package of untrusted-input readers (its modules are declared or explained)",
    "harness.untrusted.limits": "how much of a server's answer is read; past it the request fails, nothing else "
                                "changes (and its values are parameters in no key)",
    "harness.serving.readiness": "waiting for a server to be ready: nothing it decides enters a result",
    "harness.model.progress": "how often a training loop says how far it got: nothing it decides enters a model",
    "harness.serving.bounded": "reads a control-plane answer or refuses it (too long); what is read is the caller's",
    "harness.config.layout": "parameters enter keys as values", "harness.config.section": "",
    "harness.backends.roles": "validation: which layouts a stack has (problems only, no output)",
    "harness.backends.openai.disagg": "what it renders (argv, configs) is keyed as executed",
    "harness.serving.layout": "where instances run: placement is a pure function of the layout section, keyed "
                              "as values (the measuring stages declare it: it picks the clients' servers)",
    "harness.slurm": "how a process is started on another node (srun), not what it computes",
    "harness.slurm.jobs": "", "harness.slurm.oci": "",
    "harness.serving.openai": "an empty package (its modules are declared where they are used)",
}
KEYED_AS_EXECUTED = ("harness.backends.trtllm.",)  # the trtllm renderers: their commands are the key


def _allowed(mod: str, declared: set[str]) -> bool:
    return mod in declared or mod in NOT_SHAPING or mod.startswith(KEYED_AS_EXECUTED)


def _dotted(m: str) -> str:
    return m[:-3].replace("/", ".") if m.endswith(".py") else m


def _task(name: str, params_file: str = "params/default.yaml", overrides: str = ""):
    Register.clear_instance_cache()
    return STAGES[name](params_file=params_file, overrides=overrides)


def test_declared_code_covers_what_each_stage_imports(gpu_overrides):
    """A module a stage uses for its work and does not list is caught here: the closure of its
    declared modules, and everything its task module imports, must be declared or explained."""
    cases = (("params/default.yaml", ""), (H100, gpu_overrides), ("params/examples/openai-cpu.yaml", ""),
             ("params/standins/qwen3-vl-235b-a22b.yaml", ""), ("params/standins/agentic-sessions.yaml", ""),
             ("params/standins/whisper.yaml", ""),
             ("params/default.yaml", "layout.roles.server.gpus_per_instance=0"))  # a layout keys more
    for name in STAGES:
        declared_any: set[str] = set()
        for params_file, overrides in cases:
            task = _task(name, params_file, overrides)
            declared = {_dotted(m) for m in task.key_parts().code}
            declared_any |= declared
            for m in task.key_parts().code:
                module_path(m)  # every declared module exists
            missing = {m for m in import_closure(task.key_parts().code) if not _allowed(_dotted(m), declared)}
            assert not missing, f"{name} ({params_file}): uses {sorted(missing)} without declaring them in code()"
        src = Path(sys.modules[type(task).__module__].__file__)
        missing = {m for m in _harness_imports(src) if not _allowed(m, declared_any)}
        assert not missing, f"{name}: its task module uses {sorted(missing)}, which no code() declares"


def _harness_imports(path: Path) -> set[str]:
    from harness.cache.codehash import _existing_module

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n.split(".")[0] == "harness" and (m := _existing_module(n)):
                out.add(m)
    return out


# --- the code invalidation matrix, in a copy of the tree ---------------------------------------------

@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    t = tmp_path_factory.mktemp("tree")
    for d in ("harness", "tasks", "pipeline", "params"):
        shutil.copytree(REPO / d, t / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "luigi.cfg", t / "luigi.cfg")
    return t


def status(tree_dir: Path, root: Path, params_file="params/default.yaml", overrides=FAST) -> dict:
    out = subprocess.run([sys.executable, "-m", "pipeline", "status", "--json", "--params-file", params_file,
                          "--overrides", overrides], cwd=tree_dir,
                         env={**os.environ, "PERFDAG_ARTIFACTS": str(root), "PYTHONPATH": str(tree_dir)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {r["stage"]: r for r in json.loads(out.stdout)}


def edited(tree_dir: Path, rel: str, change):
    """A context: `rel` in the copied tree changed by `change(text) -> text`, restored after."""
    import contextlib

    @contextlib.contextmanager
    def cm():
        f = tree_dir / rel
        old = f.read_text()
        f.write_text(change(old))
        try:
            yield
        finally:
            f.write_text(old)
    return cm()


def behaviour(text: str) -> str:
    return text + "\n_PERFDAG_TEST_BEHAVIOUR_CHANGE = 1\n"


def comment(text: str) -> str:
    return "# a comment that changes nothing\n" + text.replace("\n\n\n", "\n\n\n# spacing\n\n", 1) + "\n# end\n"


def docstring(text: str) -> str:
    tree = ast.parse(text)
    doc = tree.body[0]
    assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
    lines = text.splitlines(keepends=True)
    return "".join(lines[:doc.lineno - 1]) + '"""A reworded docstring."""\n' + "".join(lines[doc.end_lineno:])


MATRIX = [
    ("harness/mlperf/accuracy.py", {"CheckAccuracy", "RunTest07", "FullRun"}),
    ("harness/reports/report.py", {"FullRun"}),
    ("harness/mlperf/compliance.py", {"RunTest01", "RunTest06", "RunTest07", "RunTest09"}),
    ("harness/backends/torch/engine.py", FROM_BUILD),
    ("harness/backends/torch/quantize.py", FROM_QUANTIZE),
    ("harness/model/calibration.py", FROM_QUANTIZE),
    ("harness/model/tiny.py", ALL),
    ("harness/model/datasets.py", {"PrepareDataset"} | MEASURE),
    ("harness/model/references.py", {"PrepareDataset"} | MEASURE),
    ("harness/backends/torch/triton_model/model.py", SERVE | MEASURE),
    ("harness/backends/torch/batcher.py", SERVE | MEASURE),
    ("harness/loadgen/driver.py", MEASURE),
    ("harness/loadgen/cores/triton_grpc.py", MEASURE),
    ("harness/serving/triton/contract.py", MEASURE),
    ("harness/serving/launcher.py", set()),       # plumbing: the commands it runs are unchanged
    ("harness/serving/processes.py", set()),
    ("harness/backends/torch/repo.py", set()),    # the configs it renders are unchanged
]


@pytest.fixture(scope="module")
def unedited_keys(tree, tmp_path_factory) -> dict:
    """The keys of the copied tree as it is (a key depends on the parameters and the code, not on the
    artifacts root): every matrix case compares with them."""
    return {s: r["key"] for s, r in status(tree, tmp_path_factory.mktemp("unedited") / "artifacts").items()}


@pytest.mark.parametrize("rel,expected", MATRIX, ids=[m[0] for m in MATRIX])
def test_code_invalidation_matrix(tree, unedited_keys, tmp_path, rel, expected):
    root = tmp_path / "artifacts"
    before = unedited_keys
    # A reworded comment and docstring together change no key (either alone changing one would show).
    with edited(tree, rel, lambda text: comment(docstring(text))):
        assert {s: r["key"] for s, r in status(tree, root).items()} == before
    with edited(tree, rel, behaviour):
        after = status(tree, root)
    changed = {s for s in before if after[s]["key"] != before[s]}
    assert changed == expected
    for s in changed & set(after):
        if rel in json.dumps(after[s]["code"]):
            break
    else:
        if expected:
            raise AssertionError(f"no changed stage lists {rel} in its code digests")


def test_trtllm_engine_key_follows_the_command_not_the_renderer(tree, tmp_path, gpu_overrides):
    root = tmp_path / "artifacts"
    before = status(tree, root, H100, gpu_overrides)

    def refactor(text):  # same argv, other code: a renamed helper
        return text.replace("def _explicit(", "def _explicit_flag(").replace("_explicit(", "_explicit_flag(")

    with edited(tree, "harness/backends/trtllm/build.py", refactor):
        after = status(tree, root, H100, gpu_overrides)
    assert {s: r["key"] for s, r in after.items()} == {s: r["key"] for s, r in before.items()}

    def new_flag(text):  # the rendered command changes
        return text.replace('"--max_batch_size", str(b.max_batch_size)',
                            '"--max_batch_size", str(b.max_batch_size), "--strip_plan"')

    with edited(tree, "harness/backends/trtllm/build.py", new_flag):
        after = status(tree, root, H100, gpu_overrides)
    changed = {s for s in before if after[s]["key"] != before[s]["key"]}
    assert changed == FROM_BUILD

    def launch_refactor(text):  # tritonserver argv unchanged: LaunchServers kept
        return text.replace("def _serving_args(", "def _serving_argv(").replace("_serving_args(", "_serving_argv(")

    with edited(tree, "harness/backends/trtllm/launch.py", launch_refactor):
        after = status(tree, root, H100, gpu_overrides)
    assert after["LaunchServers"]["key"] == before["LaunchServers"]["key"]
    assert after["BuildEngine"]["key"] == before["BuildEngine"]["key"]


def test_status_says_which_code_changed(tree, tmp_path, built_fast):
    """Against artifacts built before the edit: the engine's code changes, so BuildEngine and what
    follows are missing with the reason named, while PrepareModel and Quantize stay cached."""
    root = tmp_path / "a"
    shutil.copytree(built_fast, root)
    assert {s for s, r in status(tree, root).items() if r["status"] == "cached"} >= {"PrepareModel", "Quantize",
                                                                                       "BuildEngine"}
    with edited(tree, "harness/backends/torch/engine.py", behaviour):
        st = status(tree, root)
    assert st["PrepareModel"]["status"] == st["Quantize"]["status"] == "cached"
    assert st["BuildEngine"]["status"] == "missing"
    assert any(c.get("reason") == "code: harness/backends/torch/engine.py changed" for c in st["BuildEngine"]["changed"])
    with edited(tree, "harness/backends/torch/engine.py", docstring):
        assert status(tree, root)["BuildEngine"]["status"] == "cached"


def test_a_new_scorer_rescores_and_keeps_the_engine(tree, tmp_path, built_fast):
    """Against artifacts a FullRun built before the edit: a behaviour change in harness/mlperf/accuracy.py
    makes the accuracy stage (and the report) missing, while the engine and the measurements stay."""
    root = tmp_path / "a"
    shutil.copytree(built_fast, root)
    short = FAST + ",dataset.num_samples=16,loadgen.min_duration_ms=500,loadgen.min_query_count=16,accuracy.target=0.05"
    done = subprocess.run([sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--local-scheduler",
                           "--overrides", short], cwd=tree, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PERFDAG_ARTIFACTS": str(root), "PYTHONPATH": str(tree)})
    assert done.returncode in (0, 10, 11, 12), done.stderr[-3000:]
    assert status(tree, root, overrides=short)["CheckAccuracy"]["status"] == "cached"
    with edited(tree, "harness/mlperf/accuracy.py", behaviour):
        st = status(tree, root, overrides=short)
    missing = {s for s, r in st.items() if r["status"] == "missing"}
    assert {"CheckAccuracy", "FullRun"} <= missing
    assert not missing & {"PrepareModel", "Quantize", "BuildEngine", "RunLoadgen", "RunAccuracy"}
    assert any(c.get("reason") == "code: harness/mlperf/accuracy.py changed" for c in st["CheckAccuracy"]["changed"])
