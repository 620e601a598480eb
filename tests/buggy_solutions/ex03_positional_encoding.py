"""Wrong ways to write the positional encoding, and the diagnosis each must get:
functions of (max_len, d_model) for sinusoidal_encoding, PositionalEncoding subclasses,
and functions of (tokens, embedding, positional_encoding) for embed_and_encode."""

import math

import torch

from tfcourse.positional import PositionalEncoding, sinusoidal_encoding

from . import diagnosis

# ---------------------------------------------------------------------------------------
# sinusoidal_encoding


def _angles(max_len, d_model, start=0, exponent=lambda two_i, d: two_i / d):
    position = torch.arange(start, start + max_len, dtype=torch.float32).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    return position / 10000 ** exponent(two_i, d_model)  # (max_len, d_model / 2)


def _interleave(even, odd):
    pe = torch.zeros(even.size(0), 2 * even.size(1))
    pe[:, 0::2], pe[:, 1::2] = even, odd
    return pe


@diagnosis("sin and cos swapped")
def cos_then_sin(max_len, d_model):
    angle = _angles(max_len, d_model)
    return _interleave(torch.cos(angle), torch.sin(angle))


@diagnosis("sin and cos swapped")
def cos_then_sin_stacked(max_len, d_model):
    angle = _angles(max_len, d_model)
    return torch.stack((angle.cos(), angle.sin()), dim=2).reshape(max_len, d_model)


@diagnosis("Halves concatenated instead of interleaved")
def concatenated(max_len, d_model):
    angle = _angles(max_len, d_model)
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


@diagnosis("Halves concatenated instead of interleaved")
def filled_in_halves(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    angle = _angles(max_len, d_model)
    pe[:, : d_model // 2] = torch.sin(angle)
    pe[:, d_model // 2 :] = torch.cos(angle)
    return pe


@diagnosis("Exponent uses i instead of 2i")
def exponent_i(max_len, d_model):
    angle = _angles(max_len, d_model, exponent=lambda two_i, d: (two_i / 2) / d)
    return _interleave(angle.sin(), angle.cos())


@diagnosis("Exponent uses i instead of 2i")
def exponent_i_loops(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


@diagnosis("Cosine features use exponent 2i+1")
def odd_exponent(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


@diagnosis("Frequencies inverted")
def frequencies_inverted(max_len, d_model):
    angle = _angles(max_len, d_model, exponent=lambda two_i, d: -two_i / d)
    return _interleave(angle.sin(), angle.cos())


@diagnosis("Positions start at 1")
def positions_from_1(max_len, d_model):
    angle = _angles(max_len, d_model, start=1)
    return _interleave(angle.sin(), angle.cos())


@diagnosis("Positions start at 1")
def positions_from_1_loops(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(1, max_len + 1):
        for i in range(0, d_model, 2):
            pe[pos - 1, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos - 1, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return pe


@diagnosis("Wrong table: the table has dtype torch.float64")
def float64_table(max_len, d_model):
    return sinusoidal_encoding(max_len, d_model).double()


@diagnosis("Wrong table: the table should be a torch.Tensor, got ndarray")
def numpy_table(max_len, d_model):
    return sinusoidal_encoding(max_len, d_model).numpy()


@diagnosis("Wrong table: the table has shape")
def transposed(max_len, d_model):
    return sinusoidal_encoding(max_len, d_model).T


@diagnosis("Wrong table on max_len=50, d_model=16, and no common mistake matches")
def base_1000(max_len, d_model):
    return _interleave(*(f(_angles(max_len, d_model) * 10) for f in (torch.sin, torch.cos)))




# ---------------------------------------------------------------------------------------
# PositionalEncoding.forward


@diagnosis("Encoding multiplied instead of added")
class Multiplied(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(x * self.pe[start : start + x.size(1)])


@diagnosis("Encoding multiplied instead of added")
class MultipliedWithUnsqueeze(PositionalEncoding):
    def forward(self, x, start=0):
        pe = self.pe[start : start + x.size(1)].unsqueeze(0)  # (1, seq, d_model)
        return torch.mul(x, pe)


@diagnosis("`start` ignored")
class StartIgnored(PositionalEncoding):
    def forward(self, x, start=0):
        return x + self.pe[: x.size(1)]


@diagnosis("Input modified in place")
class AddedInPlace(PositionalEncoding):
    def forward(self, x, start=0):
        x += self.pe[start : start + x.size(1)]
        return x


@diagnosis("Wrong output: the output has shape")
class BatchSqueezed(PositionalEncoding):
    def forward(self, x, start=0):
        return (x + self.pe[start : start + x.size(1)]).squeeze(0)  # batch 1 loses its axis


@diagnosis("Raised RuntimeError")
class WholeTableAdded(PositionalEncoding):
    def forward(self, x, start=0):
        return x + self.pe


@diagnosis("Raised AttributeError")
class TableNotRegistered(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        torch.nn.Module.__init__(self)

    def forward(self, x, start=0):
        return x + self.table[start : start + x.size(1)]



# ---------------------------------------------------------------------------------------
# embed_and_encode


@diagnosis("Embeddings not scaled by sqrt(d_model)")
def not_scaled(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens))


@diagnosis("Embeddings not scaled by sqrt(d_model)")
def not_scaled_by_hand(tokens, embedding, positional_encoding):
    return embedding.weight[tokens] + positional_encoding.pe[: tokens.size(1)]


@diagnosis("Encoding scaled along with the embeddings")
def scaled_after_adding(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens)) * math.sqrt(embedding.embedding_dim)


@diagnosis("Encoding scaled instead of the embeddings")
def encoding_scaled(tokens, embedding, positional_encoding):
    pe = positional_encoding.pe[: tokens.size(1)]
    return embedding(tokens) + pe * embedding.embedding_dim**0.5


@diagnosis("Scaled by d_model instead of sqrt(d_model)")
def scaled_by_d_model(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens) * embedding.weight.size(1))


@diagnosis("Embeddings divided by sqrt(d_model)")
def divided(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens) / math.sqrt(embedding.embedding_dim))


@diagnosis("Encoding multiplied instead of added")
def multiplied(tokens, embedding, positional_encoding):
    e = embedding(tokens) * math.sqrt(embedding.embedding_dim)
    return e * positional_encoding.pe[: tokens.size(1)]


@diagnosis("Wrong output on tokens (2, 5), d_model=8, and no common mistake matches")
def scaled_by_sqrt_seq(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens) * math.sqrt(tokens.size(-1)))


@diagnosis("Wrong output: the output is None")
def forgot_return(tokens, embedding, positional_encoding):
    positional_encoding(embedding(tokens) * math.sqrt(embedding.embedding_dim))

