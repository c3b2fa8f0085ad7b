"""Serving layouts with roles: placement on the allocation's nodes, each stack's rendered command lines
and configs (golden files; every option one its own parser defines), and bad layouts refused before
any stage runs, naming the field."""
from __future__ import annotations

import importlib.util
import json
import os
import re

import pytest
import yaml
from conftest import REPO

from harness.backends import resolve
from harness.backends.openai.disagg import render
from harness.backends.roles import layout_problems
from harness.cache.executed import normalise
from harness.config import ParamsError
from harness.config import resolve as resolve_document
from harness.serving.layout import PlacementError, place

GOLDEN = REPO / "tests" / "golden" / "serving_roles"
UPDATE = os.environ.get("PERFDAG_UPDATE_GOLDEN") == "1"
UPSTREAM = json.loads((GOLDEN / "upstream_flags.json").read_text())

GPU = ("build.backend=openai,build.device=cuda,build.dtype=bfloat16,build.max_batch_size=256,"
       "build.max_num_tokens=8192,build.max_seq_len=2048,build.max_input_len=1024,quantize.format=fp8,"
       "dataset.max_new_tokens=1024,model.tiny.max_position_embeddings=4096")
SLURM = "slurm.serve=true"
# Two nodes of 8 GPUs: two context workers of tp 2, one generation worker of tp 4, a router.
DISAGG = ("layout.nodes=2,layout.gpus_per_node=8,"
          "layout.roles.context.count=2,layout.roles.context.gpus_per_instance=2,layout.roles.context.tp_size=2,"
          "layout.roles.generation.count=1,layout.roles.generation.gpus_per_instance=4,"
          "layout.roles.generation.tp_size=4,layout.roles.router.gpus_per_instance=0")
DP = ("layout.nodes=2,layout.gpus_per_node=8,layout.roles.server.count=2,layout.roles.server.gpus_per_instance=8,"
      "layout.roles.server.tp_size=8")
# One server over two nodes of 4 GPUs (tp 8 across nodes).
SPAN = ("layout.nodes=2,layout.gpus_per_node=4,layout.roles.server.count=1,layout.roles.server.gpus_per_instance=8,"
        "layout.roles.server.tp_size=8")
LAYOUTS = {"disagg": DISAGG, "dp": DP, "span": SPAN}
# Wide expert parallelism with data-parallel attention, disaggregated over two nodes of 8 GPUs: each worker
# one whole node, as each stack spells it (SGLang and trtllm-serve split tp 8 ranks; vLLM runs 8 engines of tp 1).
_WIDE = "layout.nodes=2,layout.gpus_per_node=8,layout.roles.router.gpus_per_instance=0," + ",".join(
    f"layout.roles.{r}.count=1,layout.roles.{r}.gpus_per_instance=8,{{{r}}}" for r in ("context", "generation"))
WIDE = {
    "sglang": _WIDE.format(**{r: f"layout.roles.{r}.tp_size=8,layout.roles.{r}.ep_size=8,layout.roles.{r}.dp_size=8,"
                                 f"layout.roles.{r}.dp_attention=true,layout.roles.{r}.moe_a2a_backend=deepep"
                              for r in ("context", "generation")}),
    "vllm": _WIDE.format(**{r: f"layout.roles.{r}.tp_size=1,layout.roles.{r}.dp_size=8,layout.roles.{r}.ep_size=8"
                            for r in ("context", "generation")}),
    "trtllm-serve": _WIDE.format(**{r: f"layout.roles.{r}.tp_size=8,layout.roles.{r}.ep_size=8,"
                                    f"layout.roles.{r}.dp_attention=true" for r in ("context", "generation")}),
}


def params(stack: str, layout: str = DISAGG, extra: str = ""):
    """The document with the layout's own and its stack's rules (the openai backend still refuses to launch
    a layout: rendering is what these tests check)."""
    return resolve_document(REPO / "params" / "default.yaml",
                            ",".join(x for x in (GPU, f"openai.server={stack}", SLURM, layout, extra) if x),
                            checks=(lambda p: layout_problems(p, p.openai.server),))


def rendered(p) -> list[dict]:
    instances = place(p.layout)
    ports = {}
    for k, inst in enumerate(instances):
        ports[inst.name] = 8000 + k
        ports[f"{inst.name}_bootstrap"] = 9000 + k
        ports[f"{inst.name}_dist"] = 29500 + k
        ports[f"{inst.name}_kv"] = 5600 + 8 * k
        ports[f"{inst.name}_metrics"] = 29000 + k
    return normalise(render(p, instances, ["node0", "node1"], ports, "/repo", "/ckpt"))


