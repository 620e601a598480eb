"""Exercise 05: the encoder. Token embeddings, one encoder layer, the stack of N layers.

Fill in the three `forward` methods below, then check them from the repository's root:

    pytest exercises/test_ex05_encoder.py

or from a notebook:

    from tfcourse.checking import check
    check("ex05_encoder")

Each class's __init__ is given complete: keep it as it is. The checks copy the reference's
weights into your modules and compare your outputs with the reference's, value by value,
so the parameters must keep their names. The building blocks are the course's own
(tfcourse.multi_head, tfcourse.feed_forward, tfcourse.normalization), so these checks do
not depend on your solutions to exercises 02 and 04. When your result matches a common
mistake, the first line of the failure names it and gives a hint (never the answer).
"""

import math  # noqa: F401  (you will likely need it)

import torch  # noqa: F401
from torch import nn

from tfcourse import encoder as reference
from tfcourse import feed_forward, multi_head, normalization


class Embeddings(nn.Module):
    """Token ids -> vectors, scaled by sqrt(d_model) (paper, section 3.4).

    The table starts from N(0, 1/d_model), as the course's (notebook 05 shows why), not
    from nn.Embedding's N(0, 1). The checks copy the reference's weights in anyway.
    """

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)  # rows of norm ~1

    def forward(self, tokens):
        """tokens (batch, seq) integer ids -> (batch, seq, d_model).

        Hints:
            1. self.embedding(tokens) looks the vectors up.
            2. Scale them by sqrt(d_model) (notebook 05 shows why). Where can you read d_model?
            3. Scale the looked-up vectors, not the table self.embedding.weight.
        """
        raise NotImplementedError


class EncoderLayer(nn.Module):
    """Self-attention then a feed-forward network, each with a residual connection,
    dropout and layer normalization:

        norm_first=False (post-norm, the paper):  x = LayerNorm(x + Dropout(Sublayer(x)))
        norm_first=True  (pre-norm):               x = x + Dropout(Sublayer(LayerNorm(x)))

    self.sublayers[0] (around self-attention) and self.sublayers[1] (around the feed-forward
    network) are the course's SublayerConnection of chapter 04 (exercise 04): sublayer(x, f)
    computes the line above for the function f, in the placement that norm_first says.
    """

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, activation="relu"):
        super().__init__()
        self.self_attn = multi_head.MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = feed_forward.PositionWiseFeedForward(d_model, d_ff, dropout, activation)
        self.sublayers = nn.ModuleList(  # each holds its own .norm and .dropout, and .norm_first
            normalization.SublayerConnection(d_model, dropout, norm_first) for _ in range(2)
        )

    def forward(self, x, mask=None):
        """x (batch, seq, d_model) -> (batch, seq, d_model).

        mask: None, or a bool tensor broadcastable to (batch, heads, seq, seq), True = may
        attend; e.g. tfcourse.masks.padding_mask(tokens, pad_id), of shape (batch, 1, 1, seq).

        Hints:
            1. self.self_attn(query, key, value, mask) returns a tuple (output, weights).
               In self-attention, query, key and value are all the same tensor.
            2. self.sublayers[i](x, f) calls f on x (or on its normalized copy) and does the
               residual, the dropout and the norm. f takes one tensor: which function of
               it is the attention sublayer?
            3. The mask is already in the shape attention wants: pass it on as it is.
            4. Do not change x in place (no x += ...).
        """
        raise NotImplementedError


class Encoder(nn.Module):
    """N encoder layers, then (pre-norm only) a final LayerNorm.

    The layers are the reference's tfcourse.encoder.EncoderLayer, so that this check does
    not depend on your EncoderLayer above.
    """

    def __init__(
        self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False, activation="relu"
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            reference.EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation)
            for _ in range(n_layers)
        )
        # Pre-norm leaves the last layer's output unnormalized; post-norm needs nothing more.
        self.norm = normalization.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, mask=None):
        """x (batch, seq, d_model) -> (batch, seq, d_model); mask as in EncoderLayer.

        Hints:
            1. Each layer is called as layer(x, mask) and returns (batch, seq, d_model).
            2. Which tensor does the second layer take?
            3. self.norm comes once.
        """
        raise NotImplementedError
