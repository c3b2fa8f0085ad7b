"""The `layout` section: a serving layout with roles, placed on the nodes of one allocation.

Roles: `server` (data-parallel servers, each a whole model), or `context` (prefill) and
`generation` (decode) workers of a disaggregated layout; `router`, the one front door in front of
the workers (required when disaggregated). Each role has a count, GPUs per instance, its
parallelism and its stack's flags. The rules here hold for every stack; which roles and KV
transfers a stack has is the backend's rule (harness/backends/roles.py).
"""
from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, StrictStr, field_validator, model_validator

from harness.config.section import Section

ROLES = ("server", "context", "generation", "router")
WORKER_ROLES = ("server", "context", "generation")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Role(Section):
    count: int = Field(1, ge=1, le=1024)  # instances of the role
    # GPUs of one instance (tp_size * pp_size; 0: a CPU-only instance, and the router)
    gpus_per_instance: int = Field(1, ge=0, le=512)
    tp_size: int = Field(1, ge=1, le=512)
    pp_size: int = Field(1, ge=1, le=512)
    # The flags of its stack for this role, appended to its command line as given.
    extra_args: list[str] = []
    # Environment of every process of the role, on every rank and node (NCCL_*, UCX_*, NIXL settings):
    # set after perfdag's own per-instance values, so a name given here wins. Values are strings
    # (quote numbers in YAML: "1"), so what reaches the process is what was written.
    env: dict[str, StrictStr] = {}
    # The router's routing policy (empty: round_robin, which every stack's router has); the stacks'
    # names, e.g. cache_aware (SGLang's and vLLM's routers), kv_cache_aware (trtllm-serve's).
    policy: str = Field("", pattern=r"^[a-z_]*$")
    # Wide expert parallelism and data-parallel attention (MoE models), rendered per stack
    # (harness/backends/openai/disagg.py; each stack's rules in harness/backends/roles.py):
    ep_size: int = Field(1, ge=1, le=512)  # ranks an instance's MoE experts are split over
    dp_size: int = Field(1, ge=1, le=512)  # attention data-parallel ranks (vLLM: its data-parallel engines)
    dp_attention: bool = False  # attention data-parallel, the experts expert- or tensor-parallel
    moe_a2a_backend: str = Field("", pattern=r"^[a-z_]*$")  # SGLang's --moe-a2a-backend (e.g. deepep)

    @property
    def wide(self) -> bool:
        """Any expert or attention-data parallelism set."""
        return self.ep_size > 1 or self.dp_size > 1 or self.dp_attention or bool(self.moe_a2a_backend)

    @field_validator("extra_args")
    @classmethod
    def _no_control_chars(cls, v: list[str]) -> list[str]:
        if any(any(ord(c) < 32 for c in a) for a in v):
            raise ValueError("arguments must not hold newlines or control characters")
        return v

    @field_validator("env")
    @classmethod
    def _env_names_and_values(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _; not first a digit)")
            if any(ord(c) < 32 and c != "\t" for c in value):
                raise ValueError(f"{name}: the value must not hold newlines or control characters")
        return v


class LayoutSection(Section):
    """Unset (the default): today's servers of the server section on one node."""

    nodes: int = Field(1, ge=1, le=1024)  # nodes of the serving allocation (>1: Slurm)
    gpus_per_node: int = Field(0, ge=0, le=64)  # what each node offers the layout (0: CPU instances only)
    # How KV caches move from context to generation workers: "auto" = the stack's default
    # (trtllm-serve cache_transceiver backend, SGLang --disaggregation-transfer-backend, vLLM connector).
    kv_transfer: str = Field("auto", pattern=r"^[A-Za-z0-9_]+$")
    roles: dict[Literal[ROLES], Role] = {}  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _roles_make_a_layout(self):
        r = self.roles
        if not any(k in r for k in WORKER_ROLES):
            raise ValueError("layout.roles: no workers; give `server` (data-parallel) or `context` and "
                             "`generation` (disaggregated)")
        disagg = "context" in r or "generation" in r
        if disagg and "server" in r:
            raise ValueError("layout.roles.server: a layout is data-parallel (server) or disaggregated "
                             "(context + generation), not both; remove one")
        if disagg and not ("context" in r and "generation" in r):
            missing = "generation" if "context" in r else "context"
            raise ValueError(f"layout.roles.{missing}: a disaggregated layout needs both context and generation")
        if disagg and "router" not in r:
            raise ValueError("layout.roles.router: a disaggregated layout is measured through its router; add "
                             "layout.roles.router: {count: 1, gpus_per_instance: 0}")
        for name, role in r.items():
            if role.policy and name != "router":
                raise ValueError(f"layout.roles.{name}.policy: only the router routes; set layout.roles.router.policy")
        if "router" in r and r["router"].wide:
            raise ValueError("layout.roles.router: a router has no experts or attention; remove ep_size, dp_size, "
                             "dp_attention and moe_a2a_backend from it")
        if "router" in r:
            if r["router"].count != 1:
                raise ValueError("layout.roles.router.count: one router is the layout's front door; use 1")
            if r["router"].gpus_per_instance:
                raise ValueError("layout.roles.router.gpus_per_instance: a router uses no GPUs; use 0")
        for name, role in r.items():
            ws = role.tp_size * role.pp_size  # (with dp_size the stack decides: harness/backends/roles.py)
            if name != "router" and role.dp_size == 1 and role.gpus_per_instance and role.gpus_per_instance != ws:
                raise ValueError(f"layout.roles.{name}.gpus_per_instance: {role.gpus_per_instance} GPUs for "
                                 f"tp_size*pp_size={ws}; make them equal")
        return self

    @property
    def disaggregated(self) -> bool:
        return "context" in self.roles