def portable(argv: list[str]) -> list[str]:
    """A command line without this machine's program path; an instance over several nodes keeps its wrapper
    (`trtllm-llmapi-launch`, or the shell that adds each node's rank: `/bin/sh -c SCRIPT node-rank ...`)."""
    if argv[:2] == ["/bin/sh", "-c"]:
        return argv[:4] + argv[5:]
    if argv[0].endswith("trtllm-llmapi-launch"):
        return ["trtllm-llmapi-launch"] + argv[2:]
    return argv[1:]


def server_part(argv: list[str]) -> list[str]:
    """A portable command line's part that its stack's parser reads (after an instance's wrapper)."""
    return argv[4:] if argv[:2] == ["/bin/sh", "-c"] else argv[1:] if argv[0] == "trtllm-llmapi-launch" else argv


def options(argv: list[str]) -> list[str]:
    """The options of a command line (after the program; `-m module` is the program's)."""
    argv = argv[2:] if argv[:1] == ["-m"] else argv
    return [a for a in argv if a.startswith("-") and not a.lstrip("-").isdigit()]


def program(stack: str, inst: dict) -> str:
    if inst["role"] != "router":
        return {"trtllm-serve": "trtllm-serve", "sglang": "sglang.launch_server", "vllm": "vllm serve"}[stack]
    return {"trtllm-serve": "trtllm-serve disaggregated", "sglang": "sglang_router.launch_router",
            "vllm": "vllm-router"}[stack]


@pytest.mark.parametrize("stack,layout", [("trtllm-serve", "disagg"), ("sglang", "disagg"), ("vllm", "disagg"),
                                          ("sglang", "dp"), ("vllm", "dp"), ("trtllm-serve", "dp"),
                                          ("trtllm-serve", "span"), ("sglang", "span"), ("vllm", "span"),
                                          ("trtllm-serve", "wide"), ("sglang", "wide"), ("vllm", "wide")])
def test_layout_renders_as_golden_and_each_option_is_its_parsers(stack, layout):
    """Each stack's layout renders to the golden command lines and configs, and every option in them is one
    the stack's own parser defines (tests/golden/serving_roles/upstream_flags.json names the source); a
    trtllm-serve worker's options file holds only keys TensorRT-LLM's LLM API arguments define."""
    lay = WIDE[stack] if layout == "wide" else LAYOUTS[layout] + (
        ",layout.roles.router.gpus_per_instance=0" if layout == "dp" and stack != "trtllm-serve" else "")
    got = rendered(params(stack, lay))
    for inst in got:
        inst["argv"] = portable(inst["argv"])
        allowed = set(UPSTREAM[program(stack, inst)]["options"])
        rank_flags = re.findall(r"--[a-z-]+", inst["argv"][2]) if inst["argv"][:2] == ["/bin/sh", "-c"] else []
        unknown = [o for o in options(server_part(inst["argv"])) + rank_flags if o not in allowed]
        assert not unknown, f"{inst['name']}: options its parser lacks: {unknown}"
        if stack == "trtllm-serve" and inst["role"] != "router":
            keys = set(inst["files"]["config.yaml"]) - set(UPSTREAM["trtllm llm api options"]["keys"])
            assert not keys, f"{inst['name']}: LLM API options TensorRT-LLM lacks: {keys}"
    f = GOLDEN / f"{stack}-{layout}.json"
    if UPDATE:
        f.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(f.read_text())


