"""Checks for exercise 03: positional encoding, and its catalogue of mistakes."""

import math

import torch
from torch import nn

from ..positional import PositionalEncoding, sinusoidal_encoding
from .core import (
    CheckFailure,
    Mistake,
    call,
    checks,
    close,
    describe,
    difference,
    fail_on_error,
    first_match,
    tensor_problem,
)


def _table(max_len, d_model, sin_first=True, interleave=True, first=0, exponent=None):
    """The sinusoidal table with the variations that mistakes make."""
    position = torch.arange(first, first + max_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i = 0, 2, 4, ...
    angle = position * 10000.0 ** (-(two_i if exponent is None else exponent(two_i)) / d_model)
    pair = (angle.sin(), angle.cos()) if sin_first else (angle.cos(), angle.sin())
    pe = torch.stack(pair, -1).flatten(1) if interleave else torch.cat(pair, -1)
    return pe.to(torch.get_default_dtype())


def _cos_with_2i_plus_1(max_len, d_model):
    pe = _table(max_len, d_model)
    pe[:, 1::2] = _table(max_len, d_model, exponent=lambda two_i: two_i + 1)[:, 1::2]
    return pe


TABLE_MISTAKES = (
    Mistake(
        "sin and cos swapped",
        "even features 2i take the sine, odd features 2i+1 the cosine (so position 0 is "
        "[0, 1, 0, 1, ...]).",
        (lambda n, d: _table(n, d, sin_first=False),),
    ),
    Mistake(
        "Halves concatenated instead of interleaved",
        "your table has all the sines first, then all the cosines. The paper pairs them: "
        "feature 2i is a sine and feature 2i+1 the cosine of the same angle.",
        (lambda n, d: _table(n, d, interleave=False), lambda n, d: _table(n, d, False, False)),
    ),
    Mistake(
        "Exponent uses i instead of 2i",
        "the wavelength of pair i is 10000^(2i / d_model): with i alone the frequencies only "
        "fall to 10000^(-1/2) instead of spanning the whole range.",
        (lambda n, d: _table(n, d, exponent=lambda two_i: two_i / 2),),
    ),
    Mistake(
        "Cosine features use exponent 2i+1",
        "features 2i and 2i+1 share one frequency, 1 / 10000^(2i / d_model): a sin/cos pair "
        "of the same angle.",
        (_cos_with_2i_plus_1,),
    ),
    Mistake(
        "Frequencies inverted",
        "the angle is pos / 10000^(2i / d_model): divide by the power (or multiply by its "
        "inverse), so wavelengths grow from 2 pi to 10000 * 2 pi.",
        (lambda n, d: _table(n, d, exponent=lambda two_i: -two_i),),
    ),
    Mistake(
        "Positions start at 1",
        "the first position is pos = 0 (row 0 is [0, 1, 0, 1, ...]); use torch.arange(max_len).",
        (lambda n, d: _table(n, d, first=1),),
    ),
)

MULTIPLIED = Mistake(
    "Encoding multiplied instead of added",
    "the positional encoding is added to the input, x + PE, so the content survives "
    "whatever the position.",
    (
        lambda x, pe, start=0: x * pe[start : start + x.size(1)],
        lambda x, pe, start=0: x * math.sqrt(x.size(-1)) * pe[start : start + x.size(1)],
    ),
)
START_IGNORED = Mistake(
    "`start` ignored",
    "with start=s the rows of x are positions s, s+1, ...: add PE[start : start + seq], "
    "not PE[:seq] (decoding one token at a time needs this).",
    (lambda x, pe, start=0: x + pe[: x.size(1)],),
)
def _embedded(how):
    """A mistake's computation from (tokens, embedding, positional_encoding), given `how`
    it combines the embeddings e, the encoding pe and s = sqrt(d_model)."""

    def compute(tokens, embedding, positional_encoding):
        e = embedding(tokens)  # (batch, seq, d_model)
        pe = positional_encoding(torch.zeros_like(e))  # PE[:seq], broadcast over the batch
        return how(e, pe, math.sqrt(embedding.embedding_dim))

    return (compute,)


SCALE_MISTAKES = (
    Mistake(
        "Embeddings not scaled by sqrt(d_model)",
        "the paper multiplies the token embeddings by sqrt(d_model) before the positional "
        "encoding is added (section 3.4).",
        _embedded(lambda e, pe, s: e + pe),
    ),
    Mistake(
        "Encoding scaled along with the embeddings",
        "scale the embeddings, then add the positional encoding: sqrt(d_model) * E[tokens] + PE, "
        "not sqrt(d_model) * (E[tokens] + PE).",
        _embedded(lambda e, pe, s: s * (e + pe)),
    ),
    Mistake(
        "Encoding scaled instead of the embeddings",
        "it is the embeddings that are multiplied by sqrt(d_model), not the positional encoding.",
        _embedded(lambda e, pe, s: e + s * pe),
    ),
    Mistake(
        "Scaled by d_model instead of sqrt(d_model)",
        "multiply by the square root of d_model: math.sqrt(d_model).",
        _embedded(lambda e, pe, s: s * s * e + pe),
    ),
    Mistake(
        "Embeddings divided by sqrt(d_model)",
        "multiply the embeddings by sqrt(d_model); dividing makes them smaller than the encoding.",
        _embedded(lambda e, pe, s: e / s + pe),
    ),
    Mistake(MULTIPLIED.title, MULTIPLIED.hint, _embedded(lambda e, pe, s: s * e * pe)),
)


# ---------------------------------------------------------------------------------------
# sinusoidal_encoding

def _roughly(actual, predicted):
    """Equal up to float32 rounding of large angles (inverted frequencies reach pos * 10^4,
    where sin in float32 is off by ~0.01); the mistakes differ from each other by ~1."""
    return close(actual, predicted) or torch.allclose(actual.double(), predicted.double(), atol=0.05)


TABLE_CASES = [(50, 16), (7, 6), (20, 10), (1, 4)]


@checks("sinusoidal_encoding")
def check_sinusoidal_encoding(fn):
    name = "sinusoidal_encoding"
    for max_len, d_model in TABLE_CASES:
        inputs = f"max_len={max_len}, d_model={d_model}"
        outcome = call(fn, max_len, d_model)
        fail_on_error(outcome, name, inputs)
        expected = sinusoidal_encoding(max_len, d_model)
        problem = tensor_problem(outcome.value, expected, "the table")
        if problem:
            raise CheckFailure(f"Wrong table: {problem} on {inputs}")
        if close(outcome.value, expected):
            continue
        mistake = first_match(TABLE_MISTAKES, outcome.value, max_len, d_model, same=_roughly)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        raise CheckFailure(
            f"Wrong table on {inputs}, and no common mistake matches: "
            f"{difference(outcome.value, expected)}. "
            "Compare PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same)."
        )


# ---------------------------------------------------------------------------------------
# PositionalEncoding (the stub gives __init__; the learner writes forward)


def _positional_case(seed, batch, seq, d_model, start):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seq, d_model, generator=g), start


