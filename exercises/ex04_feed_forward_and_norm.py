"""Exercise 04: layer normalization, the position-wise feed-forward network, and the
residual sublayer around them.

Each class's __init__ is given (so the checks can copy known weights into your module);
write the three `forward` methods, then check them from the repository's root:

    pytest exercises/test_ex04_feed_forward_and_norm.py

or from a notebook:

    from tfcourse.checking import check
    check("ex04_feed_forward_and_norm")

When your result matches a common mistake, the first line of the failure names it and
gives a hint (never the answer).
"""

import math  # noqa: F401  (you will likely need these)

import torch
from torch import nn
from torch.nn import functional as F


class LayerNorm(nn.Module):
    """LayerNorm(x) = weight * (x - mean) / sqrt(var + eps) + bias

    mean and var are taken over the last axis (each position's d_model features); var is
    the biased variance (divide by d_model), as in torch.nn.LayerNorm.
    """

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # gain (gamma)
        self.bias = nn.Parameter(torch.zeros(d_model))  # bias (beta)

    def forward(self, x):
        """
        Args:
            x: (..., d_model), e.g. (batch, seq, d_model) or (batch, d_model)

        Returns:
            (..., d_model), each position normalized over its own features, then scaled by
            self.weight and shifted by self.bias.

        Hints:
            1. keepdim=True keeps the mean and variance broadcastable against x.
            2. torch.var divides by n - 1 by default: is that the variance you want?
            3. Where does eps go? Compare with the docstring's formula.
            4. Write it yourself: no torch.nn.LayerNorm or F.layer_norm.
        """
        raise NotImplementedError


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class PositionWiseFeedForward(nn.Module):
    """FFN(x) = activation(x W_1 + b_1) W_2 + b_2       (paper, eq. 2, with max(0, .) = ReLU)

    The same two linear layers, d_model -> d_ff -> d_model, at every position.
    """

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = _ACTIVATIONS[activation]  # a function: F.relu or F.gelu

    def forward(self, x):
        """
        Args:
            x: (..., d_model)

        Returns:
            (..., d_model): linear2(dropout(activation(linear1(x))))

        Hint: nn.Linear acts on the last axis, so every position is transformed alone.
        """
        raise NotImplementedError


class SublayerConnection(nn.Module):
    """A residual connection around a sublayer (attention or feed-forward), with layer
    normalization and dropout:

        post-norm (norm_first=False, the paper):   LayerNorm(x + Dropout(Sublayer(x)))
        pre-norm  (norm_first=True, most models):  x + Dropout(Sublayer(LayerNorm(x)))

    (__init__ uses torch's LayerNorm so that this exercise does not depend on yours.)
    """

    def __init__(self, d_model, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        """
        Args:
            x: (batch, seq, d_model)
            sublayer: a function (batch, seq, d_model) -> (batch, seq, d_model)

        Returns:
            (batch, seq, d_model), by the formula for self.norm_first above.

        Hints:
            1. Write both placements and choose with self.norm_first.
            2. Dropout goes on the sublayer's output, before the sum; the residual x is
               added as it is.
        """
        raise NotImplementedError
