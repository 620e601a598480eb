"""Chapter 04: layer normalization and the residual sublayer around it.

    LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta     (over the last dimension)
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


class SublayerConnection(nn.Module):
    """A residual connection around `sublayer` with dropout and layer normalization,
    after the sum (post-norm, the paper) or before the sublayer (pre-norm, norm_first)."""

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(probability("dropout", dropout))

    def forward(self, x: torch.Tensor,
                sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
