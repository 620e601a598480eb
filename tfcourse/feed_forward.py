"""Chapter 04: the position-wise feed-forward network; chapter 12: its gated form, SwiGLU.

    FFN(x)    = max(0, x W_1 + b_1) W_2 + b_2                       (paper, eq. 2)
    SwiGLU(x) = (SiLU(x W_gate) * (x W_up)) W_down                  (Shazeer 2020)

The same linear maps at every position: d_model -> d_ff -> d_model.
"""

import torch
from torch import nn
from torch.nn import functional as F

from tfcourse._validate import integer, probability, same_dtype

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


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


def swiglu_width(d_model: int, multiple_of: int = 256) -> int:
    """Llama's d_ff for a SwiGLU network: 2/3 of the FFN's 4 d_model, rounded up to a
    multiple of ``multiple_of`` (a size the matrix kernels like). A gated network has three
    d_model x d_ff matrices instead of two: at 2/3 of the width it keeps the FFN's 8 d_model^2
    parameters and multiply-adds per token. d_model = 4096 (Llama 2 7B) gives 11008."""
    hidden = 2 * 4 * integer("d_model", d_model) // 3
    multiple_of = integer("multiple_of", multiple_of)
    return multiple_of * -(-hidden // multiple_of)


class SwiGLU(nn.Module):
    """The gated feed-forward network of Llama's block (Shazeer 2020, "GLU Variants Improve
    Transformer"):

        SwiGLU(x) = down(dropout(activation(gate(x)) * up(x)))      activation: SiLU

    SiLU(z) = z * sigmoid(z) (Swish). gate(x) decides, feature by feature, how much of up(x)
    passes. No biases, as in Llama. activation="gelu" gives GEGLU, "relu" ReGLU. Parameters as
    transformers' LlamaMLP: gate = gate_proj, up = up_proj, down = down_proj (Meta's w1, w3, w2).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "silu"):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(_ACTIVATIONS)}, got {activation!r}")
        d_model, d_ff = integer("d_model", d_model), integer("d_ff", d_ff)
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(probability("dropout", dropout))
        self.activation = _ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d_model = self.gate.in_features
        same_dtype("x", x, self.gate.weight)
        if x.size(-1) != d_model:
            raise ValueError(f"x must have shape (..., d_model={d_model}), got {tuple(x.shape)}")
        h = self.activation(self.gate(x)) * self.up(x)  # (..., d_ff)
        return self.down(self.dropout(h))  # (..., d_model)
