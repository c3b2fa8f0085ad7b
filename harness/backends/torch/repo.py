"""The torch backend's Triton repositories: a Python-backend model per engine instance.

The config speaks the one tensor contract (rendered by harness/serving/triton/pbtxt.py) with
`backend: "python"` and the engine directory as a model parameter; the model source is
triton_model/model.py. Everything here is a pure function of its arguments except `fill_repos`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from harness.serving.triton.pbtxt import model_names, render_model_config, write_model_repo

MODEL_PY = Path(__file__).resolve().parent / "triton_model" / "model.py"


def render_torch_model_config(model_name: str, *, decoupled: bool, max_batch_size: int,
                              engine_dir: str | os.PathLike, instance_count: int = 1, max_queue_delay_us: int = 0,
                              max_num_tokens: int | None = None, max_seq_len: int | None = None,
                              exclude_input_in_output: bool = False, device: str = "cpu",
                              num_threads: int | None = 1,
                              extra_parameters: Mapping[str, str] | None = None) -> str:
    """config.pbtxt of a torch-engine model. `engine_dir` may be relative to the model's directory.

    `max_batch_size` is Triton's and caps the in-flight batch; `max_num_tokens` / `max_seq_len`
    override the engine's limits when given.
    """
    params: dict[str, str] = {
        "engine_dir": os.fspath(engine_dir),
        # TensorRT-LLM's name for the same thing, so TRT-LLM tooling reading configs finds it.
        "gpt_model_path": os.fspath(engine_dir),
        "gpt_model_type": "inflight_fused_batching",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "exclude_input_in_output": "true" if exclude_input_in_output else "false",
        "device": device,
    }
    if max_num_tokens is not None:
        params["max_num_tokens"] = str(int(max_num_tokens))
    if max_seq_len is not None:
        params["max_seq_len"] = str(int(max_seq_len))
    if num_threads is not None:
        params["num_threads"] = str(int(num_threads))
    for key, value in (extra_parameters or {}).items():
        params[str(key)] = str(value)
    return render_model_config(model_name, backend="python", max_batch_size=max_batch_size, decoupled=decoupled,
                               parameters=params, max_queue_delay_us=max_queue_delay_us,
                               instance_count=instance_count)


def render_repos(params, engine_rel: str, *, num_servers: int, decoupled: bool) -> dict[str, dict[str, str]]:
    """{'server_<i>': {model name: config.pbtxt}}. `engine_rel` is the engine directory relative to
    a model's directory, so the repository keeps working when the artifacts root moves."""
    r = params.runtime
    names = model_names(params.triton.model_name, r.instances_per_server)
    configs = {name: render_torch_model_config(
        name, decoupled=decoupled, max_batch_size=params.build.max_batch_size, engine_dir=engine_rel,
        max_queue_delay_us=r.max_queue_delay_microseconds, exclude_input_in_output=r.exclude_input_in_output,
        device=params.build.device, extra_parameters={"batch_scheduler_policy": r.batch_scheduler_policy})
        for name in names}
    return {f"server_{i}": configs for i in range(num_servers)}


def fill_repos(out_dir: Path, repos: dict[str, dict[str, str]], *, decoupled: bool) -> dict:
    """Writes the rendered repositories with the Python model; returns the layout."""
    model_py = MODEL_PY.read_text()
    servers = []
    for repo, configs in repos.items():
        write_model_repo(Path(out_dir) / repo, configs, model_py)
        servers.append({"repo": repo, "models": list(configs)})
    return {"servers": servers, "decoupled": decoupled}
