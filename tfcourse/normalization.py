"""Chapter 04: layer normalization and the residual sublayer around it; chapter 12: RMSNorm.

    LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta     (over the last dimension)
    RMSNorm(x)   = gamma * x / sqrt(mean(x^2) + eps)               (Zhang & Sennrich 2019)
    post-norm (paper):  x + sublayer -> LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm:           x + Dropout(Sublayer(LayerNorm(x)))
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse._validate import integer, positive, probability


class LayerNorm(nn.Module):
    """Normalizes each position's d_model features:

        LayerNorm(x) = weight * (x - mean) / sqrt(var + eps) + bias

    mean and var (biased: divided by d_model, not d_model - 1) over the last dimension, eps
    inside the square root; weight = gamma (ones at first), bias = beta (zeros). Computed by
    F.layer_norm, the same formula in one fused kernel (written out, it is nine tensor
    operations forward and as many backward: notebook 04 builds it step by step and checks
    it equals this). Same parameters as torch.nn.LayerNorm, so state_dicts copy between the two.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = positive("eps", eps)
        self.weight = nn.Parameter(torch.ones(integer("d_model", d_model)))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d_model = self.weight.size(0)
        if x.size(-1) != d_model:
            raise ValueError(f"x must have shape (..., d_model={d_model}), got {tuple(x.shape)}")
        return F.layer_norm(x, (d_model,), self.weight, self.bias, self.eps)  # (..., d_model)

    def extra_repr(self):
        return f"{self.weight.size(0)}, eps={self.eps}"


class RMSNorm(nn.Module):
    """Root-mean-square normalization (Zhang & Sennrich 2019), the norm of Llama's block:

        RMSNorm(x) = weight * x / sqrt(mean(x^2) + eps)

    LayerNorm without the centering and without the bias: each position's vector is only
    rescaled to a root mean square of 1, then gained. One reduction instead of two, and
    as good in practice. Same parameter (weight) and formula as torch.nn.RMSNorm and as
    transformers' LlamaRMSNorm, which computes a bfloat16 or float16 input in float32 (so does
    this one).
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = positive("eps", eps)
        self.weight = nn.Parameter(torch.ones(integer("d_model", d_model)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d_model = self.weight.size(0)
        if x.size(-1) != d_model:
            raise ValueError(f"x must have shape (..., d_model={d_model}), got {tuple(x.shape)}")
        h = x.to(torch.promote_types(x.dtype, torch.float32))  # float32 at least
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., d_model)
        return self.weight * h.to(x.dtype)

    def extra_repr(self):
        return f"{self.weight.size(0)}, eps={self.eps}"


class SublayerConnection(nn.Module):
    """A residual connection around `sublayer` with dropout and layer normalization,
    after the sum (post-norm, the paper) or before the sublayer (pre-norm, norm_first).
    norm: the normalization (default LayerNorm(d_model); Llama's block gives RMSNorm)."""

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm_first = norm_first
        self.norm = LayerNorm(d_model) if norm is None else norm
        self.dropout = nn.Dropout(probability("dropout", dropout))

    def forward(self, x: torch.Tensor,
                sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
