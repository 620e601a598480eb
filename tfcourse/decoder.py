"""Chapter 06: the decoder, a stack of N identical layers, each

    x = SublayerConnection(x, masked SelfAttention)      (no peeking at later targets)
    x = SublayerConnection(x, CrossAttention to memory)  (queries x, keys and values memory)
    x = SublayerConnection(x, FeedForward)                           (paper, section 3.1)
"""

import torch
from torch import nn

from tfcourse._validate import integer
from tfcourse.config import BlockConfig
from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.multi_head import Cache, LayerCache, MultiHeadAttention
from tfcourse.normalization import LayerNorm, SublayerConnection


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, feed-forward.

    Parameters map to torch.nn.TransformerDecoderLayer: self_attn <-> self_attn,
    cross_attn <-> multihead_attn, feed_forward.linear{1,2} <-> linear{1,2},
    sublayers[i].norm <-> norm{i+1}.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", attn_impl: str = "explicit"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, attn_impl=attn_impl)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout, attn_impl=attn_impl)
        self.feed_forward = PositionWiseFeedForward(d_model, d_ff, dropout, activation)
        self.sublayers = nn.ModuleList(
            SublayerConnection(d_model, dropout, norm_first) for _ in range(3)
        )

    def forward(self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: torch.Tensor | None = None,
                cache: LayerCache | None = None) -> torch.Tensor:
        """x (batch, tgt_len, d_model), memory (batch, src_len, d_model);
        tgt_mask e.g. target_mask(tgt) (causal and padding), src_mask e.g. padding_mask(src).
        cache: None, or the layer's (self-attention KVCache, cross-attention static KVCache);
        then x holds only the new positions, and tgt_mask covers (new positions, all
        positions)."""
        self_cache, cross_cache = cache if cache is not None else (None, None)
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask, cache=self_cache)[0])
        x = self.sublayers[1](
            x, lambda x: self.cross_attn(x, memory, memory, src_mask, cache=cross_cache)[0]
        )
        return self.sublayers[2](x, self.feed_forward)  # (batch, tgt_len, d_model)


class Decoder(nn.Module):
    """N decoder layers; a final LayerNorm with pre-norm (norm_first), none with post-norm."""

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
        norm_first: bool = False, activation: str = "relu", attn_impl: str = "explicit",
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, attn_impl)
            for _ in range(integer("n_layers", n_layers))
        )
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    @classmethod
    def from_config(cls, config: BlockConfig) -> "Decoder":
        """The stack that a model's config describes."""
        return cls(n_layers=config.n_layers, **config.layer_options())

    def forward(self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: torch.Tensor | None = None, cache: Cache | None = None) -> torch.Tensor:
        """cache: None, or a Cache(cross=True) (incremental decoding: x holds the new
        positions)."""
        caches = cache.layers if cache is not None else [None] * len(self.layers)
        for layer, layer_cache in zip(self.layers, caches, strict=True):
            x = layer(x, memory, src_mask, tgt_mask, cache=layer_cache)
        return self.norm(x)  # (batch, tgt_len, d_model)