def test_trtllm_disaggregated_config_is_what_its_parser_reads():
    """trtllm-serve disaggregated's YAML: only keys extract_disagg_cfg/extract_ctx_gen_cfgs read, one url per
    instance (their check), each `host:port` (they split on ':'), pointing at the workers rendered."""
    got = rendered(params("trtllm-serve"))
    router = next(i for i in got if i["role"] == "router")
    cfg = yaml.safe_load(yaml.safe_dump(router["files"]["config.yaml"]))
    spec = UPSTREAM["trtllm disaggregated config"]
    assert set(cfg) <= set(spec["top"])
    for role, key in (("context", "context_servers"), ("generation", "generation_servers")):
        section = cfg[key]
        assert set(section) <= set(spec["role"])
        workers = [f"{i['host']}:{i['port']}" for i in got if i["role"] == role]
        assert section["urls"] == workers and section["num_instances"] == len(workers)
        assert all(len(u.split(":")) == 2 for u in section["urls"])
    assert router["argv"][1:3] == ["disaggregated", "-c"] and router["argv"][3].endswith("router_0/config.yaml")
    ctx = next(i for i in got if i["role"] == "context")
    assert ctx["files"]["config.yaml"]["cache_transceiver_config"] == {"backend": "DEFAULT"}
    assert ctx["files"]["config.yaml"]["disable_overlap_scheduler"] is True
    gen = next(i for i in got if i["role"] == "generation")
    assert "disable_overlap_scheduler" not in gen["files"]["config.yaml"]


def test_sglang_router_pairs_each_prefill_with_its_bootstrap_port():
    """SGLang's router is told each prefill worker's URL and bootstrap port (the one that worker
    listens on), and each decode worker's URL; workers carry their disaggregation mode."""
    got = rendered(params("sglang", extra="layout.kv_transfer=nixl"))
    router = next(i for i in got if i["role"] == "router")["argv"]
    for inst in got:
        if inst["role"] == "context":
            boot = inst["argv"][inst["argv"].index("--disaggregation-bootstrap-port") + 1]
            k = router.index(f"http://{inst['host']}:{inst['port']}")
            assert router[k - 1] == "--prefill" and router[k + 1] == boot
            assert inst["argv"][inst["argv"].index("--disaggregation-mode") + 1] == "prefill"
        if inst["role"] == "generation":
            assert router[router.index(f"http://{inst['host']}:{inst['port']}") - 1] == "--decode"
            assert "--disaggregation-bootstrap-port" not in inst["argv"]
            assert inst["argv"][inst["argv"].index("--disaggregation-transfer-backend") + 1] == "nixl"


def test_role_flags_and_gpus_reach_only_their_role():
    """A role's extra_args end up on its instances only, after the server's own; each instance sees the
    GPUs placed for it."""
    got = rendered(params("vllm", extra="layout.roles.generation.extra_args=[--max-num-seqs=512]"))
    gen = [i for i in got if i["role"] == "generation"]
    assert all(i["argv"][-1] == "--max-num-seqs=512" for i in gen)
    assert all("--max-num-seqs=512" not in i["argv"] for i in got if i["role"] != "generation")
    assert [i["env"].get("CUDA_VISIBLE_DEVICES") for i in got] == ["0,1", "0,1", "2,3,4,5", None]
    kv = json.loads(gen[0]["argv"][gen[0]["argv"].index("--kv-transfer-config") + 1])
    assert kv == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


@pytest.mark.parametrize("layout,nodes", [
    # worst-fit: context workers on both nodes, the generation worker where most GPUs are free
    (DISAGG, [(0,), (1,), (0,), (0,)]),
    # two servers of a whole node each: one per node
    (DP, [(0,), (1,)]),
    # one instance over two nodes (tp 16 on nodes of 8)
    ("layout.nodes=2,layout.gpus_per_node=8,layout.roles.server.gpus_per_instance=16,layout.roles.server.tp_size=16",
     [(0, 1)]),
])
def test_placement_spreads_instances_over_the_nodes(layout, nodes):
    """Instances spread over the nodes (worst-fit), an instance larger than a node takes whole nodes, the
    router sits on the first node."""
    assert [i.nodes for i in place(params("sglang", layout).layout)] == nodes


def test_cpu_instances_alternate_nodes():
    """CPU-only instances (echo workers, transformers serve) alternate over the nodes."""
    p = resolve(REPO / "params" / "default.yaml",
                "slurm.serve=true,layout.nodes=2,layout.roles.server.count=4,layout.roles.server.gpus_per_instance=0")
    assert [i.nodes for i in place(p.layout)] == [(0,), (1,), (0,), (1,)]


@pytest.mark.parametrize("change,needle", [
    ("layout.roles.server.count=3", "layout.roles.server.count"),               # a third node-sized server
    ("layout.nodes=3", "layout.nodes"),                                         # a node left idle
    ("layout.roles.server.gpus_per_instance=4", "layout.roles.server.gpus_per_instance"),  # != tp*pp
    ("layout.gpus_per_node=6,layout.roles.server.gpus_per_instance=9,layout.roles.server.tp_size=9",
     "layout.roles.server.gpus_per_instance"),                                  # spans nodes unevenly
])
def test_layouts_that_do_not_fit_are_refused(change, needle):
    """Counts that do not fit the allocation are refused before any stage, naming the field."""
    with pytest.raises(ParamsError, match=needle.replace(".", r"\.")):
        params("sglang", DP, change)


