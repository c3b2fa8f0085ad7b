"""What the OpenAI core is told about its server: the kind, how prompts go out and tokens come back.

Token ids both ways where the server supports them (trtllm-serve, vLLM, SGLang); text prompts and
re-tokenized text for transformers serve, which takes neither.
"""
from __future__ import annotations

from harness.config.openai import TEXT_PROMPT_ROUTERS, through_router

TOKEN_ID_SERVERS = ("trtllm-serve", "vllm", "sglang")


def methods(kind: str, prompt: str = "auto", output: str = "auto", router: bool = False) -> tuple[str, str]:
    """(prompt method, output method) for a server kind (measured through its layout's router or not)
    and the params' choices."""
    ids = kind in TOKEN_ID_SERVERS
    id_prompts = ids and not (router and kind in TEXT_PROMPT_ROUTERS)
    return (("token_ids" if id_prompts else "text") if prompt == "auto" else prompt,
            ("server" if ids else "retokenize") if output == "auto" else output)


def openai_api(params, samples, tokenizer_dir) -> tuple[dict, list[str] | None]:
    """The core's settings; prompts as text are left to the frontends (`decode_prompts`): they load the
    tokenizer anyway where they re-tokenize answers, and do it while the driver starts, not before it."""
    o = params.openai
    api = {"kind": o.server, "prompt": o.prompt, "output_tokens": o.output_tokens, "tokenizer": str(tokenizer_dir),
           "ignore_eos": ignore_eos(params), "router": through_router(params)}
    return api, None


def decode_prompts(tokenizer, prompts) -> list[str]:
    """Each prompt's text, for a server that takes only text: its token ids decoded, special tokens
    dropped (what the dataset's tokenizer made of the prompt)."""
    return tokenizer.batch_decode([prompts.ids(i).tolist() for i in range(len(prompts))], skip_special_tokens=True)


def request_settings(params) -> dict:
    """What enters a measurement's key beside the core's code: the server kind and how prompts go out
    and tokens come back (the OpenAI protocol's record names this)."""
    o = params.openai
    out = {"openai": {"server": o.server, "methods": methods(o.server, o.prompt, o.output_tokens, through_router(params))}}
    if ignore_eos(params):
        out["openai"]["ignore_eos"] = True
    return out


def ignore_eos(params) -> bool:
    """Synthetic workloads set each output's length: servers that can are asked to ignore the end token."""
    return params.dataset.format == "synthetic" and params.openai.server in TOKEN_ID_SERVERS
