"""Exercise 03: positional encoding (sinusoidal_encoding, PositionalEncoding.forward,
embed_and_encode), their cases and their catalogue of mistakes."""

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..positional import PositionalEncoding, sinusoidal_encoding
from .comparison import close, describe
from .mistakes import Mistake, laddered, member
from .pipeline import Case, Item, gradient_case

EXERCISE = "ex03_positional_encoding"

# ---------------------------------------------------------------------------------------
# sinusoidal_encoding(max_len, d_model)


def _table(max_len, d_model, sin_first=True, interleave=True, first=0, exponent=None,
           base=10000.0, pair=None, positions=None):
    """The sinusoidal table with the variations that mistakes make."""
    if positions is None:
        position = torch.arange(first, first + max_len, dtype=torch.float64)[:, None]
    else:
        position = positions(max_len)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i = 0, 2, 4, ...
    power = two_i / d_model if exponent is None else exponent(two_i, d_model)
    angle = position * base ** -power
    if pair is None:
        pair = (angle.sin(), angle.cos()) if sin_first else (angle.cos(), angle.sin())
    else:
        pair = pair(angle)
    pe = torch.stack(pair, -1).flatten(1) if interleave else torch.cat(pair, -1)
    return pe.to(torch.get_default_dtype())


_LN_BASE = math.log(10000.0)
# ln(rate) of pair i as `//` computes it in the log form exp(2i * -ln(10000) / d_model).
_FLOORED_LOG_RATES = (
    lambda two_i, d: two_i * (-_LN_BASE // d),
    lambda two_i, d: two_i * -(_LN_BASE // d),
    lambda two_i, d: (two_i * -_LN_BASE) // d,
    lambda two_i, d: -((two_i * _LN_BASE) // d),
)


def _angle_table(max_len, d_model, angle_of):
    """The table with angles computed by `angle_of(pos, two_i)` (a formula's parentheses)."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = angle_of(position, torch.arange(0, d_model, 2, dtype=torch.float64))
    return torch.stack((angle.sin(), angle.cos()), -1).flatten(1).to(torch.get_default_dtype())


def _cos_with_2i_plus_1(max_len, d_model):
    pe = _table(max_len, d_model)
    pe[:, 1::2] = _table(max_len, d_model, exponent=lambda two_i, d: (two_i + 1) / d)[:, 1::2]
    return pe


def _low_precision(dtype, how, sines_too):
    """The table with its positions and angles in `dtype` (float16, bfloat16), as code that
    builds them there computes it: how = "exp" (rates e^(2i * -ln(10000) / d_model)) or
    "pow" (pos / 10000^(2i / d_model)); the sines taken in float32, or `sines_too` in
    `dtype` as well. The result says it is one (`low_precision`): it is told from the
    reference by closer tolerances than the other mistakes (see _roughly)."""

    def table(max_len, d_model):
        position = torch.arange(max_len, dtype=dtype)[:, None]
        two_i = torch.arange(0, d_model, 2, dtype=dtype)
        if how == "pow":
            angle = position / 10000.0 ** (two_i / d_model)
        else:
            angle = position * torch.exp(two_i * (-math.log(10000.0) / d_model))
        if not sines_too:
            angle = angle.float()
        pe = torch.stack((angle.sin(), angle.cos()), -1).flatten(1).to(torch.get_default_dtype())
        pe.low_precision = True
        return pe

    return table


def _blog_loop(max_len, d_model):
    """A well-known blog post's loop, `for i in range(0, d_model, 2)`: the sine of feature i
    with exponent 2 * i / d_model (2i counted twice), the cosine of feature i + 1 with
    2 * (i + 1) / d_model (a frequency of its own)."""
    pe = _table(max_len, d_model, exponent=lambda two_i, d: 2 * two_i / d)
    pe[:, 1::2] = _table(max_len, d_model, exponent=lambda two_i, d: 2 * (two_i + 1) / d)[:, 1::2]
    return pe


TABLE_MISTAKES = (
    Mistake(
        "sin_cos_swapped", "sin and cos swapped",
        "even features 2i take the sine, odd features 2i+1 the cosine (so position 0 is "
        "[0, 1, 0, 1, ...]).",
        (lambda n, d: _table(n, d, sin_first=False),),
    ),
    Mistake(
        "halves_concatenated", "Halves concatenated instead of interleaved",
        "your table has all the sines first, then all the cosines. The paper pairs them: "
        "feature 2i is a sine and feature 2i+1 the cosine of the same angle.",
        (lambda n, d: _table(n, d, interleave=False), lambda n, d: _table(n, d, False, False)),
    ),
    Mistake(
        "exponent_i", "Exponent uses i instead of 2i",
        "the wavelength of pair i is 10000^(2i / d_model): with i alone the frequencies only "
        "fall to 10000^(-1/2) instead of spanning the whole range.",
        (lambda n, d: _table(n, d, exponent=lambda two_i, d: two_i / 2 / d),),
    ),
    Mistake(
        "exponent_doubled", "Exponent uses 2 * 2i (2i counted twice)",
        "a loop `for i in range(0, d_model, 2)` already steps i through 0, 2, 4, ...: that i "
        "IS the paper's 2i, so 10000^(2 * i / d_model) doubles it: the exponents run up to "
        "almost 2 instead of almost 1, and the slow wavelengths are far too long.",
        (lambda n, d: _table(n, d, exponent=lambda two_i, d: 2 * two_i / d),),
    ),
    Mistake(
        "blog_loop", "Exponents 2 * 2i for the sines and 2 * (2i+1) for the cosines (feature j "
        "given its own exponent 2j / d_model)",
        "the loop of a well-known blog post: `for i in range(0, d_model, 2)` steps i through "
        "0, 2, 4, ..., so that i already IS the paper's 2i, and 2 * i counts it twice "
        "(exponents up to almost 2, not 1); and the cosine at feature i + 1 takes a frequency "
        "of its own from i + 1. Features 2i and 2i+1 are the sine and the cosine of ONE "
        "angle, pos / 10000^(2i / d_model).",
        (_blog_loop,),
    ),
    Mistake(
        "cos_exponent_2i_plus_1", "Cosine features use exponent 2i+1",
        "features 2i and 2i+1 share one frequency, 1 / 10000^(2i / d_model): a sin/cos pair "
        "of the same angle.",
        (_cos_with_2i_plus_1,),
    ),
    Mistake(
        "frequencies_inverted", "Frequencies inverted",
        "the angle is pos / 10000^(2i / d_model): divide by the power (or multiply by its "
        "inverse), so wavelengths grow from 2 pi to 10000 * 2 pi.",
        (lambda n, d: _table(n, d, exponent=lambda two_i, d: -two_i / d),),
    ),
    Mistake(
        "exponent_parentheses", "Parentheses of the exponent wrong",
        "the angle is pos / 10000^(2i / d_model): the whole fraction 2i / d_model is the "
        "exponent, 10000 ** (two_i / d_model).",
        (lambda n, d: _angle_table(n, d, lambda pos, two_i: pos / (10000.0**2 * two_i / d)),
         lambda n, d: _angle_table(n, d, lambda pos, two_i: pos / 10000.0**2 * two_i / d),
         lambda n, d: _angle_table(n, d, lambda pos, two_i: pos / 10000.0**two_i / d)),
    ),
    Mistake(
        "exponent_not_divided", "Exponent not divided by d_model",
        "the exponent is 2i / d_model, between 0 and 1: 10000^(2i / d_model). Without the "
        "division every pair but the first has an angle of about 0.",
        (lambda n, d: _table(n, d, exponent=lambda two_i, d: two_i),
         lambda n, d: _table(n, d, exponent=lambda two_i, d: two_i / 2)),
    ),
    Mistake(
        "integer_division", "Exponent computed with integer division",
        "`//` rounds down to a whole number: 2i // d_model is 0 for every pair (every pair "
        "gets the angle pos), and -log(10000) // d_model is -1 (rates e^(-2i)). Divide with / "
        "wherever the exponent is computed (and keep the values floats).",
        (lambda n, d: _table(n, d, exponent=lambda two_i, d: two_i * 0),
         *(lambda n, d, log_rate=log_rate: _table(
             n, d, exponent=lambda two_i, d: -log_rate(two_i, d) / _LN_BASE)
           for log_rate in _FLOORED_LOG_RATES)),
    ),
    Mistake(
        "wrong_base", "Frequencies not based on 10000",
        "the paper's wavelengths form a geometric progression from 2 pi to 10000 * 2 pi: the "
        "base of the power is 10000.",
        tuple((lambda n, d, b=b: _table(n, d, base=b))
              for b in (1000.0, 100000.0, 100.0, math.e, math.exp(4), 10.0)),
    ),
    Mistake(
        "one_function", "Only sines (or only cosines)",
        "feature 2i is sin(angle) and feature 2i+1 cos(angle): the pair of both is what lets "
        "attention shift positions by a rotation.",
        (lambda n, d: _table(n, d, pair=lambda a: (a.sin(), a.sin())),
         lambda n, d: _table(n, d, pair=lambda a: (a.cos(), a.cos()))),
    ),
    Mistake(
        "positions_not_integers", "Positions not 0, 1, ..., max_len - 1",
        "row pos of the table is position pos: torch.arange(max_len) gives 0, 1, ..., "
        "max_len - 1 (torch.linspace spreads max_len points over a range instead).",
        (lambda n, d: _table(n, d, positions=lambda n: torch.linspace(0, n, n, dtype=torch.float64)),
         lambda n, d: _table(n, d, positions=lambda n: torch.linspace(0, 1, n, dtype=torch.float64))),
    ),
    Mistake(
        "positions_from_1", "Positions start at 1",
        "the first position is pos = 0 (row 0 is [0, 1, 0, 1, ...]); use torch.arange(max_len).",
        (lambda n, d: _table(n, d, first=1),),
    ),
    Mistake(
        "low_precision", "Positions and angles computed in {dtype}",
        "{dtype} keeps only about {digits} significant decimal digits: an angle near 50 is "
        "then off by up to {error}, and its sine and cosine with it. Build the positions and "
        "angles in the default float32 (torch.arange(max_len) with no dtype, or "
        "dtype=torch.float), or in float64.",
        tuple(member(_low_precision(dtype, how, sines_too),
                     dtype=str(dtype).removeprefix("torch."), digits=digits, error=error)
              for dtype, digits, error in ((torch.float16, 3, "0.03"), (torch.bfloat16, 2, "0.25"))
              for how in ("exp", "pow") for sines_too in (False, True)),
    ),
    Mistake(
        "half_dim_minus_1", "Frequencies spaced by log(10000) / (d_model/2 - 1) (tensor2tensor's "
        "and fairseq's convention)",
        "this course follows the paper: pair i's exponent is 2i / d_model, so the frequencies "
        "fall from 1 towards 1/10000 without reaching it. Spacing the log-frequencies by "
        "log(10000) / (d_model/2 - 1) makes the last pair reach 1/10000 exactly: another "
        "table, whose every pair but the first has another wavelength.",
        tuple((lambda n, d, interleave=interleave: _table(
            n, d, interleave=interleave, exponent=lambda two_i, d: two_i / (d - 2)))
              for interleave in (True, False)),
    ),
    Mistake(
        "linear_frequencies", "Frequencies spaced linearly ({spacing}), not geometrically",
        "the paper's frequencies form a geometric progression: 1 / 10000^(2i / d_model), each "
        "pair's a constant factor below the last, so the wavelengths span 2 pi to 10000 * 2 pi. "
        "Spaced linearly (Perceiver's frequency bands, a linspace) almost every pair turns fast: "
        "nothing tells far positions apart.",
        tuple(member(lambda n, d, rate=rate, interleave=interleave: _table(
            n, d, interleave=interleave, exponent=lambda two_i, d: -torch.log(rate(two_i, d)) / _LN_BASE),
            spacing=spacing)
            for rate, spacing in (
                (lambda two_i, d: 1 - two_i / d, "1 - 2i / d_model"),
                (lambda two_i, d: torch.linspace(1, 1e-4, len(two_i), dtype=two_i.dtype),
                 "a linspace from 1 to 1/10000"))
            for interleave in (True, False)),
    ),    Mistake(
        "part_zeroed", "{which} left at zero: {how}",
        "every entry of the table is a sine or a cosine: row pos = 0 is [0, 1, 0, 1, ...] "
        "(cos(0) = 1), and every pair 0 .. d_model/2 - 1 and every position 0 .. max_len - 1 has "
        "its values; a loop that starts at 1 or stops one short, or an entry set to 0, leaves "
        "the zeros of torch.zeros(max_len, d_model) there.",
        tuple(member(lambda n, d, rows=rows, cols=cols: _zeroed(_table(n, d), rows, cols),
                     which=which, how=how)
              for rows, cols, which, how in (
                  (slice(0, 1), slice(None), "Position 0's row",
                   "pe[0] = 0, or a loop from pos = 1 (cos(0) = 1 lost)"),
                  (slice(-1, None), slice(None), "The last position's row",
                   "a loop over range(max_len - 1)"),
                  (slice(None), slice(0, 2), "Pair 0 (features 0 and 1)", "a loop from i = 1"),
                  (slice(None), slice(-2, None), "The last pair (features d_model - 2 and "
                   "d_model - 1)", "a loop over range(0, d_model - 2, 2) or range(d_model // 2 - 1)"),
                  (slice(None), slice(0, 1), "Feature 0 (the first sine)", "pe[:, 0] = 0"),
                  (slice(None), slice(1, 2), "Feature 1 (the first cosine)", "pe[:, 1] = 0"),
                  (slice(None), slice(-1, None), "The last feature", "pe[:, -1] = 0, or a loop "
                   "over range(d_model - 1)"))),
    ),
)


def _zeroed(pe, rows, cols):
    pe[rows, cols] = 0
    return pe


def _roughly(actual, predicted):
    """Equal up to float32 rounding of large angles (inverted frequencies reach pos * 10^4,
    where sin in float32 is off by ~0.01); the mistakes differ from each other by ~1."""
    if getattr(actual, "low_precision", False) or getattr(predicted, "low_precision", False):
        # a table of low precision is off by ~0.01 everywhere: told by 1e-3
        return close(actual, predicted) or (
            isinstance(actual, torch.Tensor) and actual.shape == predicted.shape
            and torch.allclose(actual.double(), predicted.double(), atol=1e-3, rtol=0))
    return close(actual, predicted) or (
        isinstance(actual, torch.Tensor) and actual.shape == predicted.shape
        and torch.allclose(actual.double(), predicted.double(), atol=0.05))


# The second hint (check(..., hint=2)) and the section that teaches the step, by mistake.
_NB = "03_positional_encoding"
_WAVES = (_NB, "Wavelengths")
_MODULE = (_NB, "7. The module: adding the encoding to the embeddings")
_LADDER = {
    "sin_cos_swapped": (None, "print your row 0: position 0 has angle 0 everywhere, and "
                        "sin(0), cos(0) is 0, 1."),
    "halves_concatenated": (None, "print your row 1 for d_model = 4: it should read sin, cos of "
                            "one angle, then sin, cos of the next."),
    "exponent_i": (_WAVES, "print your frequencies for d_model = 8: the last should be "
                   "10000^(-6/8), about 0.001."),
    "exponent_doubled": (_WAVES, "print the values your exponent takes for d_model = 8: they "
                         "must be 0, 2/8, 4/8, 6/8, never above 1."),
    "blog_loop": (_WAVES, "for d_model = 8 print the exponent your code uses for each feature: "
                  "features 2i and 2i+1 share one, and the four pairs' are 0, 2/8, 4/8, 6/8."),
    "cos_exponent_2i_plus_1": (None, "print the frequency of feature 2 and of feature 3: a "
                               "sin/cos pair shares one."),
    "frequencies_inverted": (_WAVES, "print your angles at pos = 1: they must fall from 1 "
                             "towards 0.0001 across the pairs, not grow."),
    "exponent_parentheses": (None, "print 10000 ** 2 / 8 and 10000 ** (2 / 8) in Python: ** "
                             "binds before /."),
    "exponent_not_divided": (_WAVES, "print your exponents: every one must lie between 0 and "
                             "1."),
    "integer_division": (None, "print torch.arange(0, 8, 2) // 8 and torch.arange(0, 8, 2) / "
                         "8."),
    "wrong_base": (_WAVES, "print your slowest frequency for d_model = 2: it is 1 / 10000^0 = 1 "
                   "for the first pair; for a large d_model the last nears 1 / 10000."),
    "one_function": (None, "print row 1 of your table: even and odd features must differ."),
    "positions_not_integers": (None, "print your positions: 0, 1, 2, ... one step apart."),
    "low_precision": (None, "print the dtype of your positions and of your angles: "
                      "float32 (or float64), and torch.arange(50, dtype=torch.{dtype}) * "
                      "0.1 next to torch.arange(50) * 0.1."),
    "linear_frequencies": (_WAVES, "for d_model = 8 print your frequency of each pair: 1, "
                           "0.1, 0.01, 0.001, each a tenth of the last."),
    "half_dim_minus_1": (_WAVES, "for d_model = 8 print your exponent of each pair, "
                         "-log(rate) / log(10000): the paper's are 0, 2/8, 4/8, 6/8."),
    "positions_from_1": (None, "print your row 0: it should be [0, 1, 0, 1, ...]."),
    "part_zeroed": (None, "print your row 0 and your last row, and your first and last two "
                    "columns: none is all zeros."),
    "multiplied": (_MODULE, "print x + pe and x * pe for a row of x that is all zeros: which "
                   "one keeps the position?"),
    "seq_first_broadcast": (_MODULE, "print x.shape and the shape of the rows of pe you take: "
                            "x.size(1), not x.size(0), is the number of positions."),
    "input_left_out": (_MODULE, "your output does not depend on x: print it for two different "
                       "x."),
    "start_ignored": (_MODULE, "call your module with start=3 and compare its first row with "
                      "pe[3]."),
    "slice_end": (_MODULE, "with start=7 and 4 positions print the rows you take: 7, 8, 9 and "
                  "10, four of them."),
    "wrong_axis_sliced": (_MODULE, "print self.pe.shape and the shape of what you slice: the "
                          "positions are the rows."),
    "one_row": (_MODULE, "print the shape of what you add to x: (seq, d_model), one row per "
                "position, not (d_model,)."),
    "added_twice": (_MODULE, "count the lines where pe is added to x: once."),
    "whole_table": (_MODULE, "print the shape of what you add: seq rows, not max_len."),
    "start_off_by_one": (_MODULE, "with start=0 your first row must be pe[0], exactly."),
    "scaled_here": (_MODULE, "this module gets x already scaled: print x + pe and your output "
                    "for one position and compare."),
    "dropout_missing": (_MODULE, "in training mode with dropout=0.5 about half your outputs "
                        "should be 0: count them."),
    "dropout_misplaced": (_MODULE, "write the output as one expression: where does "
                          "self.dropout wrap it?"),
    "sliced_as_batched": (_MODULE, "print self.pe.shape and the shape of the rows you take: "
                          "(seq, d_model) from the first axis."),
    "dropout_in_eval": (_MODULE, "call module.eval() and run it twice on the same x: the "
                        "outputs must be equal."),
    "no_gradient": (_MODULE, "print out.requires_grad for an x with requires_grad=True: it "
                    "must be True."),
    "not_scaled": (None, "print embedding(tokens).std() and the encoding's std: which must be "
                   "made larger, and by how much?"),
    "scaled_with_encoding": (None, "write your result as a formula: is the encoding inside "
                             "the product?"),
    "encoding_scaled": (None, "which of the two terms does your sqrt(d_model) multiply?"),
    "scaled_by_d_model": (None, "print your factor for d_model = 16: it should be 4."),
    "divided": (None, "print your factor for d_model = 16: 4, not 0.25."),
    "precedence_half": (None, "print 16 ** 1/2 in Python."),
    "wrong_size": (None, "print the number you take the square root of, next to "
                   "embedding.embedding_dim."),
    "encoding_twice": (None, "positional_encoding(x) returns x + PE: print it next to your "
                       "result."),
    "table_added_by_hand": (None, "with positional_encoding.train() and dropout=0.5, run "
                            "twice: the results must differ."),
    "no_position_at_zero": (None, "print your result minus sqrt(d_model) * embedding(tokens) "
                            "where tokens == 0: it should be that position's row of PE."),
}


TABLE = Item(
    EXERCISE, "sinusoidal_encoding", sinusoidal_encoding,
    [Case((n, d), label=f"max_len={n}, d_model={d}", seed=0)
     for n, d in [(50, 16), (7, 6), (20, 10), (1, 4)]],
    laddered(TABLE_MISTAKES, _LADDER), match=_roughly, what="table",
    formula="Compare PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same).",
    twins=(_table,),
    section=("03_positional_encoding", "3. Build it, one step at a time"),
    shifts=((0, "max_len", "length"),),
    axes=("position", "d_model"),
)


# ---------------------------------------------------------------------------------------
# PositionalEncoding.forward(x, start=0) (the stub gives __init__)

MAX_LEN = 12


def _construct(cls, case):
    """cls(d_model, max_len, dropout) holding the reference table, so that an unfinished
    sinusoidal_encoding does not block this item (the table has its own check)."""
    init = getattr(cls.__init__, "__globals__", {})
    saved = init.get("sinusoidal_encoding")
    if saved is not None:
        init["sinusoidal_encoding"] = sinusoidal_encoding
    try:
        module = cls(*case.init)
    finally:
        if saved is not None:
            init["sinusoidal_encoding"] = saved
    if isinstance(getattr(module, "pe", None), torch.Tensor):
        module.pe = sinusoidal_encoding(*case.init[1::-1])
    return module


def _rows(pe, x, start):
    return pe[start : start + x.size(1)]


def _pe(how):
    """A computation of the module's output from x, PE[start : start + seq] and the module."""
    return lambda module, x, start=0: how(x, _rows(module.pe, x, start), module)


def _dropout(module, t, always=False):
    return F.dropout(t, module.dropout.p, training=True) if always else module.dropout(t)


MULTIPLIED = Mistake(
    "multiplied", "Encoding multiplied instead of added",
    "the positional encoding is added to the input, x + PE, so the content survives "
    "whatever the position.",
    (_pe(lambda x, pe, m: m.dropout(x * pe)),
     _pe(lambda x, pe, m: m.dropout(x * math.sqrt(x.size(-1)) * pe))),
)
POSITIONAL_MISTAKES = (
    MULTIPLIED,
    Mistake(
        "seq_first_broadcast", "Batch and sequence axes mixed up",
        "x is (batch, seq, d_model), batch first: its positions are x.size(1), and PE[start : "
        "start + seq] (seq, d_model) broadcasts over the batch as it is. Slicing by x.size(0) and "
        "unsqueezing axis 1 is the seq-first (seq, batch, d_model) layout of PyTorch's tutorials: "
        "here it adds position b's encoding to every position of sentence b.",
        (lambda m, x, start=0: m.dropout(x + m.pe[start : start + x.size(0)].unsqueeze(1)),),
    ),
    Mistake(
        "input_left_out", "Input left out",
        "the output is x + PE: the encoding is added to the input, not returned instead of it.",
        (_pe(lambda x, pe, m: m.dropout(pe.expand_as(x))), _pe(lambda x, pe, m: m.dropout(pe))),
    ),
    Mistake(
        "start_ignored", "`start` ignored",
        "with start=s the rows of x are positions s, s+1, ...: add PE[start : start + seq], "
        "not PE[:seq] (decoding one token at a time needs this).",
        (lambda m, x, start=0: m.dropout(x + m.pe[: x.size(1)]),),
    ),
    Mistake(
        "slice_end", "Slice end ignores `start`",
        "the rows of x are positions start, ..., start + seq - 1: PE[start : start + seq]. "
        "PE[start : seq] is too short (or empty) when start > 0.",
        (lambda m, x, start=0: m.dropout(x + m.pe[start : x.size(1)]),),
    ),
    Mistake(
        "wrong_axis_sliced", "Table sliced on the wrong axis",
        "self.pe is (max_len, d_model): its rows are the positions, so slice the first axis, "
        "self.pe[start : start + seq].",
        (lambda m, x, start=0: m.dropout(x + m.pe[:, start : start + x.size(1)]),),
    ),
    Mistake(
        "one_row", "One row of the table added to every position",
        "an index, self.pe[k], is one position's encoding: added to x it gives every position "
        "the same encoding, so the positions are still indistinguishable. A slice keeps one row "
        "per position: the rows start, start + 1, ..., start + seq - 1.",
        tuple((lambda m, x, start=0, row=row: m.dropout(x + m.pe[row(start, x.size(1))]))
              for row in (lambda s, n: s, lambda s, n: s + n - 1, lambda s, n: s + n,
                          lambda s, n: n - 1, lambda s, n: n)),
    ),
    Mistake(
        "added_twice", "Encoding added twice",
        "x + PE adds the encoding once; your output holds x + 2 PE (an encoding added in two "
        "places, e.g. here and in the caller, or a `+ pe` on two lines).",
        (_pe(lambda x, pe, m: m.dropout(x + 2 * pe)),),
    ),
    Mistake(
        "whole_table", "Whole table added",
        "self.pe holds max_len positions; x has seq of them: add only its rows, "
        "PE[start : start + seq] (broadcast over the batch).",
        (lambda m, x, start=0: m.dropout(x + m.pe),),
    ),
    Mistake(
        "start_off_by_one", "Positions off by one",
        "the rows of x are positions start, start + 1, ..., start + seq - 1: "
        "PE[start : start + seq].",
        (lambda m, x, start=0: m.dropout(x + m.pe[start + 1 : start + 1 + x.size(1)]),
         lambda m, x, start=0: m.dropout(x + m.pe[max(start - 1, 0) : max(start - 1, 0) + x.size(1)])),
    ),
    Mistake(
        "scaled_here", "Input scaled by sqrt(d_model) in the positional encoding",
        "this module only adds PE; the embeddings are scaled by sqrt(d_model) before it "
        "(embed_and_encode below, and Embeddings in chapter 05).",
        (_pe(lambda x, pe, m: m.dropout(x * math.sqrt(x.size(-1)) + pe)),),
    ),
    Mistake(
        "dropout_missing", "Dropout not applied",
        "in training the sum goes through self.dropout: dropout(x + PE) (the paper's section "
        "5.4 applies dropout to the sums of the embeddings and the positional encodings).",
        (_pe(lambda x, pe, m: x + pe),),
    ),
    Mistake(
        "dropout_misplaced", "Dropout in the wrong place",
        "dropout goes on the sum, dropout(x + PE): not on x alone, nor on the encoding alone.",
        (_pe(lambda x, pe, m: m.dropout(x) + pe),
         _pe(lambda x, pe, m: x + m.dropout(pe.expand_as(x))),
         _pe(lambda x, pe, m: x + m.dropout(pe)),
         _pe(lambda x, pe, m: m.dropout(m.dropout(x) + pe))),
    ),
    Mistake(
        "dropout_in_eval", "Dropout applied in eval mode",
        "F.dropout(x, p) drops in every mode (its `training` is True by default): use the module "
        "self.dropout, which drops only in training mode (model.train()), not in eval mode.",
        (_pe(lambda x, pe, m: _dropout(m, x + pe, always=True)),),
    ),
    Mistake(
        "sliced_as_batched", "Table sliced as if it had a batch axis: {how}",
        "self.pe here is (max_len, d_model), no batch axis: its FIRST axis is the positions, so "
        "self.pe[start : start + seq]. The Annotated Transformer stores pe as (1, max_len, "
        "d_model) (pe.unsqueeze(0)), where pe[:, :x.size(1)] slices the positions; on this "
        "buffer the same slice cuts the features instead, and a transpose does not bring the "
        "positions back.",
        tuple(member(lambda m, x, start=0, rows=rows: m.dropout(x + rows(m.pe, start, x.size(1))),
                     how=how)
              for rows, how in (
                  (lambda pe, s, n: pe[:, s:s + n].transpose(0, 1)[:n],
                   "pe[:, start : start + seq] transposed: (seq, max_len) rows of features"),
                  (lambda pe, s, n: pe[:, :n].transpose(0, 1)[:n],
                   "pe[:, :seq] transposed: (seq, max_len) rows of features"),
                  (lambda pe, s, n: pe[:, :n], "pe[:, :seq] cuts the features"))),
    ),
)


def _positional_case(seed, batch, seq, d_model, start, dropout=0.0, train=False,
                     dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq, d_model, generator=g, dtype=dtype)
    label = describe(x=x, start=start) + f", d_model={d_model}, max_len={MAX_LEN}"
    label += f", x in {str(dtype).removeprefix('torch.')}" if dtype != torch.float32 else ""
    if dropout:
        label += f", dropout={dropout} in {'training' if train else 'eval'} mode"
    return Case((x, start), names=("x", None), label=label, init=(d_model, MAX_LEN, dropout),
                train=train, seed=seed)


POSITIONAL = Item(
    EXERCISE, "PositionalEncoding", PositionalEncoding,
    [
        _positional_case(0, 2, 5, 8, 0),
        _positional_case(1, 3, 4, 6, 7),  # start > 0: positions 7..10
        _positional_case(2, 1, 12, 8, 0),  # the whole table
        _positional_case(3, 2, 4, 8, 3, dropout=0.5, train=True),
        _positional_case(4, 2, 4, 8, 2, dropout=0.5),
        gradient_case(_positional_case(5, 2, 3, 8, 1), "x"),
        _positional_case(6, 2, 4, 8, 1, dtype=torch.float64),  # a float64 x, the float32 table
    ],
    laddered(POSITIONAL_MISTAKES, _LADDER), build=_construct,
    formula="The output is dropout(x + PE[start : start + seq]).",
    twins=(_pe(lambda x, pe, m: m.dropout(x + pe)),),
    section=("03_positional_encoding", "7. The module: adding the encoding to the embeddings"),
    shifts=((1, "start", "position"),),
)


# ---------------------------------------------------------------------------------------
# embed_and_encode(tokens, embedding, positional_encoding)


def embed_and_encode(tokens, embedding, positional_encoding):
    """The reference: sqrt(d_model) * E[tokens] + PE, as tfcourse.encoder.Embeddings followed
    by tfcourse.positional.PositionalEncoding compute it in the model."""
    return positional_encoding(embedding(tokens) * math.sqrt(embedding.embedding_dim))


def _embedded(how, dropped=True):
    """A mistake's computation from (tokens, embedding, positional_encoding), given `how`
    it combines the embeddings e, the encoding pe and s = sqrt(d_model) (and the tokens t);
    `dropped`: the module's dropout applied to the result, as its forward does."""

    def compute(tokens, embedding, positional_encoding):
        e = embedding(tokens)  # (batch, seq, d_model)
        pe = positional_encoding.pe[: tokens.size(1)]  # (seq, d_model), broadcast over the batch
        out = how(e, pe, math.sqrt(embedding.embedding_dim), tokens, embedding, positional_encoding)
        return positional_encoding.dropout(out) if dropped else out

    return (compute,)


SCALE_MISTAKES = (
    Mistake(
        "not_scaled", "Embeddings not scaled by sqrt(d_model)",
        "the paper multiplies the token embeddings by sqrt(d_model) before the positional "
        "encoding is added (section 3.4).",
        _embedded(lambda e, pe, s, t, emb, penc: e + pe),
    ),
    Mistake(
        "scaled_with_encoding", "Encoding scaled along with the embeddings",
        "scale the embeddings, then add the positional encoding: sqrt(d_model) * E[tokens] + PE, "
        "not sqrt(d_model) * (E[tokens] + PE).",
        _embedded(lambda e, pe, s, t, emb, penc: s * (e + pe)),
    ),
    Mistake(
        "encoding_scaled", "Encoding scaled instead of the embeddings",
        "it is the embeddings that are multiplied by sqrt(d_model), not the positional encoding.",
        _embedded(lambda e, pe, s, t, emb, penc: e + s * pe),
    ),
    Mistake(
        "scaled_by_d_model", "Scaled by d_model instead of sqrt(d_model)",
        "multiply by the square root of d_model: math.sqrt(d_model).",
        _embedded(lambda e, pe, s, t, emb, penc: s * s * e + pe),
    ),
    Mistake(
        "divided", "Embeddings divided by sqrt(d_model)",
        "multiply the embeddings by sqrt(d_model); dividing makes them smaller than the encoding.",
        _embedded(lambda e, pe, s, t, emb, penc: e / s + pe),
    ),
    Mistake(
        "precedence_half", "Scaled by d_model / 2, not sqrt(d_model)",
        "in Python d_model ** 1/2 is (d_model ** 1) / 2: ** binds tighter than /. Write "
        "d_model ** 0.5 or math.sqrt(d_model).",
        _embedded(lambda e, pe, s, t, emb, penc: s * s / 2 * e + pe),
    ),
    Mistake(
        "wrong_size", "Scaled by the square root of the wrong size",
        "d_model is the width of each embedding vector (embedding.embedding_dim), not the "
        "sequence length, the batch size, the vocabulary size or max_len.",
        tuple(_embedded(lambda e, pe, s, t, emb, penc, size=size: math.sqrt(size(t, emb, penc)) * e + pe)[0]
              for size in (lambda t, emb, penc: t.size(-1), lambda t, emb, penc: t.size(0),
                           lambda t, emb, penc: emb.num_embeddings,
                           lambda t, emb, penc: penc.pe.size(0))),
    ),
    Mistake(
        "encoding_twice", "Positional encoding added twice",
        "positional_encoding(x) already returns x + PE: add it once.",
        _embedded(lambda e, pe, s, t, emb, penc: s * e + 2 * pe),
    ),
    MULTIPLIED.computing(*_embedded(lambda e, pe, s, t, emb, penc: s * e * pe)),
    Mistake(
        "table_added_by_hand", "Positional encoding's table added by hand: its dropout skipped",
        "positional_encoding(x) adds PE[:seq] AND applies the module's dropout (in training "
        "mode): call the module rather than adding its .pe buffer yourself.",
        _embedded(lambda e, pe, s, t, emb, penc: s * e + pe, dropped=False),
    ),
    Mistake(
        "no_position_at_zero", "Tokens of id 0 left without {what}",
        "every position gets its positional encoding and every token its scaled embedding, "
        "id 0 too: this function knows of no padding id (fairseq's positional embeddings give "
        "padding the zero vector, nn.Embedding(padding_idx=0) a zero row); padding is the "
        "attention mask's job.",
        tuple(member(compute, what=what)
              for what, how in (
                  ("a positional encoding", lambda e, pe, s, t: s * e + pe * (t != 0)[..., None]),
                  ("an embedding", lambda e, pe, s, t: s * e * (t != 0)[..., None] + pe))
              for compute in _embedded(lambda e, pe, s, t, emb, penc, how=how: how(e, pe, s, t))),
    ),
)


def _embedding_case(seed, vocab, d_model, batch, seq, dropout=0.0):
    """dropout: the positional encoding's, in training mode."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab, (batch, seq), generator=g)
    embedding = nn.Embedding.from_pretrained(torch.randn(vocab, d_model, generator=g), freeze=False)
    encoding = PositionalEncoding(d_model, max_len=20, dropout=dropout)  # sqrt(20) is no d_model / 2
    label = describe(tokens=tokens) + f", d_model={d_model}"
    label += f", positional_encoding's dropout={dropout} in training mode" if dropout else ""
    return Case((tokens, embedding, encoding), names=("tokens", "embedding", "positional_encoding"),
                label=label, seed=seed)


EMBED = Item(
    EXERCISE, "embed_and_encode", embed_and_encode,
    [_embedding_case(0, 11, 8, 2, 5), _embedding_case(1, 7, 6, 3, 9),
     _embedding_case(2, 9, 8, 2, 6, dropout=0.5)],
    laddered(SCALE_MISTAKES, _LADDER),
    formula="Look up the embeddings, scale them, then apply positional_encoding.",
    twins=_embedded(lambda e, pe, s, t, emb, penc: s * e + pe),
    section=("03_positional_encoding", "Why the embeddings are multiplied by $\\sqrt{d_{model}}$"),
)

ITEMS = (TABLE, POSITIONAL, EMBED)
