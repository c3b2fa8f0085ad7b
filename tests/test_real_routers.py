"""The real routers (sglang-router 0.3.2, smg 1.13, vllm-router 0.1.17: the test extra installs them)
started with perfdag's rendered command lines over perfdag's echo workers, and LoadGen measuring through
them: VALID in data-parallel and disaggregated (PD) mode, for each prompt form the router accepts (SGLang's
refuse token ids: text and chat there; vLLM's: token ids and text). Then two layouts' routers and their
NIXL and Mooncake workers at once on one node, each port its own, and the clash check refusing a
hand-made layout that gives two instances one port."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import REPO

from harness.backends.openai import disagg
from harness.backends.openai.layouts import layout_specs, port_clashes, port_needs
from harness.backends import resolve
from harness.config import ParamsError
from harness.config.openai import through_router
from harness.loadgen import run_loadgen
from harness.loadgen.openai_api import methods
from harness.loadgen.openai_chat_api import chat_parts
from harness.model.datasets import Sample
from harness.serving.launcher import launch_in_order, stop_recorded
from harness.serving.layout import LAUNCH_ORDER, place
from harness.serving.ports import free_blocks

BASE = "quantize.format=none,build.backend=openai,build.device=cuda,model.name=m"
CPU = "gpus_per_instance=0"
DP = f"layout.roles.server.count=2,layout.roles.server.{CPU},layout.roles.router.{CPU}"
PD = (f"layout.roles.context.count=1,layout.roles.context.{CPU},layout.roles.generation.count=1,"
      f"layout.roles.generation.{CPU},layout.roles.router.{CPU}")
SETTINGS = {"offline_expected_qps": 200, "min_duration_ms": 0, "min_query_count": 24, "performance_sample_count": 24}
PROMPTS = [[10 + i, 20 + i % 7, 30] for i in range(24)]
TEXTS = [f"tell me about item {i}" for i in range(24)]


def stand_ins(bin_dir: Path) -> dict[str, Path]:
    """`vllm` and SGLang's `python -m sglang.launch_server` workers as the echo server (echo_stack.py):
    only the GPU programs are stood in for, the routers are the real ones."""
    bin_dir.mkdir(exist_ok=True)
    out = {}
    for name in ("vllm", "sglang"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec {sys.executable} -m harness.serving.testing.echo_stack {name} "$@"\n')
        script.chmod(0o755)
        out[name] = script
    return out


def params(stack: str, layout: str, bins: dict, extra: str = ""):
    return resolve(REPO / "params" / "default.yaml",
                   ",".join(x for x in (BASE, f"openai.server={stack}", f"openai.binary={bins[stack]}", layout, extra)
                            if x))


def launch(p, out_dir: Path) -> list[dict]:
    """perfdag's own launch of a one-node layout (Launch._launch_layout's steps, without a luigi stage)."""
    instances = place(p.layout)
    needs = port_needs(p, instances)
    ports = dict(zip(needs, free_blocks(list(needs.values()))))
    specs, rendered = layout_specs(p, instances, [("", "127.0.0.1")], ports, str(out_dir), "/model", str(REPO),
                                   "openai-http")
    assert port_clashes(p, instances, rendered, ports) == []
    groups = [[s for s in specs if s.role in stage] for stage in LAUNCH_ORDER]
    return launch_in_order(groups, out_dir, root=out_dir.parent, ready_timeout_s=90, warmup_prompt=None, streaming=False,
                           log=lambda line: None)


def measure(p, router: dict, out_dir: Path, form: str) -> dict:
    """LoadGen through the router, Offline, with the prompt form `form` (auto: what perfdag picks)."""
    url = f"{router['host']}:{router['port']}"
    if form == "chat":
        samples = [Sample(i, PROMPTS[i], meta={"columns": {"messages": [{"role": "user", "content": t}]}})
                   for i, t in enumerate(TEXTS)]
        return run_loadgen([url], "m", samples, SETTINGS, out_dir, frontends=1, clients_per_frontend=2,
                           warmup_queries=2, max_new_tokens=8, progress=False, protocol="openai-chat",
                           prompt_texts=chat_parts(samples, p.openai.server), api={"kind": p.openai.server, "log": "text"})
    api = {"kind": p.openai.server, "prompt": form, "output_tokens": "auto", "router": through_router(p)}
    return run_loadgen([url], "m", PROMPTS, SETTINGS, out_dir, frontends=1, clients_per_frontend=2, warmup_queries=2,
                       max_new_tokens=8, progress=False, protocol="openai-http", prompt_texts=TEXTS, api=api)


# router -> (stack, the SGLang router module it runs as, the prompt forms it accepts)
ROUTERS = {"sglang-router": ("sglang", "sglang_router", ("auto", "chat")),
           "smg": ("sglang", "smg", ("auto", "chat")),
           "vllm-router": ("vllm", None, ("auto", "text"))}


@pytest.mark.parametrize("mode", ["dp", "pd"])
@pytest.mark.parametrize("router", list(ROUTERS))
def test_a_real_router_is_measured_valid_in_each_prompt_form_it_accepts(router, mode, tmp_path, monkeypatch):
    """perfdag's layout with the real router over echo workers: it starts (its Prometheus exporter on the
    port perfdag rendered), and LoadGen measures through it VALID, every query answered, in each prompt form
    the router accepts; `openai.prompt: auto` sends text through SGLang's routers (they refuse token ids)."""
    stack, module, forms = ROUTERS[router]
    if module:  # which of the two SGLang routers runs: the one perfdag finds (smg alone, as where it is all)
        monkeypatch.setattr(disagg, "SGLANG_ROUTER_MODULES", (module,))
    p = params(stack, DP if mode == "dp" else PD, stand_ins(tmp_path / "bin"))
    records = launch(p, tmp_path / "layout")
    try:
        (rtr,) = [r for r in records if r["role"] == "router"]
        assert (module or "vllm-router") in " ".join(rtr["cmd"])
        metrics = httpx.get(f"http://{rtr['host']}:{rtr['metrics_port']}/metrics", timeout=10)
        assert metrics.status_code == 200
        for form in forms:
            r = measure(p, rtr, tmp_path / form, form)
            assert r["valid"] == "VALID", (form, r.get("valid"))
            assert r["harness"]["per_server"][0]["completed"] >= SETTINGS["min_query_count"]
            if form != "chat":
                want = "text" if (form == "text" or stack == "sglang") else "token_ids"
                assert r["harness"]["methods"] == {"prompt": want, "output_tokens": "server"}, r["harness"]["methods"]
    finally:
        stop_recorded(records, timeout=10)


