"""Learning-rate schedules (chapter 07): the paper's, and a cosine one.

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)       (paper, eq. 3)
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


def cosine_lr(step: int, warmup: int, total_steps: int) -> float:
    """Linear warmup to 1 over ``warmup`` steps, then half a cosine down to 0 at
    ``total_steps``. A factor in [0, 1]; steps count from 1."""
    if step < 1:
        raise ValueError(f"steps count from 1, got step={step}")
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def noam_scheduler(optimizer: torch.optim.Optimizer, d_model: int, warmup: int) -> LambdaLR:
    """LambdaLR: lr = optimizer's lr * noam_lr(step). The optimizer's lr (1.0 in the paper)
    is the factor in front. The scheduler counts steps from 0, the paper from 1."""
    return LambdaLR(optimizer, lambda k: noam_lr(k + 1, d_model, warmup))


def cosine_scheduler(optimizer: torch.optim.Optimizer, warmup: int, total_steps: int
                     ) -> LambdaLR:
    """LambdaLR: lr = optimizer's lr (the peak) * cosine_lr(step)."""
    return LambdaLR(optimizer, lambda k: cosine_lr(k + 1, warmup, total_steps))
