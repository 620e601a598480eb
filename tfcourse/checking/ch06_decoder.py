"""Checks for exercise 06: the causal mask and the decoder layer, and their catalogue of mistakes."""

import copy
from itertools import product

import torch

from ..decoder import DecoderLayer as ReferenceLayer
from ..masks import causal_mask as reference_mask
from ..masks import padding_mask, target_mask
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

# ---------------------------------------------------------------------------------------
# causal_mask(size, device=None)


def _ones(size):
    return torch.ones(size, size, dtype=torch.bool)


NOT_BOOL = Mistake(
    "Causal mask is not boolean",
    "masks in this course are bool tensors, True = may attend (dtype=torch.bool, or .bool()). "
    "A 0/-inf float mask, as nn.Transformer.generate_square_subsequent_mask makes, is another "
    "convention.",
)
DEVICE_IGNORED = Mistake(
    "Causal mask not created on `device`",
    "pass device=device to the tensor you build the mask from, so that it sits beside the "
    "scores on a GPU.",
)
MASK_MISTAKES = (
    Mistake(
        "Causal mask off by one: a position cannot see itself",
        "query i may attend to every key j <= i, its own position included: keep the diagonal.",
        (lambda size, device=None: _ones(size).tril(-1),),
    ),
    Mistake(
        "Causal mask off by one: a position sees the next one",
        "query i may attend to keys j <= i only; the key at i + 1 is the very token it must "
        "predict.",
        (lambda size, device=None: _ones(size).tril(1),),
    ),
    Mistake(
        "Causal mask polarity inverted",
        "here True means 'may attend' (torch.nn.Transformer's masks use True = blocked): each "
        "position should see itself and the past, not only the future.",
        (lambda size, device=None: _ones(size).triu(1),),
    ),
    Mistake(
        "Causal mask transposed: positions see the future",
        "rows are queries, columns keys; query i may attend to keys j <= i: the lower triangle.",
        (lambda size, device=None: _ones(size).triu(),),
    ),
)
MASK_NAME = "causal_mask"


@checks(MASK_NAME)
def check_causal_mask(fn):
    """Compare `fn(size)` with the reference for a few sizes, then its `device` argument."""
    for size in (5, 1, 8):
        outcome = call(fn, size)
        fail_on_error(outcome, MASK_NAME, f"size={size}")
        mask, expected = outcome.value, reference_mask(size)
        problem = tensor_problem(mask, expected, "the mask")
        if problem and isinstance(mask, torch.Tensor) and mask.shape == expected.shape:
            NOT_BOOL.fail(f"  got dtype {mask.dtype} for size={size}")
        if problem:
            raise CheckFailure(f"Wrong mask: {problem} for size={size}")
        if torch.equal(mask, expected):
            continue
        mistake = first_match(MASK_MISTAKES, mask, size, same=_same_mask)
        if mistake is not None:
            mistake.fail(f"  for size={size} you returned\n{_draw(mask)}")
        raise CheckFailure(
            f"Wrong mask for size={size}, and no common mistake matches: you returned\n"
            f"{_draw(mask)}\n  expected query i to see keys j <= i:\n{_draw(expected)}"
        )
    reference_mask(1, device="meta")  # the first use of "meta" takes seconds: not the learner's
    outcome = call(fn, 4, device="meta")
    fail_on_error(outcome, MASK_NAME, "size=4, device='meta'")
    if not isinstance(outcome.value, torch.Tensor) or outcome.value.device.type != "meta":
        where = getattr(outcome.value, "device", type(outcome.value).__name__)
        DEVICE_IGNORED.fail(f"  causal_mask(4, device='meta') gave a tensor on {where}")


def _same_mask(actual, predicted):
    return actual.shape == predicted.shape and torch.equal(actual, predicted)


def _draw(mask):
    """The mask as rows of 1 and 0, indented, at most 8 x 8."""
    return "\n".join("    " + " ".join(str(int(v)) for v in row[:8]) for row in mask[:8])


