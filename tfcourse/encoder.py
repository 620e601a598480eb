"""Chapter 05: the encoder, a stack of N identical layers, each

    x = SublayerConnection(x, SelfAttention)
    x = SublayerConnection(x, FeedForward)                           (paper, section 3.1)
"""

import math

import torch
from torch import nn

from tfcourse._validate import integer
from tfcourse.config import BlockConfig
from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.multi_head import MultiHeadAttention
from tfcourse.normalization import LayerNorm, SublayerConnection


class Embeddings(nn.Module):
    """Token ids (batch, seq) -> vectors (batch, seq, d_model), scaled by sqrt(d_model)
    (paper, section 3.4).

    The table starts as N(0, 1/d_model), as in the paper's shared-embedding setups (fairseq),
    so that after the scaling the entries are ~N(0, 1) and a row has norm ~sqrt(d_model),
    comparable with the positional encoding's sqrt(d_model / 2). (nn.Embedding's own N(0, 1)
    would give rows of norm ~d_model, drowning the positions.) The same table can be the
    output layer's weight (tied), where its scale keeps the first logits small.

    scaled=False: the lookup alone, as Llama's (chapter 12): no position vector is added
    that it must match. (Meta did not publish the scale Llama's table starts at; PyTorch's
    torchtitan starts it at std 1, what sqrt(d) times N(0, 1/d) gives, transformers at
    0.02. Chapter 12, section 8, measures the scale here.)
    """

    def __init__(self, vocab_size: int, d_model: int, scaled: bool = True):
        super().__init__()
        self.embedding = nn.Embedding(integer("vocab_size", vocab_size), integer("d_model", d_model))
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.scale = math.sqrt(d_model) if scaled else 1.0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        vocab_size, d_model = self.embedding.weight.shape
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"tokens must be a torch.Tensor of ids, got {type(tokens).__name__} "
                            "(torch.as_tensor makes one)")
        if tokens.device != self.embedding.weight.device:
            raise ValueError(f"tokens are on {tokens.device} but the model is on "
                             f"{self.embedding.weight.device}: move them, e.g. "
                             f"tokens.to('{self.embedding.weight.device}')")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"tokens must be an integer tensor of ids, got {tokens.dtype}")
        if tokens.numel() and not 0 <= tokens.min() <= tokens.max() < vocab_size:
            raise ValueError(
                f"tokens must be ids in [0, vocab_size={vocab_size}), "
                f"got values from {tokens.min().item()} to {tokens.max().item()}"
            )
        x = self.embedding(tokens)  # (batch, seq, d_model)
        return x * self.scale if self.scale != 1.0 else x  # unscaled: no pass multiplying by 1


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual SublayerConnection.

    Parameters map to torch.nn.TransformerEncoderLayer: self_attn <-> self_attn,
    feed_forward.linear{1,2} <-> linear{1,2}, sublayers[i].norm <-> norm{i+1}.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", attn_impl: str = "explicit"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, attn_impl=attn_impl)
        self.feed_forward = PositionWiseFeedForward(d_model, d_ff, dropout, activation)
        self.sublayers = nn.ModuleList(
            SublayerConnection(d_model, dropout, norm_first) for _ in range(2)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (batch, seq, d_model); mask bool, True = may attend, e.g. padding_mask(src)."""
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask)[0])
        return self.sublayers[1](x, self.feed_forward)  # (batch, seq, d_model)


class Encoder(nn.Module):
    """N encoder layers; with pre-norm (norm_first) a final LayerNorm, since the last
    layer's output is otherwise never normalized. Post-norm (the paper) has none."""

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
        norm_first: bool = False, activation: str = "relu", attn_impl: str = "explicit",
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, attn_impl)
            for _ in range(integer("n_layers", n_layers))
        )
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    @classmethod
    def from_config(cls, config: BlockConfig) -> "Encoder":
        """The stack that a model's config describes."""
        return cls(n_layers=config.n_layers, **config.layer_options())

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)  # (batch, seq, d_model)