@pytest.mark.parametrize("base,change,needle", [
    ("build.backend=torch", DISAGG, "layout.roles.context"),                    # tritonserver: no disaggregation
    ("build.backend=openai", "layout.roles.context.gpus_per_instance=0,layout.roles.generation.gpus_per_instance=0,"
     "layout.roles.router.gpus_per_instance=0", "layout.roles.context"),       # transformers serve: neither
    (GPU + ",openai.server=trtllm-serve", DP + ",layout.roles.router.gpus_per_instance=0", "layout.roles.router"),
    (GPU + ",openai.server=sglang", DISAGG + ",layout.kv_transfer=NixlConnector", "layout.kv_transfer"),
    (GPU + ",openai.server=vllm", DP + ",layout.kv_transfer=NixlConnector", "layout.kv_transfer"),
    (GPU + ",openai.server=vllm", "layout.roles.context.gpus_per_instance=1", "layout.roles.generation"),
    (GPU + ",openai.server=vllm", "layout.roles.context.gpus_per_instance=1,layout.roles.generation.gpus_per_instance=1",
     "layout.roles.router"),
    (GPU + ",openai.server=vllm", DP + ",layout.roles.context.gpus_per_instance=1", "layout.roles.server"),
    (GPU + ",openai.server=vllm", DP + ",layout.roles.router.count=2", "layout.roles.router.count"),
    (GPU + ",openai.server=vllm", DP + ",layout.roles.router.gpus_per_instance=1", "layout.roles.router.gpus_per_instance"),
    (GPU + ",openai.server=vllm", DP + ",openai.num_servers=2", "openai.num_servers"),
    (GPU + ",openai.server=vllm", DP + ",slurm.gpus_per_stage={LaunchServers: 8}", "slurm.gpus_per_stage.LaunchServers"),
    ("build.backend=openai", "layout.roles.server.count=1", "layout.roles.server.gpus_per_instance"),  # a GPU on CPU
])
def test_roles_a_stack_lacks_are_refused_naming_the_field(base, change, needle):
    """A role the chosen stack does not have, a KV transfer it does not know, a half disaggregated layout,
    a second router, a GPU role on CPU, settings the layout overrides: refused before any stage, naming the
    field."""
    with pytest.raises(ParamsError, match=needle.replace(".", r"\.")):
        resolve(REPO / "params" / "default.yaml", f"{base},{SLURM},{change}")


def test_one_cpu_server_is_a_layout():
    """The smallest layout, one CPU server on one node, is valid (nothing refused by accident)."""
    p = resolve(REPO / "params" / "default.yaml", "layout.roles.server.gpus_per_instance=0")
    assert [i.name for i in place(p.layout)] == ["server_0"]


def test_trtllm_layouts_are_refused_until_launched(gpu_overrides):
    """The trtllm backend's servers follow runtime/triton: a layout is refused before any stage, not ignored."""
    with pytest.raises(ParamsError, match=r"layout: the trtllm backend does not launch serving layouts yet"):
        resolve(REPO / "params" / "examples" / "llama2-70b-h100x8-offline.yaml",
                f"{gpu_overrides},layout.gpus_per_node=8,layout.roles.server.gpus_per_instance=8,"
                "layout.roles.server.tp_size=8")


def test_an_openai_layout_launches_and_what_cannot_launch_is_refused_before_any_stage():
    """An openai layout resolves (it is launched: tests/test_multinode_slurm.py), an instance over two nodes
    too; fixed ports beside a layout are refused naming the field."""
    resolve(REPO / "params" / "default.yaml", "build.backend=openai,layout.roles.server.gpus_per_instance=0")
    with pytest.raises(ParamsError, match=r"openai\.ports: a layout's ports are picked when it launches"):
        resolve(REPO / "params" / "default.yaml",
                "build.backend=openai,layout.roles.server.gpus_per_instance=0,openai.ports=[8000]")
    resolve(REPO / "params" / "default.yaml",
            "build.backend=openai,openai.server=vllm,build.device=cuda,quantize.format=none,layout.nodes=2,"
            "layout.gpus_per_node=4,layout.roles.server.gpus_per_instance=8,layout.roles.server.tp_size=8,"
            "slurm.poll_s=1")