# ---------------------------------------------------------------------------------------
# DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation).forward(x, memory,
# src_mask=None, tgt_mask=None)

LAYER_NAME = "DecoderLayer"
D_MODEL, HEADS, D_FF = 16, 4, 32


def _forward(layer, x, memory, self_mask, cross_mask, cross=("x", "memory", "memory"),
             cross_first=False):
    """The reference layer's computation with the variations that mistakes make."""
    pick = {"x": x, "memory": memory}

    def self_attention(y):
        return layer.self_attn(y, y, y, mask=self_mask)[0]

    def cross_attention(y):
        q, k, v = ({**pick, "x": y}[name] for name in cross)  # "x" is the current decoder state
        return layer.cross_attn(q, k, v, mask=cross_mask)[0]

    first, second = (cross_attention, self_attention) if cross_first else (self_attention,
                                                                            cross_attention)
    y = layer.sublayers[0](x, first)
    y = layer.sublayers[1](y, second)
    return layer.sublayers[2](y, layer.feed_forward)


def _variants(self_masks, cross_masks, crosses=(("x", "memory", "memory"),), **kw):
    """One computation for each choice of self mask, cross mask and cross-attention inputs.
    A mask is named: "src", "tgt" or None."""

    def compute(s, c, cross):
        def run(layer, x, memory, src_mask, tgt_mask):
            masks = {"src": src_mask, "tgt": tgt_mask, None: None}
            return _forward(layer, x, memory, masks[s], masks[c], cross, **kw)

        return run

    return tuple(compute(*v) for v in product(self_masks, cross_masks, crosses))


def _post_norm(layer, x, memory, src_mask, tgt_mask):
    layer = copy.deepcopy(layer)
    for sublayer in layer.sublayers:
        sublayer.norm_first = False
    return _forward(layer, x, memory, tgt_mask, src_mask)


ALL_MASKS = ("src", "tgt", None)
WRONG_CROSS = tuple(c for c in product(("x", "memory"), repeat=3) if c not in (
    ("x", "memory", "memory"), ("x", "x", "x")))

IN_PLACE = Mistake(
    "Input modified in place",
    "your forward changed the caller's {names}. Use out-of-place operations (x = x + y, "
    "not x += y).",
)
TUPLE = Mistake(
    "Attention's (output, weights) used as a tensor",
    "MultiHeadAttention returns a tuple (output, weights): keep only the output ([0]) inside "
    "the sublayer.",
)
LAYER_MISTAKES = (
    Mistake(
        "Queries and keys swapped in cross-attention",
        "in cross-attention the queries come from the decoder (x), the keys and values from the "
        "encoder output (memory): each target position asks which source positions to read.",
        _variants(("tgt",), ALL_MASKS, WRONG_CROSS),
    ),
    Mistake(
        "Encoder output not used: cross-attention attends to the decoder itself",
        "the second sublayer reads the source: its keys and values are `memory`.",
        _variants(("tgt",), ALL_MASKS, (("x", "x", "x"),)),
    ),
    Mistake(
        "Target mask used for cross-attention",
        "cross-attention takes src_mask, which hides the source's padding. The causal tgt_mask "
        "belongs to self-attention: every target position may read the whole source.",
        _variants(ALL_MASKS, ("tgt",)),
    ),
    Mistake(
        "Source padding mask forgotten in cross-attention",
        "pass src_mask to cross-attention, or the decoder reads the padding at the end of short "
        "sources.",
        _variants(("tgt",), (None,)),
    ),
    Mistake(
        "Target mask not used in self-attention",
        "masked self-attention takes tgt_mask (causal and padding); without it each position "
        "sees the tokens it is meant to predict.",
        _variants(("src", None), ("src", None)),
    ),
    Mistake(
        "Sublayers in the wrong order",
        "the paper's order: masked self-attention, then cross-attention, then feed-forward.",
        _variants(("tgt",), ("src",), cross_first=True),
    ),
    Mistake(
        "norm_first ignored",
        "with norm_first=True the LayerNorm comes before each sublayer; self.sublayers[i](x, f) "
        "places it for you.",
        (_post_norm,),
    ),
)


