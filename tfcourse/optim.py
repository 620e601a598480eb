"""Chapter 13: training today's way. AdamW, clipping by the global norm and the parameter
groups that say which weights decay (the schedule, a cosine to a floor, is
tfcourse.schedules.cosine_lr).

    AdamW (Loshchilov & Hutter 2019, algorithm 2; torch.optim.AdamW), at step t = 1, 2, ...:
        p   <- p - lr * wd * p                       decoupled weight decay, before the step
        m   <- beta1 * m + (1 - beta1) * g
        v   <- beta2 * v + (1 - beta2) * g^2
        p   <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

    Adam with L2 (torch.optim.Adam(weight_decay=wd)) adds wd * p to g instead: the decay
    then goes through m / sqrt(v) and a weight with large gradients decays less.

    clipping (Pascanu et al. 2013; torch.nn.utils.clip_grad_norm_):
        n = sqrt(sum over every gradient g of |g|^2)      one norm for all the parameters
        g <- g * min(1, max_norm / (n + 1e-6))

Llama 2 (Touvron et al. 2023, section 2.2): AdamW with beta1 0.9, beta2 0.95, eps 1e-5,
weight decay 0.1, clipping at 1.0, warm-up then cosine to 10% of the peak.
"""

from collections.abc import Iterable

import torch
from torch import nn


def adamw_step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor,
               exp_avg_sq: torch.Tensor, step: int, lr: float,
               betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One AdamW update of one parameter (the equations above), as new tensors: returns
    (param, exp_avg, exp_avg_sq) after the update; the inputs are left as they are.

    step counts from 1 (the first update's bias corrections are 1 - beta^1). Written with
    torch.optim.AdamW's operations (lerp, addcmul, addcdiv), so that both agree to the bit
    on the CPU; any dtype (the arithmetic happens in the parameter's).
    """
    beta1, beta2 = betas
    param = param.mul(1 - lr * weight_decay)                        # decoupled decay first
    exp_avg = exp_avg.lerp(grad, 1 - beta1)                         # m = b1 m + (1 - b1) g
    exp_avg_sq = exp_avg_sq.mul(beta2).addcmul(grad, grad, value=1 - beta2)  # v, with g^2
    denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add(eps)  # sqrt(v_hat) + eps
    param = param.addcdiv(exp_avg, denom, value=-lr / (1 - beta1**step))    # - lr m_hat / denom
    return param, exp_avg, exp_avg_sq


class AdamW(torch.optim.Optimizer):
    """AdamW: adamw_step on every parameter that has a gradient, its state (``step``,
    ``exp_avg`` = m, ``exp_avg_sq`` = v) kept per parameter as torch.optim.AdamW keeps it,
    so that both agree to float32 rounding; defaults are torch's. Parameter groups
    (param_groups below) may each have their own lr, betas, eps and weight_decay.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):
        if not 0.0 <= lr:
            raise ValueError(f"lr must be a number >= 0, got {lr!r}")
        if len(betas) != 2 or not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        if not 0.0 <= eps:
            raise ValueError(f"eps must be a number >= 0, got {eps!r}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay must be a number >= 0, got {weight_decay!r}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient (the others are left alone)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                new = adamw_step(p, p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"],
                                 group["lr"], group["betas"], group["eps"], group["weight_decay"])
                for tensor, value in zip((p, state["exp_avg"], state["exp_avg_sq"]), new):
                    tensor.copy_(value)
        return loss


def clip_grad_norm(parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float
                   ) -> torch.Tensor:
    """Scale all the gradients together so that their global norm is at most ``max_norm``:
    g <- g * min(1, max_norm / (n + 1e-6)), n the norm of all gradients as one vector.
    Parameters without a gradient are skipped. Returns n, the norm before clipping (a 0-d
    tensor), as torch.nn.utils.clip_grad_norm_ does, whose arithmetic this follows."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)  # below the threshold: 1, no change
    for g in grads:
        g.mul_(coef.to(g.device))
    return norm


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups for an optimizer: the weight matrices of linear maps, with
    ``weight_decay``, and everything else with none: norms' gains, biases and embeddings.

    Decay pulls a weight towards 0, a prior on the matrices that multiply activations. A
    norm's gain or a bias only sets a scale or an offset: decaying it changes what the
    model computes without regularizing it (nanoGPT and Llama-style trainers leave them
    out). Embeddings are a choice: nanoGPT decays every 2-D parameter, embeddings and its
    tied output included; Llama 2 (section 2.2) says weight decay 0.1 and not which
    tensors; OLMo 2 (Team OLMo 2024, its part on training stability) stopped decaying the
    embeddings. We follow OLMo 2, for a reason of our own too: a row of the table only
    learns when its token is read but would decay at every step, so rare tokens' vectors
    would shrink towards 0. An embedding table, also when tied to the output layer, does
    not decay. Each tensor is in one group once, in model order.
    """
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    decay, no_decay = [], []
    for p in model.parameters():  # each tensor once, tied ones too
        if not p.requires_grad:
            continue
        (decay if id(p) in matrices and id(p) not in embeddings else no_decay).append(p)
    return [dict(params=decay, weight_decay=weight_decay),
            dict(params=no_decay, weight_decay=0.0)]