POSITIONAL_CASES = [
    _positional_case(0, 2, 5, 8, 0),
    _positional_case(1, 3, 4, 6, 7),  # start > 0: positions 7..10
    _positional_case(2, 1, 12, 8, 0),  # the whole table
]
MAX_LEN = 12


def _construct(cls, d_model):
    """The learner's PositionalEncoding with the reference table, so that an unfinished
    sinusoidal_encoding does not block this item (the table has its own check)."""
    namespace = cls.__init__.__globals__ if hasattr(cls.__init__, "__globals__") else {}
    saved = namespace.get("sinusoidal_encoding")
    if saved is not None:
        namespace["sinusoidal_encoding"] = sinusoidal_encoding
    try:
        module = cls(d_model, max_len=MAX_LEN)
    finally:
        if saved is not None:
            namespace["sinusoidal_encoding"] = saved
    module.eval()
    if isinstance(getattr(module, "pe", None), torch.Tensor):
        module.pe = sinusoidal_encoding(MAX_LEN, d_model)
    return module


@checks("PositionalEncoding")
def check_positional_encoding(cls):
    name = "PositionalEncoding"
    for x, start in POSITIONAL_CASES:
        d_model = x.size(-1)
        inputs = describe(x=x, start=start) + f", d_model={d_model}, max_len={MAX_LEN}"
        made = call(_construct, cls, d_model)
        fail_on_error(made, f"{name}.__init__", f"d_model={d_model}, max_len={MAX_LEN}")
        given = x.clone()
        outcome = call(made.value, given, start)
        fail_on_error(outcome, f"{name}.forward", inputs)
        if not torch.equal(given, x):
            raise CheckFailure(
                "Input modified in place: forward changed the caller's x; "
                "return x + ..., do not use x += ..."
            )
        table = sinusoidal_encoding(MAX_LEN, d_model)
        expected = PositionalEncoding(d_model, MAX_LEN).eval()(x, start)
        if close(outcome.value, expected):
            continue
        problem = tensor_problem(outcome.value, expected, "the output")
        if problem:
            raise CheckFailure(f"Wrong output: {problem} on {inputs}")
        mistake = first_match((MULTIPLIED, START_IGNORED), outcome.value, x, table, start, same=close)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        raise CheckFailure(
            f"Wrong output on {inputs}, and no common mistake matches: "
            f"{difference(outcome.value, expected)}. The output is x + PE[start : start + seq]."
        )


# ---------------------------------------------------------------------------------------
# embed_and_encode


def embed_and_encode(tokens, embedding, positional_encoding):
    """The reference: sqrt(d_model) * E[tokens] + PE, as tfcourse.encoder.Embeddings followed
    by tfcourse.positional.PositionalEncoding compute it in the model."""
    return positional_encoding(embedding(tokens) * math.sqrt(embedding.embedding_dim))


def _embedding_case(seed, vocab, d_model, batch, seq):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab, (batch, seq), generator=g)
    embedding = nn.Embedding.from_pretrained(torch.randn(vocab, d_model, generator=g), freeze=False)
    return tokens, embedding, PositionalEncoding(d_model, max_len=16)


EMBEDDING_CASES = [_embedding_case(0, 11, 8, 2, 5), _embedding_case(1, 7, 6, 3, 9)]


@checks("embed_and_encode")
def check_embed_and_encode(fn):
    name = "embed_and_encode"
    for tokens, embedding, positional_encoding in EMBEDDING_CASES:
        d_model = embedding.embedding_dim
        inputs = describe(tokens=tokens) + f", d_model={d_model}"
        given = tokens.clone()
        outcome = call(fn, given, embedding, positional_encoding)
        fail_on_error(outcome, name, inputs)
        if not torch.equal(given, tokens):
            raise CheckFailure("Input modified in place: embed_and_encode changed the tokens.")
        with torch.no_grad():
            expected = embed_and_encode(tokens, embedding, positional_encoding)
        if close(outcome.value, expected):
            continue
        problem = tensor_problem(outcome.value, expected, "the output")
        if problem:
            raise CheckFailure(f"Wrong output: {problem} on {inputs}")
        args = (tokens, embedding, positional_encoding)
        mistake = first_match(SCALE_MISTAKES, outcome.value, *args, same=close)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        raise CheckFailure(
            f"Wrong output on {inputs}, and no common mistake matches: "
            f"{difference(outcome.value, expected)}. "
            "Look up the embeddings, scale them, then apply positional_encoding."
        )