def _tokens(lengths, seq):
    """Token ids 1 at real positions, 0 (padding) after each length: (batch, seq)."""
    return (torch.arange(seq) < torch.tensor(lengths)[:, None]).long()


def _case(seed, tgt_lengths, src_lengths, tgt_len, src_len, norm_first=False, masks=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(tgt_lengths), tgt_len, D_MODEL, generator=g)
    memory = torch.randn(len(src_lengths), src_len, D_MODEL, generator=g)
    src_mask = padding_mask(_tokens(src_lengths, src_len), 0) if masks else None
    tgt_mask = target_mask(_tokens(tgt_lengths, tgt_len), 0) if masks else None
    return seed, norm_first, (x, memory, src_mask, tgt_mask)


# The first case has tgt_len == src_len, so that swapped inputs and swapped masks still run and
# each mistake computes something different from the reference. Other lengths follow.
LAYER_CASES = [
    _case(0, [5, 4, 2], [5, 3, 4], 5, 5),
    _case(1, [4, 3], [7, 2], 4, 7),
    _case(2, [6, 6], [3, 1], 6, 3, norm_first=True),
    _case(3, [3, 3], [4, 4], 3, 4, masks=False),
]


def _build(cls, seed, norm_first):
    torch.manual_seed(seed)
    return cls(D_MODEL, HEADS, D_FF, dropout=0.1, norm_first=norm_first).eval()


@checks(LAYER_NAME)
def check_decoder_layer(cls):
    """Build `cls` with the reference's weights and compare its forward on LAYER_CASES."""
    for seed, norm_first, args in LAYER_CASES:
        x, memory, src_mask, tgt_mask = args
        inputs = describe(x=x, memory=memory, src_mask=src_mask, tgt_mask=tgt_mask)
        inputs += ", norm_first=True" if norm_first else ""
        reference = _build(ReferenceLayer, seed, norm_first)
        outcome = call(_build, cls, seed, norm_first)
        fail_on_error(outcome, f"{LAYER_NAME}(...)", f"d_model={D_MODEL}, n_heads={HEADS}")
        layer = outcome.value
        try:
            layer.load_state_dict(reference.state_dict())
        except Exception as error:
            raise CheckFailure(
                f"{LAYER_NAME}'s parameters differ from the reference's: keep the given __init__."
                f"\n  {str(error).strip().splitlines()[0]}"
            ) from None
        given = [a if a is None else a.clone() for a in args]
        outcome = call(layer, given[0], given[1], src_mask=given[2], tgt_mask=given[3])
        if isinstance(outcome.error, TypeError) and "tuple" in str(outcome.error):
            TUPLE.fail(f"  on {inputs}\n  it raised: {str(outcome.error).splitlines()[0]}")
        fail_on_error(outcome, f"{LAYER_NAME}.forward", inputs)
        names = ("x", "memory", "src_mask", "tgt_mask")
        changed = [n for n, a, b in zip(names, given, args) if a is not None and not torch.equal(a, b)]
        if changed:
            raise CheckFailure(f"{IN_PLACE.title}: {IN_PLACE.hint.format(names=' and '.join(changed))}")
        with torch.no_grad():
            expected = reference(x, memory, src_mask=src_mask, tgt_mask=tgt_mask)
        result = outcome.value
        if isinstance(result, tuple) and len(result) == 2:
            TUPLE.fail(f"  forward returned a tuple on {inputs}; return the output tensor alone")
        problem = tensor_problem(result, expected, "the output")
        if problem:
            raise CheckFailure(f"Wrong output: {problem} on {inputs}")
        if close(result, expected):
            continue
        mistake = first_match(LAYER_MISTAKES, result, reference, *args, same=close)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        raise CheckFailure(
            f"Wrong output on {inputs}, and no common mistake matches: "
            f"{difference(result, expected)}. Compare each sublayer with the paper: masked "
            "self-attention, cross-attention to memory, feed-forward, each x = Sublayer(x)."
        )