def test_several_nodes_need_a_slurm_allocation():
    """A layout over two nodes without a Slurm serving allocation is refused, naming layout.nodes."""
    with pytest.raises(ParamsError, match=r"layout\.nodes: 2 nodes need a Slurm"):
        resolve(REPO / "params" / "default.yaml", "layout.nodes=2,layout.roles.server.count=2,"
                "layout.roles.server.gpus_per_instance=0")


def test_placement_error_is_a_perfdag_input_error():
    """A layout that does not fit raises perfdag's own error type (printed as one line, no traceback)."""
    from harness.errors import PerfdagError

    p = params("sglang", DP)
    p.layout.nodes = 1
    with pytest.raises(PlacementError) as e:
        place(p.layout)
    assert isinstance(e.value, PerfdagError)


# a Python with sglang-router and vllm-router: the test extra installs them beside perfdag
ROUTER_PYTHON = os.environ.get("PERFDAG_ROUTER_PYTHON") or (
    __import__("sys").executable if all(importlib.util.find_spec(m) for m in ("sglang_router", "vllm_router", "smg"))
    else "")
_PARSE = ("import importlib, json, sys; m = importlib.import_module(sys.argv[1] + '.launch_router'); "
          "a = m.parse_router_args(json.loads(sys.argv[2])); "
          "print(json.dumps({'pd': getattr(a, 'pd_disaggregation', False) or getattr(a, 'vllm_pd_disaggregation', False), 'prefill': [list(u) for u in a.prefill_urls], "
          "'decode': list(a.decode_urls), 'workers': list(a.worker_urls), 'port': a.port, 'policy': a.policy}))")


@pytest.mark.skipif(not ROUTER_PYTHON, reason="set PERFDAG_ROUTER_PYTHON to a Python with sglang-router==0.3.2 and "
                                               "vllm-router==0.1.17 installed (not perfdag dependencies) to run")
