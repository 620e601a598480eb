"""Chapter 06: the decoder, a stack of N identical layers, each

    x = SublayerConnection(x, masked SelfAttention)      (no peeking at later targets)
    x = SublayerConnection(x, CrossAttention to memory)  (queries x, keys and values memory)
    x = SublayerConnection(x, FeedForward)                           (paper, section 3.1)
"""

from torch import nn

from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.multi_head import MultiHeadAttention
from tfcourse.normalization import LayerNorm, SublayerConnection


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, feed-forward.

    Parameters map to torch.nn.TransformerDecoderLayer: self_attn <-> self_attn,
    cross_attn <-> multihead_attn, feed_forward.linear{1,2} <-> linear{1,2},
    sublayers[i].norm <-> norm{i+1}.
    """

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, activation="relu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionWiseFeedForward(d_model, d_ff, dropout, activation)
        self.sublayers = nn.ModuleList(
            SublayerConnection(d_model, dropout, norm_first) for _ in range(3)
        )

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        """x (batch, tgt_len, d_model), memory (batch, src_len, d_model);
        tgt_mask e.g. target_mask(tgt) (causal and padding), src_mask e.g. padding_mask(src)."""
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, src_mask)[0])
        return self.sublayers[2](x, self.feed_forward)  # (batch, tgt_len, d_model)


class Decoder(nn.Module):
    """N decoder layers; a final LayerNorm with pre-norm (norm_first), none with post-norm."""

    def __init__(
        self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False, activation="relu"
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation)
            for _ in range(n_layers)
        )
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)  # (batch, tgt_len, d_model)
