"""Chapter 04: the position-wise feed-forward network.

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2                          (paper, eq. 2)

The same two linear maps at every position: d_model -> d_ff -> d_model.
"""

import torch
from torch import nn
from torch.nn import functional as F

from tfcourse._validate import integer, probability, same_dtype

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class PositionWiseFeedForward(nn.Module):
    """linear2(dropout(activation(linear1(x)))), as in torch.nn.TransformerEncoderLayer."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(_ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(integer("d_model", d_model), integer("d_ff", d_ff))
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(probability("dropout", dropout))
        self.activation = _ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d_model = self.linear1.in_features
        same_dtype("x", x, self.linear1.weight)
        if x.size(-1) != d_model:
            raise ValueError(f"x must have shape (..., d_model={d_model}), got {tuple(x.shape)}")
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (..., d_model)