@pytest.mark.parametrize("stack,module", [("sglang", "sglang_router"), ("sglang", "smg"), ("vllm", "vllm_router")])
@pytest.mark.parametrize("layout", ["disagg", "dp"])
def test_router_argv_is_read_right_by_the_real_router_parser(stack, module, layout):
    """The routers' own parsers (parse_router_args of sglang-router and vllm-router) read perfdag's router
    argv as meant: PD mode, each prefill URL with its bootstrap port, each decode or worker URL, the port."""
    import subprocess
    import sys as _sys

    lay = DISAGG if layout == "disagg" else DP + ",layout.roles.router.gpus_per_instance=0"
    got = rendered(params(stack, lay))
    router = next(i for i in got if i["role"] == "router")
    argv = router["argv"][3:] if stack == "sglang" else router["argv"][1:]
    out = subprocess.run([ROUTER_PYTHON, "-c", _PARSE, module, json.dumps(argv)], capture_output=True, text=True,
                         timeout=60, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr[-2000:]
    parsed = json.loads(out.stdout.strip().splitlines()[-1])
    urls = {r: [f"http://{i['host']}:{i['port']}" for i in got if i["role"] == r] for r in ("context", "generation", "server")}
    assert parsed["port"] == router["port"] and parsed["policy"] == "round_robin"
    if layout == "disagg":
        boots = [int(i["argv"][i["argv"].index("--disaggregation-bootstrap-port") + 1]) if stack == "sglang" else None
                 for i in got if i["role"] == "context"]
        assert parsed["pd"] and parsed["decode"] == urls["generation"]
        assert parsed["prefill"] == [[u, b] for u, b in zip(urls["context"], boots)]
    else:
        assert not parsed["pd"] and parsed["workers"] == urls["server"]
    del _sys


def test_clients_go_to_the_router_or_spread_over_the_servers_and_the_report_names_the_layout():
    """With a router, the measuring clients talk to it alone; without one, to every data-parallel server.
    result.json's layout names each role's instances and nodes, and the report shows them."""
    from harness.reports.report import layout_markdown
    from harness.serving.layout import front_door, layout_summary

    ctx = {"role": "context", "host": "10.0.0.1", "port": 1, "node": "n0"}
    gen = {"role": "generation", "host": "10.0.0.2", "port": 2, "node": "n0", "instance_node": "n1"}
    rtr = {"role": "router", "host": "10.0.0.1", "port": 3, "node": "n0"}
    assert front_door([ctx, gen, rtr]) == [rtr]
    dp = [{"role": "server", "host": "h", "port": p, "node": "n0"} for p in (1, 2)]
    assert front_door(dp) == dp
    assert layout_summary([{"host": "h", "port": 1}]) is None  # no layout: nothing said
    s = layout_summary([ctx, gen, rtr])
    assert s["kind"] == "disaggregated" and s["nodes"] == ["n0", "n1"]
    assert s["roles"]["generation"] == [{"node": "n1", "url": "10.0.0.2:2", "clients": False}]
    assert s["roles"]["router"][0]["clients"] and not s["roles"]["context"][0]["clients"]
    md = "\n".join(layout_markdown(s))
    assert "## Serving layout (disaggregated, 2 node(s))" in md
    assert "| generation | 1 | n1 | - |" in md and "| router | 1 | n0 | 10.0.0.1:3 |" in md


def test_a_router_that_fails_to_start_stops_the_workers_already_up(tmp_path):
    """launch_in_order: workers ready before the router starts; when the router fails, the workers already
    running are stopped before the error is raised (nothing half-launched is left)."""
    import sys

    from harness.serving.launcher import launch_in_order
    from harness.serving.ports import server_ports
    from harness.serving.processes import ServerError, processes_with_token
    from harness.serving.spec import LaunchSpec

    ports = [t[0] for t in server_ports(2, "127.0.0.1", [], per_server=1)]
    echo = [sys.executable, "-m", "harness.serving.testing.echo_openai", "--port"]
    worker = LaunchSpec(index=0, argv=echo + [str(ports[0])], host="127.0.0.1", ports={"serve": ports[0]},
                        models=("",), protocol="openai-http", role="context", cwd=str(REPO))
    router = LaunchSpec(index=1, argv=[sys.executable, "-c", "import sys; sys.exit(3)"], host="127.0.0.1",
                        ports={"serve": ports[1]}, models=("",), protocol="openai-http", role="router", cwd=str(REPO))
    seen = []
    with pytest.raises(ServerError):
        launch_in_order([[worker], [router]], tmp_path, root=tmp_path, ready_timeout_s=20, warmup_prompt=None, streaming=False,
                        on_spawn=seen.append, log=lambda line: None)
    assert [r["role"] for r in seen] == ["context", "router"]  # the router only after the worker was ready
    assert not processes_with_token(seen[0]["token"]), "the worker outlived the failed launch"
    assert (tmp_path / "logs" / "context_0.log").exists() and (tmp_path / "logs" / "router_1.log").exists()


def test_an_instance_on_another_node_runs_through_srun_in_this_job(monkeypatch):
    """An instance placed on another node of this job runs as `srun --overlap --nodelist=<node>` inside the
    job; one on this job's own node runs as it is; outside any job, a placed instance is refused, naming it."""
    from harness.serving.launcher import placed_argv
    from harness.serving.processes import ServerError
    from harness.serving.spec import LaunchSpec

    spec = LaunchSpec(index=1, argv=["echo-server", "--port", "9"], host="127.0.0.1", ports={"serve": 9},
                      models=("",), role="generation", node="n1")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(ServerError, match="generation 1: placed on node n1, but this process runs in no Slurm job"):
        placed_argv(spec)
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURMD_NODENAME", "n0")
    argv = placed_argv(spec)
    assert argv[:2] == ["srun", "--jobid=41"] and "--overlap" in argv and "--nodelist=n1" in argv
    assert argv[-3:] == ["echo-server", "--port", "9"]
    on_gpu = LaunchSpec(index=1, argv=["echo-server"], host="127.0.0.1", ports={"serve": 9}, models=("",),
                        role="generation", node="n1", env={"CUDA_VISIBLE_DEVICES": "1"})
    assert placed_argv(on_gpu)[-3:] == ["env", "CUDA_VISIBLE_DEVICES=1", "echo-server"]  # (Slurm's own is all)
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    assert placed_argv(spec) == ["echo-server", "--port", "9"]


@pytest.mark.parametrize("field,value", [("role", "admin"), ("role", 3), ("instance_node", ["n1"]),
                                         ("instance_node", 7)])
def test_a_forged_layout_field_makes_the_whole_servers_file_ignored(field, value):
    """A servers.json whose role or instance_node is not of perfdag's making is not acted on at all (no
    router picked from it, no instance named from it): the whole file is refused, as any malformed record."""
    from harness.serving.records import servers_of

    good = {"host": "127.0.0.1", "port": 8000, "protocol": "openai-http", "models": [""], "role": "router",
            "instance_node": "n0"}
    assert servers_of({"servers": [good]}, "servers.json")[0]["role"] == "router"
    assert servers_of({"servers": [good, {**good, field: value}]}, "servers.json") is None


def remote_layout_argvs(p) -> list[list[str]]:
    """The srun command lines of `p`'s layout instances on the second node (n1) or over several nodes,
    placed on a two-node allocation (job 41) with fixed ports."""
    from harness.backends.openai.layouts import layout_specs
    from harness.serving.launcher import placed_argv

    instances = place(p.layout)
    ports = {f"{i.name}{s}": 9000 + k for k, i in enumerate(instances) for s in ("", "_kv", "_metrics", "_dist")}
    specs, _ = layout_specs(p, instances, [("n0", "10.0.0.1"), ("n1", "10.0.0.2")], ports, "/root/ls", "/ckpt",
                            "/root", "openai-http")
    return [placed_argv(s) for s in specs if s.span or s.node == "n1"]


def test_every_layout_step_on_another_node_runs_in_the_jobs_container(monkeypatch):
    """With slurm.container_image (pyxis/enroot), an instance started through srun on another node, and one
    over several nodes, runs with the allocation's --container-image, the artifacts root mounted (rendered
    and checked here: no pyxis on this host)."""
    image = "nvcr.io#nvidia/tritonserver:25.01-trtllm-python-py3"
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURMD_NODENAME", "n0")
    for layout in (DISAGG, SPAN):
        p = params("vllm", layout, f"slurm.container_image={image},slurm.container_mounts=[/data:/data]")
        remote = remote_layout_argvs(p)
        assert remote
        for argv in remote:
            assert f"--container-image={image}" in argv and "--container-mounts=/root:/root,/data:/data" in argv
            assert "--container-workdir=/root" in argv


@pytest.mark.parametrize("stack,change,needle", [
    ("sglang", "layout.roles.generation.ep_size=3", r"generation\.ep_size: 3 must divide tp_size \(4\)"),
    ("trtllm-serve", "layout.roles.generation.ep_size=8", r"generation\.ep_size: 8 must divide tp_size \(4\)"),
    ("sglang", "layout.roles.generation.dp_size=2", r"generation\.dp_size: SGLang's data-parallel ranks .*dp_attention: true"),
    ("sglang", "layout.roles.generation.dp_attention=true,layout.roles.generation.dp_size=3",
     r"generation\.dp_size: SGLang's DP attention splits the tp_size \(4\)"),
    ("trtllm-serve", "layout.roles.generation.dp_attention=true,layout.roles.generation.dp_size=2",
     r"generation\.dp_size: trtllm-serve's attention data parallelism spans"),
    ("vllm", "layout.roles.generation.dp_attention=true", r"generation\.dp_attention: vLLM runs attention"),
    ("vllm", "layout.roles.generation.ep_size=2", r"generation\.ep_size: vLLM spreads the experts over .* set ep_size=4"),
    ("vllm", "layout.roles.generation.dp_size=2", r"generation\.gpus_per_instance: 4 GPUs for tp_size\*pp_size\*dp_size=8"),
    ("vllm", "layout.roles.generation.moe_a2a_backend=deepep", r"generation\.moe_a2a_backend: SGLang's"),
    ("sglang", "layout.roles.router.ep_size=2", r"layout\.roles\.router: a router has no experts"),
])
def test_wide_ep_and_dp_attention_that_a_stack_cannot_run_are_refused_naming_the_field(stack, change, needle):
    with pytest.raises(ParamsError, match=needle):
        params(stack, DISAGG, change)


def test_wide_ep_fields_are_refused_on_a_stack_without_them():
    with pytest.raises(ParamsError, match=r"layout\.roles\.server: tritonserver has no expert parallelism"):
        resolve(REPO / "params" / "default.yaml", "layout.nodes=1,layout.roles.server.count=1,"
                "layout.roles.server.gpus_per_instance=0,layout.roles.server.ep_size=2")
