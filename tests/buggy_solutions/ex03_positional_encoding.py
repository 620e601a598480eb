"""Wrong ways to write the positional encoding, and the diagnosis each must get:
functions of (max_len, d_model) for sinusoidal_encoding, PositionalEncoding subclasses,
and functions of (tokens, embedding, positional_encoding) for embed_and_encode."""

import math

import torch

from tfcourse.positional import PositionalEncoding, sinusoidal_encoding

from . import wrong

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


@wrong("sinusoidal_encoding.sin_cos_swapped")
def cos_then_sin(max_len, d_model):
    angle = _angles(max_len, d_model)
    return _interleave(torch.cos(angle), torch.sin(angle))


@wrong("sinusoidal_encoding.sin_cos_swapped")
def cos_then_sin_stacked(max_len, d_model):
    angle = _angles(max_len, d_model)
    return torch.stack((angle.cos(), angle.sin()), dim=2).reshape(max_len, d_model)


@wrong("sinusoidal_encoding.halves_concatenated")
def concatenated(max_len, d_model):
    angle = _angles(max_len, d_model)
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


@wrong("sinusoidal_encoding.halves_concatenated")
def filled_in_halves(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    angle = _angles(max_len, d_model)
    pe[:, : d_model // 2] = torch.sin(angle)
    pe[:, d_model // 2 :] = torch.cos(angle)
    return pe


@wrong("sinusoidal_encoding.exponent_i")
def exponent_i(max_len, d_model):
    angle = _angles(max_len, d_model, exponent=lambda two_i, d: (two_i / 2) / d)
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.exponent_i")
def exponent_i_loops(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


@wrong("sinusoidal_encoding.cos_exponent_2i_plus_1")
def odd_exponent(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


@wrong("sinusoidal_encoding.frequencies_inverted")
def frequencies_inverted(max_len, d_model):
    angle = _angles(max_len, d_model, exponent=lambda two_i, d: -two_i / d)
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.low_precision")
def float16_positions(max_len, d_model):  # a real wrong solution's
    position = torch.arange(max_len, dtype=torch.float16)[:, None]
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float16)
                         * (-math.log(10000.0) / d_model))
    angle = (position * div_term).float()
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


@wrong("sinusoidal_encoding.low_precision")
def bfloat16_table(max_len, d_model):
    pos = torch.arange(max_len).to(torch.bfloat16).unsqueeze(1)
    angle = pos / 10000 ** (torch.arange(0, d_model, 2).to(torch.bfloat16) / d_model)
    pe = torch.empty(max_len, d_model, dtype=torch.bfloat16)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe.float()


@wrong("sinusoidal_encoding.half_dim_minus_1")
def fairseq_spacing(max_len, d_model):  # a real wrong solution's (interleaved)
    half_dim = d_model // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(max_len, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    return torch.stack([torch.sin(emb), torch.cos(emb)], dim=-1).view(max_len, -1)


@wrong("sinusoidal_encoding.half_dim_minus_1")
def tensor2tensor_timing_signal(max_len, d_model):  # sines, then cosines
    increment = math.log(10000.0) / (d_model // 2 - 1)
    inv_timescales = torch.exp(torch.arange(d_model // 2).float() * -increment)
    scaled_time = torch.arange(max_len).float()[:, None] * inv_timescales[None, :]
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)


@wrong("sinusoidal_encoding.positions_from_1")
def positions_from_1(max_len, d_model):
    angle = _angles(max_len, d_model, start=1)
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.positions_from_1")
def positions_from_1_loops(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(1, max_len + 1):
        for i in range(0, d_model, 2):
            pe[pos - 1, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos - 1, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return pe


def _right(max_len, d_model):
    angle = _angles(max_len, d_model)
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.wrong_dtype")
def float64_table(max_len, d_model):
    return _right(max_len, d_model).double()


@wrong("sinusoidal_encoding.wrong_type")
def numpy_table(max_len, d_model):
    return _right(max_len, d_model).numpy()


@wrong("sinusoidal_encoding.wrong_shape")
def transposed(max_len, d_model):
    return _right(max_len, d_model).T


@wrong("sinusoidal_encoding.reference_used")
def calls_the_reference(max_len, d_model):
    return sinusoidal_encoding(max_len, d_model) + 0.0


@wrong("sinusoidal_encoding.no_match")
def base_1000(max_len, d_model):
    return _interleave(*(f(_angles(max_len, d_model) * 10) for f in (torch.sin, torch.cos)))


@wrong("sinusoidal_encoding.part_zeroed")
def position_0_left_at_zero(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(1, max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return pe


@wrong("sinusoidal_encoding.part_zeroed")
def last_pair_left_at_zero(max_len, d_model):
    pe = _right(max_len, d_model)
    pe[:, -2:] = 0
    return pe




# ---------------------------------------------------------------------------------------
# PositionalEncoding.forward


@wrong("PositionalEncoding.multiplied")
class Multiplied(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(x * self.pe[start : start + x.size(1)])


@wrong("PositionalEncoding.multiplied")
class MultipliedWithUnsqueeze(PositionalEncoding):
    def forward(self, x, start=0):
        pe = self.pe[start : start + x.size(1)].unsqueeze(0)  # (1, seq, d_model)
        return torch.mul(x, pe)


@wrong("PositionalEncoding.start_ignored")
class StartIgnored(PositionalEncoding):
    def forward(self, x, start=0):
        return x + self.pe[: x.size(1)]


@wrong("PositionalEncoding.in_place")
class AddedInPlace(PositionalEncoding):
    def forward(self, x, start=0):
        x += self.pe[start : start + x.size(1)]
        return x


@wrong("PositionalEncoding.batch_axis_dropped")
class BatchSqueezed(PositionalEncoding):
    def forward(self, x, start=0):
        return (x + self.pe[start : start + x.size(1)]).squeeze(0)  # batch 1 loses its axis


@wrong("PositionalEncoding.whole_table")
class WholeTableAdded(PositionalEncoding):
    def forward(self, x, start=0):
        return x + self.pe


@wrong("PositionalEncoding.raised")
class TableNotRegistered(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        torch.nn.Module.__init__(self)

    def forward(self, x, start=0):
        return x + self.table[start : start + x.size(1)]



# ---------------------------------------------------------------------------------------
# embed_and_encode


@wrong("embed_and_encode.not_scaled")
def not_scaled(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens))


@wrong("embed_and_encode.not_scaled")
def not_scaled_by_hand(tokens, embedding, positional_encoding):
    return embedding.weight[tokens] + positional_encoding.pe[: tokens.size(1)]


@wrong("embed_and_encode.scaled_with_encoding")
def scaled_after_adding(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens)) * math.sqrt(embedding.embedding_dim)


@wrong("embed_and_encode.encoding_scaled")
def encoding_scaled(tokens, embedding, positional_encoding):
    pe = positional_encoding.pe[: tokens.size(1)]
    return embedding(tokens) + pe * embedding.embedding_dim**0.5


@wrong("embed_and_encode.scaled_by_d_model")
def scaled_by_d_model(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens) * embedding.weight.size(1))


@wrong("embed_and_encode.divided")
def divided(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens) / math.sqrt(embedding.embedding_dim))


@wrong("embed_and_encode.multiplied")
def multiplied(tokens, embedding, positional_encoding):
    e = embedding(tokens) * math.sqrt(embedding.embedding_dim)
    return e * positional_encoding.pe[: tokens.size(1)]


@wrong("embed_and_encode.precedence_half")
def scaled_by_d_model_to_the_one_half(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens) * embedding.embedding_dim ** 1 / 2)


@wrong("embed_and_encode.wrong_size")
def scaled_by_sqrt_seq(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens) * math.sqrt(tokens.size(-1)))


@wrong("embed_and_encode.nothing_returned")
def forgot_return(tokens, embedding, positional_encoding):
    positional_encoding(embedding(tokens) * math.sqrt(embedding.embedding_dim))



# ---------------------------------------------------------------------------------------
# Mistakes found by thinking like a learner


@wrong("sinusoidal_encoding.exponent_not_divided")
def exponent_not_divided(max_len, d_model):
    angle = _angles(max_len, d_model, exponent=lambda two_i, d: two_i)
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.integer_division")
def integer_division(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2)
    angle = position / 10000 ** (two_i // d_model)
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.integer_division")
def floor_divided_log_rate_in_a_loop(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            rate = math.exp(-i * math.log(10000.0) // d_model)  # // where / was meant
            pe[pos, i] = math.sin(pos * rate)
            pe[pos, i + 1] = math.cos(pos * rate)
    return pe


@wrong("sinusoidal_encoding.integer_division")
def floor_divided_log_inverted(max_len, d_model):
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    inv_rate = torch.exp(two_i * (math.log(10000.0) // d_model))
    angle = torch.arange(max_len, dtype=torch.float32)[:, None] / inv_rate
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.wrong_base")
def base_typo(max_len, d_model):
    angle = torch.arange(max_len)[:, None] / 1000 ** (torch.arange(0, d_model, 2) / d_model)
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.one_function")
def sines_only(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(0, d_model, 2):
            angle = pos / 10000 ** (j / d_model)
            pe[pos, j] = pe[pos, j + 1] = math.sin(angle)
    return pe


@wrong("PositionalEncoding.dropout_missing")
class NoDropout(PositionalEncoding):
    def forward(self, x, start=0):
        return x + self.pe[start : start + x.size(1)]


@wrong("PositionalEncoding.dropout_misplaced")
class DropoutOnTheInput(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(x) + self.pe[start : start + x.size(1)]


@wrong("PositionalEncoding.dropout_in_eval")
class FunctionalDropout(PositionalEncoding):
    def forward(self, x, start=0):
        return torch.nn.functional.dropout(x + self.pe[start : start + x.size(1)], self.dropout.p)


@wrong("PositionalEncoding.start_off_by_one")
class StartPlusOne(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(x + self.pe[start + 1 : start + 1 + x.size(1)])


@wrong("PositionalEncoding.scaled_here")
class ScaledHere(PositionalEncoding):
    def forward(self, x, start=0):
        x = x * math.sqrt(x.size(-1))
        return self.dropout(x + self.pe[start : start + x.size(1)])


@wrong("embed_and_encode.encoding_twice")
def encoding_twice(tokens, embedding, positional_encoding):
    e = embedding(tokens) * math.sqrt(embedding.embedding_dim)
    return positional_encoding(e) + positional_encoding.pe[: tokens.size(1)]


@wrong("sinusoidal_encoding.positions_not_integers")
def linspace_positions(max_len, d_model):
    angle = torch.linspace(0, max_len, max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    return _interleave(angle.sin(), angle.cos())


@wrong("sinusoidal_encoding.exponent_parentheses")
def exponent_parentheses(max_len, d_model):
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] / (10000**2 * two_i / d_model)
    return _interleave(angle.sin().float(), angle.cos().float())


@wrong("PositionalEncoding.slice_end")
class SliceEndIgnoresStart(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(x + self.pe[start : x.size(1)])


@wrong("PositionalEncoding.wrong_axis_sliced")
class ColumnsSliced(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(x + self.pe[:, start : start + x.size(1)])


@wrong("PositionalEncoding.sliced_as_batched")
class SlicedLikeTheAnnotatedTransformer(PositionalEncoding):  # its pe is (1, max_len, d_model)
    def forward(self, x, start=0):
        return self.dropout(x + self.pe[:, : x.size(1)].transpose(0, 1)[: x.size(1)])


@wrong("PositionalEncoding.no_gradient")
class UnderNoGrad(PositionalEncoding):
    def forward(self, x, start=0):
        with torch.no_grad():
            out = x + self.pe[start : start + x.size(1)]
        return self.dropout(out)


@wrong("PositionalEncoding.input_left_out")
class EncodingOnly(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(self.pe[start : start + x.size(1)].expand_as(x))


@wrong("PositionalEncoding.seq_first")
class SeqFirstUnsqueeze(PositionalEncoding):
    def forward(self, x, start=0):  # the PyTorch tutorial's (seq, batch, d_model) habit
        return self.dropout(x + self.pe[start : start + x.size(1)].unsqueeze(1))


@wrong("PositionalEncoding.seq_first_broadcast")
class SeqFirstBroadcast(PositionalEncoding):
    def forward(self, x, start=0):
        seq_len = x.size(0)  # (seq, batch, d_model), as in the PyTorch tutorial
        return self.dropout(x + self.pe[start : start + seq_len].unsqueeze(1))


@wrong("PositionalEncoding.seq_first")
class SlicedByTheBatchSize(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(x + self.pe[start : start + x.size(0)])


@wrong("sinusoidal_encoding.exponent_doubled")
def book_loop_doubled_exponent(max_len, d_model):
    """i already steps by 2 (it is the paper's 2i), and the formula's 2 * i doubles it."""
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (2 * i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (2 * i / d_model))
    return pe


@wrong("sinusoidal_encoding.blog_loop")
def blog_loop_per_feature(max_len, d_model):
    """The blog post's loop: 2 * i with i = 0, 2, 4, ..., and 2 * (i + 1) for the cosine."""
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d_model)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * (i + 1)) / d_model)))
    return pe


@wrong("sinusoidal_encoding.blog_loop")
def blog_loop_vectorized(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    pe = torch.empty(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos / torch.pow(10000.0, 2 * even / d_model))
    pe[:, 1::2] = torch.cos(pos / torch.pow(10000.0, 2 * odd / d_model))
    return pe


@wrong("PositionalEncoding.one_row")
class OneRowForEveryPosition(PositionalEncoding):
    """pe[start], the encoding of one position, added to every position."""

    def forward(self, x, start=0):
        return self.dropout(x + self.pe[start])


@wrong("PositionalEncoding.one_row")
class LastRowIndexed(PositionalEncoding):
    def forward(self, x, start=0):
        return self.dropout(x + self.pe[start + x.size(1) - 1])


@wrong("PositionalEncoding.added_twice")
class EncodingAddedTwice(PositionalEncoding):
    def forward(self, x, start=0):
        pe = self.pe[start : start + x.size(1)]
        x = x + pe
        return self.dropout(x + pe)


@wrong("sinusoidal_encoding.off_by_one")
def table_positions_0_to_max_len(max_len, d_model):
    position = torch.arange(0, max_len + 1).unsqueeze(1).float()  # 0 ... max_len inclusive
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len + 1, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@wrong("sinusoidal_encoding.wrong_dtype")
def table_in_float64(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    angles = position / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # float64 throughout


@wrong("embed_and_encode.table_added_by_hand")
def encoding_table_added(tokens, embedding, positional_encoding):
    x = embedding(tokens) * math.sqrt(embedding.embedding_dim)
    return x + positional_encoding.pe[: tokens.size(1)]  # the module's dropout never runs


@wrong("embed_and_encode.no_position_at_zero")
def no_position_at_padding(tokens, embedding, positional_encoding):
    """fairseq's positional embeddings: padding (id 0 here) gets none."""
    x = embedding(tokens) * math.sqrt(embedding.embedding_dim)
    return torch.where((tokens == 0).unsqueeze(-1), x, positional_encoding(x))


@wrong("sinusoidal_encoding.linear_frequencies")
def table_with_linear_frequency_bands(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    freq = 1.0 - torch.arange(0, d_model, 2, dtype=torch.float32) / d_model  # linear, not geometric
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * freq)
    pe[:, 1::2] = torch.cos(position * freq)
    return pe


@wrong("sinusoidal_encoding.linear_frequencies")
def table_with_a_linspace_of_frequencies(max_len, d_model):
    position = torch.arange(max_len).float().unsqueeze(1)
    freq = torch.linspace(1.0, 1e-4, d_model // 2)
    angle = position * freq
    return torch.cat([angle.sin(), angle.cos()], dim=-1)
