"""Mixtral's experts as one nn.Linear per projection, the layout modelopt's exporters handle.

transformers 5 stores a Mixtral layer's experts as one module with stacked 3-D parameters
(`gate_up_proj` [E, 2I, H]: rows [:I] are the gate (w1), rows [I:] the up projection (w3);
`down_proj` [E, H, I]: w2) and the router as a bare `weight` [E, H]. modelopt 0.47 quantizes that
(QuantMixtralExperts), but its TensorRT-LLM exporter and the AWQ requantize pass index
`len(experts)` / `experts[i].w1` and fail: "object of type 'QuantMixtralExperts' has no len()".
`unfuse_moe_experts` rewrites those blocks, before quantization, into the transformers-4 layout
(gate: nn.Linear; experts: ModuleList of w1/w2/w3), with the same numbers (bit-identical in fp32).
transformers 4 models already have that layout and are left alone.
"""
from __future__ import annotations

import torch
from torch import nn

from harness.errors import BuildError


class UnfusedMixtralExpert(nn.Module):
    """One expert: w2(act(w1 x) * w3 x)."""

    def __init__(self, hidden: int, inter: int, act_fn, dtype, device):
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False, dtype=dtype, device=device)
        self.w2 = nn.Linear(inter, hidden, bias=False, dtype=dtype, device=device)
        self.w3 = nn.Linear(hidden, inter, bias=False, dtype=dtype, device=device)
        self.act_fn = act_fn

    def forward(self, x):
        return self.w2(self.act_fn(self.w1(x)) * self.w3(x))


class UnfusedMixtralSparseMoeBlock(nn.Module):
    """A Mixtral MoE block with per-expert linears.

    The class name contains "MixtralSparseMoeBlock" on purpose: modelopt finds MoE blocks
    (layer_utils.is_moe) and their w1/w2/w3 expert names by that name.
    """

    def __init__(self, hidden: int, inter: int, num_experts: int, top_k: int, act_fn, dtype, device,
                 router_dtype=None):
        super().__init__()
        self.hidden_dim, self.ffn_dim, self.num_experts, self.top_k = hidden, inter, num_experts, top_k
        self.gate = nn.Linear(hidden, num_experts, bias=False, dtype=router_dtype or dtype, device=device)
        self.experts = nn.ModuleList(UnfusedMixtralExpert(hidden, inter, act_fn, dtype, device)
                                     for _ in range(num_experts))

    @classmethod
    def from_fused(cls, block) -> "UnfusedMixtralSparseMoeBlock":
        ex, router = block.experts, block.gate
        num_experts, two_inter, hidden = ex.gate_up_proj.shape
        inter = two_inter // 2
        if ex.gate_up_proj.is_meta or ex.down_proj.is_meta:
            raise BuildError("Mixtral experts are offloaded (on the meta device), so they cannot be unfused for "
                             "modelopt's export; load the model onto GPUs with room for all weights")
        new = cls(hidden, inter, num_experts, block.top_k, ex.act_fn, ex.gate_up_proj.dtype, ex.gate_up_proj.device,
                  router_dtype=router.weight.dtype)
        with torch.no_grad():
            new.gate.weight.copy_(router.weight)
            for k, e in enumerate(new.experts):
                e.w1.weight.copy_(ex.gate_up_proj[k, :inter])
                e.w3.weight.copy_(ex.gate_up_proj[k, inter:])
                e.w2.weight.copy_(ex.down_proj[k])
        return new

    def forward(self, hidden_states):
        # transformers 5's router and expert loop: softmax in fp32, top-k, renormalised weights.
        b, s, h = hidden_states.shape
        x = hidden_states.reshape(-1, h)
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        hit = nn.functional.one_hot(chosen, num_classes=self.num_experts).permute(2, 1, 0)
        for k, expert in enumerate(self.experts):
            slot, tok = torch.where(hit[k])
            if tok.numel() == 0:
                expert(x[:0])  # an empty call keeps calibration hooks aware of every expert
                continue
            y = expert(x[tok]) * weights[tok, slot, None]
            out.index_add_(0, tok, y.to(out.dtype))
        return out.reshape(b, s, h)


def is_fused_mixtral_block(module) -> bool:
    ex, gate = getattr(module, "experts", None), getattr(module, "gate", None)
    return (type(module).__name__ == "MixtralSparseMoeBlock" and ex is not None and gate is not None
            and hasattr(ex, "gate_up_proj") and hasattr(ex, "down_proj") and not isinstance(gate, nn.Linear))


def unfuse_moe_experts(model) -> int:
    """Replaces every fused (transformers 5) Mixtral MoE block of `model` in place; returns how many."""
    targets = [(name, m) for name, m in model.named_modules() if is_fused_mixtral_block(m)]
    for name, block in targets:
        parent, _, child = name.rpartition(".")
        model.get_submodule(parent).register_module(child, UnfusedMixtralSparseMoeBlock.from_fused(block))
    return len(targets)


def unfused_shell(model) -> int:
    """Like `unfuse_moe_experts` for a model whose weights are about to be replaced (the torch engine):
    the new blocks get uninitialised weights of the right shapes."""
    targets = [(name, m) for name, m in model.named_modules() if is_fused_mixtral_block(m)]
    for name, block in targets:
        ex, router = block.experts, block.gate
        num_experts, two_inter, hidden = ex.gate_up_proj.shape
        parent, _, child = name.rpartition(".")
        model.get_submodule(parent).register_module(child, UnfusedMixtralSparseMoeBlock(
            hidden, two_inter // 2, num_experts, block.top_k, ex.act_fn, ex.gate_up_proj.dtype,
            ex.gate_up_proj.device, router_dtype=router.weight.dtype))
    return len(targets)
