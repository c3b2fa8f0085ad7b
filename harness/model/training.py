"""How the tiny stand-in models are trained (tiny.py, tiny_whisper.py): AdamW without weight decay, a
one-cycle learning rate with 10% warm-up, gradients clipped at norm 1."""
from __future__ import annotations

from typing import Callable


def trainer(model, lr: float, steps: int) -> Callable[[object], float]:
    """Puts `model` in training mode for `steps` steps at peak rate `lr`; returns step(loss), which
    takes one optimizer step on that loss and returns it (rounded to 4 places, as the losses are kept)."""
    import torch  # heavy: only where a model is trained

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=max(1, steps), pct_start=0.1)
    model.train()

    def step(loss) -> float:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return round(loss.item(), 4)
    return step
