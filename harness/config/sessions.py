"""The `sessions` section: the session workload (RunSessions, harness/sessions/)."""
from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import Field, model_validator

from harness.config.section import Section


class SessionsSection(Section):
    """The session workload (RunSessions): agentic trajectories replayed by perfdag's own scheduler."""

    # MLCommons' agentic trajectory JSONL (one row per message); it enters RunSessions' key by content.
    trajectories_file: Optional[str] = None
    users: int = Field(1, ge=1, le=4096)  # concurrent users, one conversation each at a time
    trajectories: Optional[int] = Field(None, ge=1)  # trajectories to start; unset: one pass over the file
    salt: bool = True  # 4-hex salts around the system prompt (MLCommons' KV-reuse rules); off: sent as recorded
    tool_delays: bool = True  # wait each turn's delay_seconds before sending it
    drain: bool = True  # finish started trajectories after the window ends (for accuracy); off: stop issuing
    max_tokens: int = Field(1024, ge=1)
    temperature: float = Field(0.0, ge=0)
    # The served model's context in tokens, for the warning about turns that cannot fit before anything is
    # sent; unset: build.max_seq_len for servers perfdag launches, none for servers at openai.endpoints.
    context_tokens: Optional[int] = Field(None, ge=1)
    turn_timeout_s: float = Field(600, gt=0)  # a turn's whole reply within this long, else its conversation fails
    # The mean output length per turn must lie in [low, high] tokens (the datacenter rule); unset: not checked.
    osl_band: Optional[Annotated[list[float], Field(min_length=2, max_length=2)]] = None
    # Extra keys of every chat request (seed, chat_template_kwargs, top_p...), sent as given.
    request_extra: dict[str, Any] = {}

    @model_validator(mode="after")
    def _band_in_order(self):
        if self.osl_band is not None and not 0 <= self.osl_band[0] <= self.osl_band[1]:
            raise ValueError(f"osl_band {self.osl_band}: give [low, high] with 0 <= low <= high")
        return self
