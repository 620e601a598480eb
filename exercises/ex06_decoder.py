"""Exercise 06: the causal mask and the decoder layer.

Fill in `causal_mask` and `DecoderLayer.forward` below, then check them from the
repository's root:

    pytest exercises/test_ex06_decoder.py

or from a notebook:

    from tfcourse.checking import check
    check("ex06_decoder")

The decoder layer is built from parts of earlier chapters (multi-head attention, the
feed-forward network, the residual sublayer with its LayerNorm); its __init__ is given, so
the checks can copy the reference's weights into your layer. What is left is the wiring:
which tensor goes where, and which mask goes with which attention.
"""

import torch  # noqa: F401  (you will likely need it)
from torch import nn

from tfcourse import feed_forward, multi_head, normalization


def causal_mask(size, device=None):
    """The decoder's "no peeking" mask: query position i may attend to key positions j <= i.

    Args:
        size:   the target length.
        device: where to create the mask (None: the default device).

    Returns:
        A bool tensor (size, size); True means "may attend". For size=3:
            [[True, False, False],
             [True, True,  False],
             [True, True,  True ]]

    Hints:
        1. Rows are queries, columns keys. May a position see itself?
        2. torch.ones(..., dtype=torch.bool, device=device) and torch.tril are one way.
    """
    raise NotImplementedError


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, feed-forward (paper, 3.1).

        x = Sublayer(x, masked self-attention over x)
        x = Sublayer(x, cross-attention: queries from x, keys and values from memory)
        x = Sublayer(x, feed-forward)

    where Sublayer(x, f) = LayerNorm(x + Dropout(f(x))) (post-norm, the paper), or
    x + Dropout(f(LayerNorm(x))) when norm_first: self.sublayers[i](x, f) does either.
    """

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, activation="relu"):
        super().__init__()  # given: keep these names, the checks copy weights into them
        self.self_attn = multi_head.MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = multi_head.MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = feed_forward.PositionWiseFeedForward(d_model, d_ff, dropout, activation)
        self.sublayers = nn.ModuleList(
            normalization.SublayerConnection(d_model, dropout, norm_first) for _ in range(3)
        )

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        """
        Args:
            x:        (batch, tgt_len, d_model), the decoder's input (embedded targets, or the
                      previous layer's output)
            memory:   (batch, src_len, d_model), the encoder's output
            src_mask: None, or bool (batch, 1, 1, src_len): True at real source tokens,
                      e.g. padding_mask(src, pad_id)
            tgt_mask: None, or bool (batch, 1, tgt_len, tgt_len): causal and padding,
                      e.g. target_mask(tgt, pad_id)

        Returns:
            (batch, tgt_len, d_model)

        Hints:
            1. self.self_attn(query, key, value, mask=...) returns (output, weights).
            2. self.sublayers[i](x, f) computes the residual, dropout and norm around f(x);
               f receives the (possibly normalized) x: write f as a lambda of x.
            3. In cross-attention, which tensor asks the questions (queries), and which one
               holds the answers (keys and values)? Which mask belongs there: which
               positions of `memory` must not be read?
        """
        raise NotImplementedError