def test_token_ids_through_sglangs_router_are_refused_before_any_stage(tmp_path):
    """Asking for token-id prompts through SGLang's router (which answers them 422/400) is a params error."""
    with pytest.raises(ParamsError, match=r"openai\.prompt: sglang's router refuses token-id prompts"):
        params("sglang", PD, stand_ins(tmp_path / "bin"), "openai.prompt=token_ids")
    assert methods("sglang", "auto", "auto", router=True) == ("text", "server")
    assert methods("sglang", "auto", "auto", router=False) == ("token_ids", "server")


def test_smg_alone_is_found_where_sglang_router_is_not_installed():
    """Where importing sglang_router fails (Python told it is absent), perfdag renders smg's module."""
    code = ("import sys; sys.modules['sglang_router'] = None; "
            "from harness.backends.openai.disagg import sglang_router_module; print(sglang_router_module())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["smg"], out.stderr


def test_the_policies_perfdag_accepts_are_the_real_routers_choices():
    """layout.roles.router.policy is checked against a table; each entry is a choice of the installed
    router's own parser (sglang-router's and smg's for SGLang, vllm-router's for vLLM)."""
    import argparse

    from harness.backends.roles import ROUTER_POLICIES

    for stack, modules in (("sglang", ("sglang_router", "smg")), ("vllm", ("vllm_router",))):
        for module in modules:
            args = __import__(f"{module}.router_args", fromlist=["RouterArgs"]).RouterArgs
            ap = argparse.ArgumentParser()
            try:
                args.add_cli_args(ap, use_router_prefix=False)
            except TypeError:
                args.add_cli_args(ap)
            choices = next(a.choices for a in ap._actions if "--policy" in a.option_strings)
            assert set(ROUTER_POLICIES[stack]) <= set(choices), (module, choices)


def test_two_layouts_with_routers_nixl_and_mooncake_workers_share_one_node(tmp_path):
    """Two disaggregated vLLM layouts on one node at once, each with the real vllm-router: one moving KV
    over NIXL, one over Mooncake (two workers each, binding their side channel or bootstrap port as vLLM
    does). Every port is its own: both routers (and their Prometheus exporters) and all four workers start
    and answer."""
    bins = stand_ins(tmp_path / "bin")
    nixl = params("vllm", PD, bins)
    mooncake = params("vllm", PD, bins, "layout.kv_transfer=MooncakeConnector")
    records = []
    try:
        records += launch(nixl, tmp_path / "nixl")
        records += launch(mooncake, tmp_path / "mooncake")
        routers = [r for r in records if r["role"] == "router"]
        assert len(routers) == 2 and routers[0]["metrics_port"] != routers[1]["metrics_port"]
        for rtr in routers:
            r = httpx.post(f"http://{rtr['host']}:{rtr['port']}/v1/completions",
                           json={"model": "m", "prompt": [5, 6], "max_tokens": 4, "return_token_ids": True}, timeout=30)
            assert r.status_code == 200, r.text
        kv = [r["env"].get("VLLM_NIXL_SIDE_CHANNEL_PORT") or r["env"].get("VLLM_MOONCAKE_BOOTSTRAP_PORT")
              for r in records if r["role"] != "router"]
        assert len(set(kv)) == 4, kv
        mc_router = routers[1]["cmd"]
        for r in records[4:6]:  # the Mooncake layout's prefill worker's bootstrap port went to vllm-router
            if r["role"] == "context":
                assert r["env"]["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == mc_router[mc_router.index(
                    f"http://{r['host']}:{r['port']}") + 1]
    finally:
        stop_recorded(records, timeout=10)


