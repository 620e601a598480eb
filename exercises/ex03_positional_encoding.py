"""Exercise 03: positional encoding.

Fill in the three items below, then check them from the repository's root:

    pytest exercises/test_ex03_positional_encoding.py

or from a notebook:

    from tfcourse.checking import check
    check("ex03_positional_encoding")

Each item is checked on its own, so you can do them in any order: PositionalEncoding's
given __init__ takes its table from the course's tfcourse.positional.sinusoidal_encoding,
not from yours below. When your result matches a common mistake, the
first line of the failure names it and gives a hint (never the answer).
"""

import math  # noqa: F401  (you will likely need these)

import torch  # noqa: F401
from torch import nn

from tfcourse import positional as reference


def sinusoidal_encoding(max_len, d_model):
    """The paper's table of positional encodings (section 3.5):

        PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

    Args:
        max_len: number of positions, pos = 0, 1, ..., max_len - 1
        d_model: number of features (even)

    Returns:
        a (max_len, d_model) tensor of the default dtype (float32): row pos is PE(pos),
        sines at the even features and cosines at the odd ones: sin, cos, sin, cos, ...

    Hints:
        1. Build the positions as a column (max_len, 1) and the frequencies
           1 / 10000^(2i / d_model) as a row (d_model / 2,): torch.arange(0, d_model, 2)
           gives the values of 2i. Their product is every angle at once.
        2. Features 2i and 2i+1 use the same angle: one sine, one cosine.
        3. Fill the even and odd columns of a zero table (pe[:, 0::2] = ...), or stack
           sin and cos on a new last axis and flatten it.
    """
    raise NotImplementedError


class PositionalEncoding(nn.Module):
    """x -> dropout(x + PE[start : start + seq])

    __init__ is given: it stores the table as the buffer `self.pe` (max_len, d_model), the
    course's table (equal to the one your sinusoidal_encoding makes once it passes, so this
    class works before it does). Write forward.
    """

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", reference.sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, x, start=0):
        """
        Args:
            x: (batch, seq, d_model) embeddings of positions start, start+1, ..., start+seq-1
            start: the position of x's first row (> 0 when decoding one token at a time)

        Returns:
            dropout(x + PE of those positions), (batch, seq, d_model)

        Hints:
            1. Slice the rows of self.pe that belong to x; broadcasting adds them to every
               sequence of the batch.
            2. Call self.dropout, which drops only in training mode (the checks run one case
               with dropout=0.5 in training mode, the others in eval mode).
            3. Do not change x in place (no x += ...).
        """
        raise NotImplementedError


def embed_and_encode(tokens, embedding, positional_encoding):
    """The input of the encoder and the decoder: token embeddings, then positions (section 3.4).

    Args:
        tokens: (batch, seq) int64 token ids
        embedding: an nn.Embedding(vocab_size, d_model): embedding(tokens) is (batch, seq, d_model)
        positional_encoding: a PositionalEncoding(d_model, ...) module (call it, as above)

    Returns:
        (batch, seq, d_model): the embeddings, multiplied by sqrt(d_model), plus the
        positional encoding.

    Hint: read d_model from the embedding (embedding.embedding_dim). Which of the two terms
    does the paper multiply by sqrt(d_model)?
    """
    raise NotImplementedError

