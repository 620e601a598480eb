"""Learning-rate schedules (chapter 07): the paper's, and a cosine one (chapter 13: to a
floor, as Llama's).

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)       (paper, eq. 3)
    cosine: step / warmup                                   for step <= warmup
            r + (1 - r) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2   after,
            r (the floor, min_ratio) from total on           (steps count from 1)
"""

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    """The paper's schedule, eq. 3: linear warmup for ``warmup`` steps, then decay as
    1/sqrt(step). Steps count from 1 (step 0 would divide by zero)."""
    if step < 1:
        raise ValueError(f"step counts from 1 in the paper's schedule, got step={step}")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def cosine_lr(step: int, warmup: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """Linear warmup to 1 over ``warmup`` steps (the first step's factor 1 / warmup, never 0),
    then half a cosine down to ``min_ratio`` (the floor) at ``total_steps``, and the floor
    after it. A factor in [min_ratio, 1]; steps count from 1. Equal to transformers'
    get_cosine_with_min_lr_schedule_with_warmup at the same step for 1 <= step <=
    total_steps (that one counts from 0 and makes its step 0 an update with lr 0)."""
    if step < 1:
        raise ValueError(f"steps count from 1, got step={step}")
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))  # clamped after
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def noam_scheduler(optimizer: torch.optim.Optimizer, d_model: int, warmup: int) -> LambdaLR:
    """LambdaLR: lr = optimizer's lr * noam_lr(step). The optimizer's lr (1.0 in the paper)
    is the factor in front. The scheduler counts steps from 0, the paper from 1."""
    return LambdaLR(optimizer, lambda k: noam_lr(k + 1, d_model, warmup))


def cosine_scheduler(optimizer: torch.optim.Optimizer, warmup: int, total_steps: int,
                     min_ratio: float = 0.0) -> LambdaLR:
    """LambdaLR: lr = optimizer's lr (the peak) * cosine_lr(step). The scheduler counts
    steps from 0, cosine_lr from 1."""
    return LambdaLR(optimizer, lambda k: cosine_lr(k + 1, warmup, total_steps, min_ratio))