@pytest.mark.parametrize("change,needle", [
    # two context workers on one node given one NIXL side channel by hand
    ("layout.roles.context.count=2,layout.roles.context.env={VLLM_NIXL_SIDE_CHANNEL_PORT: '5600'}",
     r"layout\.roles\.context\.env\.VLLM_NIXL_SIDE_CHANNEL_PORT: port 5600 on node 0 is taken twice, by context_0 "
     r"\(layout\.roles\.context\.env\.VLLM_NIXL_SIDE_CHANNEL_PORT\) and context_1"),
    # a fixed HTTP port for a role of two instances
    ("layout.roles.generation.count=2,layout.roles.generation.extra_args=[--port=8100]",
     r"layout\.roles\.generation\.extra_args --port: port 8100 on node 0 is taken twice"),
    # a generation worker's side channel overlapping the context worker's block (tp 2: ports 5600-5601)
    ("layout.gpus_per_node=8,layout.roles.context.gpus_per_instance=2,layout.roles.context.tp_size=2,"
     "layout.roles.generation.gpus_per_instance=1,"
     "layout.roles.context.env={VLLM_NIXL_SIDE_CHANNEL_PORT: '5600'},"
     "layout.roles.generation.env={VLLM_NIXL_SIDE_CHANNEL_PORT: '5601'}", r"port 5601 on node 0 is taken twice"),
])
def test_a_hand_made_layout_that_reuses_a_port_is_refused_naming_it(change, needle, tmp_path):
    """The clash check, before any stage: ports a role's env or extra_args fix, per node."""
    with pytest.raises(ParamsError, match=needle):
        params("vllm", PD, stand_ins(tmp_path / "bin"), change)


def test_fixed_ports_on_different_nodes_do_not_clash(tmp_path):
    """The same fixed port for instances on two nodes is fine (the check is per node)."""
    p = resolve(REPO / "params" / "default.yaml",
                f"{BASE},openai.server=vllm,slurm.serve=true,layout.nodes=2,{PD},"
                "layout.roles.context.count=2,layout.roles.context.env={VLLM_NIXL_SIDE_CHANNEL_PORT: '5600'}")
    assert {i.nodes for i in place(p.layout) if i.role == "context"} == {(0,), (1,)}


# router -> (stack, SGLang router module, its session policy: the one that keys on a request's session)
SESSION_POLICIES = {"vllm-router": ("vllm", None, "consistent_hash"), "sglang-router": ("sglang", "sglang_router", "manual"),
                    "smg": ("sglang", "smg", "manual")}


@pytest.mark.parametrize("router", list(SESSION_POLICIES))
def test_a_session_replay_through_a_real_routers_session_policy_keeps_each_conversation_on_one_worker(
        router, tmp_path, monkeypatch):
    """The sessions workload through the real router of a data-parallel layout of two echo workers, its
    policy the one keyed on sessions (vllm-router consistent_hash: X-Session-ID; SGLang's manual:
    X-SMG-Routing-Key): every turn of a conversation reaches the same worker, and the conversations
    spread over both; under round_robin the same replay splits conversations over the workers."""
    from test_sessions import conversation, write

    from harness.sessions.scheduler import Plan
    from harness.sessions.trajectories import read_trajectories
    from harness.sessions.workload import Request, run_sessions

    stack, module, policy = SESSION_POLICIES[router]
    if module:
        monkeypatch.setattr(disagg, "SGLANG_ROUTER_MODULES", (module,))
    trajs = read_trajectories(write(tmp_path / "t.jsonl", [r for i in range(8) for r in conversation(f"c{i}", 3)]))
    seen = {}
    for pol in (policy, "round_robin"):
        record = tmp_path / f"record-{pol}"
        record.mkdir()
        monkeypatch.setenv("ECHO_STACK_RECORD_DIR", str(record))
        p = params(stack, DP, stand_ins(tmp_path / "bin"), f"layout.roles.router.policy={pol}")
        records = launch(p, tmp_path / f"layout-{pol}")
        try:
            (rtr,) = [r for r in records if r["role"] == "router"]
            assert f"--policy {pol}" in " ".join(rtr["cmd"])
            run_sessions(f"{rtr['host']}:{rtr['port']}", trajs, Plan(users=4), Request(model="m", max_tokens=2),
                         tmp_path / f"out-{pol}")
        finally:
            stop_recorded(records, timeout=10)
        workers = {}  # conversation -> the workers that answered its turns
        for f in record.glob("*.jsonl"):
            for line in f.read_text().splitlines():
                msgs = json.loads(line)["body"]["messages"]  # (a router need not pass the headers on)
                sid = next(m["content"] for m in msgs if m["role"] == "user").removeprefix("task of ")
                workers.setdefault(sid, set()).add(f.stem)
        assert set(workers) == {f"c{i}" for i in range(8)}, workers
        seen[pol] = workers
    assert all(len(w) == 1 for w in seen[policy].values()), seen[policy]  # each conversation on one worker
    assert len(set().union(*seen[policy].values())) == 2  # and both workers used
    assert any(len(w) == 2 for w in seen["round_robin"].values())  # the check can fail: round robin splits them
