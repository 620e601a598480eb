"""Exercise 06: the causal mask and the decoder layer, their cases and their catalogue of
mistakes.

The decoder layer's check copies the reference's weights, every parameter randomized (the
LayerNorms' gains and biases too: with their defaults the three sublayers' norms are the
same function, and a layer that reuses one of them would pass), into the learner's layer.
"""

import copy
from itertools import product

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..decoder import DecoderLayer
from ..masks import causal_mask, padding_mask, target_mask
from .comparison import describe
from .mistakes import Mistake, laddered, member
from .pipeline import Case, Item, fail_on_error
from .sandbox import call

EXERCISE = "ex06_decoder"

# ---------------------------------------------------------------------------------------
# causal_mask(size, device=None)


def _ones(size):
    return torch.ones(size, size, dtype=torch.bool)


MASK_MISTAKES = (
    Mistake(
        "sees_nothing_of_itself", "Causal mask off by one: a position cannot see itself",
        "query i may attend to every key j <= i, its own position included: keep the diagonal.",
        (lambda size, device=None: _ones(size).tril(-1),),
    ),
    Mistake(
        "sees_next", "Causal mask off by one: a position sees the next one",
        "query i may attend to keys j <= i only; the key at i + 1 is the very token it must "
        "predict.",
        (lambda size, device=None: _ones(size).tril(1),),
    ),
    Mistake(
        "polarity", "Causal mask polarity inverted",
        "here True means 'may attend' (torch.nn.Transformer's masks use True = blocked): each "
        "position should see itself and the past, not only the future.",
        (lambda size, device=None: _ones(size).triu(1),),
    ),
    Mistake(
        "transposed", "Causal mask transposed: positions see the future",
        "rows are queries, columns keys; query i may attend to keys j <= i: the lower triangle.",
        (lambda size, device=None: _ones(size).triu(),),
    ),
    Mistake(
        "not_bool", "Causal mask is not boolean",
        "masks in this course are bool tensors, True = may attend (dtype=torch.bool, or .bool()). "
        "A 0/-inf float mask, as nn.Transformer.generate_square_subsequent_mask makes, is another "
        "convention.",
        tuple((lambda size, device=None, dtype=dtype: _ones(size).tril().to(dtype))
              for dtype in (torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8))
        + (lambda size, device=None: nn.Transformer.generate_square_subsequent_mask(size),
           lambda size, device=None: (~_ones(size).tril()).float()),
    ),
)
DEVICE_IGNORED = Mistake(
    "device_ignored", "Causal mask not created on `device`",
    "pass device=device to the tensor you build the mask from, so that it sits beside the "
    "scores on a GPU.",
)


def _draw(mask):
    """The mask as rows of 1 and 0, indented, at most 8 x 8."""
    return "\n".join("    " + " ".join(str(int(v)) for v in row[:8]) for row in mask[:8])


class _Passed(TorchFunctionMode):
    """Notes whether `device` (this very object) is given to any torch function."""

    def __init__(self, device):
        super().__init__()
        self.device, self.seen = device, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.seen |= any(a is self.device for a in (*args, *kwargs.values()))
        return func(*args, **kwargs)


def _check_device(item, target):
    """causal_mask(4, device=d) must hand d on to the torch functions that make the mask.
    (The only other device of every machine, "meta", takes seconds to start.)"""
    device = torch.device("cpu")
    passed = _Passed(device)

    def run():
        with passed:
            return target(4, device=device)

    outcome = call(run)
    fail_on_error(outcome, "causal_mask", "size=4, device=torch.device('cpu')")
    if not passed.seen:
        DEVICE_IGNORED.fail("  causal_mask(4, device=d) made its mask without passing d to torch")


# The second hints (check(..., hint=2)), by mistake (sections: the item's, unless given).
_CROSS = ("06_decoder", "2. Cross-attention: queries from the decoder, keys and values from the encoder")
_LADDER = {
    "sees_nothing_of_itself": (None, "print causal_mask(3): its diagonal must be True."),
    "sees_next": (None, "print causal_mask(3): row 0 may see key 0 only."),
    "polarity": (None, "print causal_mask(3) next to the docstring's picture: True where a "
                 "query may look."),
    "transposed": (None, "print causal_mask(3): rows are queries; row 0 must have one True, "
                   "at column 0."),
    "not_bool": (None, "print causal_mask(3).dtype."),
    "device_ignored": (None, "print causal_mask(3, device='meta').device: it must be meta."),
    "tuple": (None, "print type(self.self_attn(x, x, x)): a tuple of two."),
    "cross_swapped": (_CROSS, "print the shapes you give self.cross_attn as query, key and "
                      "value on a case where the source and the target differ in length: the "
                      "output must have the target's length."),
    "cross_kv_mixed": (_CROSS, "print which tensor you give self.cross_attn as key and which "
                       "as value: the same one, and which is it?"),
    "sublayer_skipped": (None, "list which self.sublayers[i] your forward calls, with what: "
                         "0, 1 and 2, once each."),
    "no_residual": (None, "print your sublayer step's output minus its input with f returning "
                    "zeros: a residual lets x through."),
    "memory_unused": (_CROSS, "change memory and run again: the output must change."),
    "tgt_mask_in_cross": (_CROSS, "print the shape of the mask you give cross-attention: its "
                          "last axis must have the source's length."),
    "masks_combined": (None, "print which mask each attention gets: one each, tgt_mask and "
                       "src_mask."),
    "src_mask_transposed": (_CROSS, "print src_mask.shape: (batch, 1, 1, src_len) already "
                            "lines up with the scores' keys."),
    "no_src_mask": (_CROSS, "change a padding token of the source: the output must not move."),
    "no_tgt_mask": (("06_decoder", "5. No peeking: later target tokens cannot change earlier outputs"),
                    "change the last target token: the outputs at earlier positions must not "
                    "move."),
    "memory_normalized": (_CROSS, "print what cross-attention gets as keys: "
                          "memory itself, or a normalized copy?"),
    "attention_module_reused": (None, "list the attention modules your forward calls: "
                                "self_attn and cross_attn, once each."),
    "sublayer_reused": (None, "list which self.sublayers[i] your forward calls: 0, 1 and 2, "
                        "once each."),
    "order": (None, "list the three sublayers in the order your forward calls them."),
    "no_feed_forward": (None, "count the sublayers your forward calls: three."),
    "extra_residual": (None, "print self.sublayers[0](x, f) - x: the residual is in it "
                       "already."),
    "not_chained": (None, "which tensor does each sublayer get: the layer's input, or the "
                    "previous sublayer's output?"),
    "argument_ignored": (None, "print the argument your lambda receives in pre-norm, next to "
                         "x: the sublayer hands it the normalized x."),
    "norm_first_ignored": (None, "build the layer with norm_first=True: does your forward "
                           "still call each sublayer through self.sublayers?"),
    "by_hand": (None, "in training mode with dropout=0.5 run twice: the outputs should "
                "differ."),
}


MASK = Item(
    EXERCISE, "causal_mask", causal_mask,
    [Case((size,), label=f"size={size}", seed=0) for size in (5, 1, 8)],
    laddered(MASK_MISTAKES + (DEVICE_IGNORED,), _LADDER), what="mask", prep="for",
    show=lambda case, result, expected: f" you returned\n{_draw(result)}",
    formula="Query i may attend to keys j <= i: the lower triangle, diagonal included.",
    after=(_check_device,),
    section=("06_decoder", "5. No peeking: later target tokens cannot change earlier outputs"),
    shifts=((0, "size", "length"),),
)


# ---------------------------------------------------------------------------------------
# DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation).forward(x, memory,
# src_mask=None, tgt_mask=None)

D_MODEL, HEADS, D_FF = 16, 4, 32


def _forward(layer, x, memory, self_mask, cross_mask, cross=("x", "memory", "memory"),
             cross_first=False, modules=("self_attn", "cross_attn"), subs=(0, 1, 2),
             inputs=(0, 1, 2), outer=(), ffn=True, unpacked=True, memory_normed=False, extra=(),
             skip=(), bare=()):
    """The reference layer's computation with the variations that mistakes make.

    modules: the attention modules used for self- and cross-attention; subs: which of
    self.sublayers wraps each step; inputs[i]: the step whose input sublayer i takes (its
    own: chained; 0: the layer's input x); outer: the steps whose function ignores its
    argument and uses the sublayer's input instead (unnormalized in pre-norm); extra: the steps
    given a second residual around their sublayer (x + sublayer(x, f)); skip: the steps not
    run at all; bare: the steps run without their residual (the norm and dropout kept)."""
    self_attn, cross_attn = (getattr(layer, m) for m in modules)

    def pick(name, y):
        if name == "memory" and (memory_normed == "always"
                                 or memory_normed and layer.sublayers[1].norm_first):
            return layer.sublayers[1].norm(memory)
        return {"x": y, "memory": memory}[name]

    def self_attention(y):
        out = self_attn(y, y, y, mask=self_mask)
        return out[0] if unpacked else out

    def cross_attention(y):
        q, k, v = (pick(name, y) for name in cross)
        return cross_attn(q, k, v, mask=cross_mask)[0]

    steps = [self_attention, cross_attention, layer.feed_forward]
    if cross_first:
        steps[:2] = steps[1::-1]
    states = [x]
    for i, step in enumerate(steps if ffn else steps[:2]):
        given = states[i if inputs[i] == i else 0]
        if i in skip:
            states.append(given)
            continue
        function = (lambda y, f=step, g=given: f(g)) if i in outer else step
        sublayer = layer.sublayers[subs[i]]
        if i in bare:
            out = (sublayer.dropout(function(sublayer.norm(given))) if sublayer.norm_first
                   else sublayer.norm(sublayer.dropout(function(given))))
        else:
            out = sublayer(given, function)
        states.append(given + out if i in extra else out)
    return states[-1]


def _both(src_mask, tgt_mask):
    if src_mask is None or tgt_mask is None:
        return tgt_mask if src_mask is None else src_mask
    return tgt_mask & src_mask


def _variants(self_masks, cross_masks, crosses=(("x", "memory", "memory"),), **kw):
    """One computation for each choice of self mask, cross mask and cross-attention inputs.
    A mask is named: "src", "tgt", None, "both" (tgt_mask & src_mask) or "src_t" (src_mask
    on the query axis)."""

    def compute(s, c, cross):
        def run(layer, x, memory, src_mask, tgt_mask):
            masks = {"src": lambda: src_mask, "tgt": lambda: tgt_mask, None: lambda: None,
                     "causal": lambda: causal_mask(x.size(1)),
                     "both": lambda: _both(src_mask, tgt_mask),
                     "src_t": lambda: None if src_mask is None else src_mask.transpose(-2, -1)}
            return _forward(layer, x, memory, masks[s](), masks[c](), cross, **kw)

        return run

    return tuple(compute(*v) for v in product(self_masks, cross_masks, crosses))


def _with(**kw):
    return _variants(("tgt",), ("src",), **kw)


def _post_norm(layer, x, memory, src_mask, tgt_mask):
    layer = copy.deepcopy(layer)
    for sublayer in layer.sublayers:
        sublayer.norm_first = False
    return _forward(layer, x, memory, tgt_mask, src_mask)


def _by_hand(layer, x, memory, src_mask, tgt_mask):
    """The three sublayers written as x + f(x) and a norm, without the sublayers' dropout."""
    steps = (lambda y: layer.self_attn(y, y, y, tgt_mask)[0],
             lambda y: layer.cross_attn(y, memory, memory, src_mask)[0], layer.feed_forward)
    for sublayer, step in zip(layer.sublayers, steps):
        x = x + step(sublayer.norm(x)) if sublayer.norm_first else sublayer.norm(x + step(x))
    return x


def _raises_on_tuple(layer, x, memory, src_mask, tgt_mask):
    """The attention's tuple added to a tensor, as a residual written by hand does."""
    return x + layer.self_attn(x, x, x, tgt_mask)


ALL_MASKS = ("src", "tgt", None)
WRONG_CROSS = tuple(c for c in product(("x", "memory"), repeat=3) if c[0] == "memory")
KV_MIXED = (("x", "memory", "x"), ("x", "x", "memory"))

LAYER_MISTAKES = (
    Mistake(
        "tuple", "Attention's (output, weights) used as a tensor",
        "MultiHeadAttention returns a tuple (output, weights): keep only the output ([0]) inside "
        "the sublayer.",
        (*_with(unpacked=False), _raises_on_tuple),
    ),
    Mistake(
        "cross_swapped", "Queries and keys swapped in cross-attention",
        "in cross-attention the queries come from the decoder (x), the keys and values from the "
        "encoder output (memory): each target position asks which source positions to read.",
        _variants(("tgt",), ALL_MASKS, WRONG_CROSS),
    ),
    Mistake(
        "cross_kv_mixed", "Keys and values of cross-attention taken from different tensors",
        "in cross-attention the keys AND the values both come from the encoder output "
        "(memory), only the queries from the decoder (x): what a target position reads "
        "(values) must be the source positions it matched (keys).",
        _variants(("tgt",), ALL_MASKS, KV_MIXED),
    ),
    Mistake(
        "memory_unused", "Encoder output not used: cross-attention attends to the decoder itself",
        "the second sublayer reads the source: its keys and values are `memory`.",
        _variants(("tgt",), ALL_MASKS, (("x", "x", "x"),)),
    ),
    Mistake(
        "tgt_mask_in_cross", "Target mask used for cross-attention{swapped}",
        "cross-attention takes src_mask, which hides the source's padding. The causal tgt_mask "
        "belongs to self-attention: every target position may read the whole source.",
        tuple(member(c, swapped=" (the two masks swapped: src_mask given to self-attention)"
                     if s == "src" else "") for s in ALL_MASKS for c in _variants((s,), ("tgt",))),
    ),
    Mistake(
        "masks_combined", "Masks combined into one",
        "self-attention takes tgt_mask (causal and the target's padding), cross-attention "
        "src_mask (the source's padding): each attention its own mask, as they are.",
        _variants(("both",), ("both", "src")) + _variants(("tgt",), ("both",)),
    ),
    Mistake(
        "src_mask_transposed", "Source mask on the query axis",
        "src_mask (batch, 1, 1, src_len) marks which KEYS of memory are real: pass it to "
        "cross-attention as it is, not transposed.",
        _variants(("tgt",), ("src_t",)),
    ),
    Mistake(
        "no_src_mask", "Source padding mask forgotten in cross-attention",
        "pass src_mask to cross-attention, or the decoder reads the padding at the end of short "
        "sources.",
        _variants(("tgt",), (None,)),
    ),
    Mistake(
        "no_tgt_mask", "Target mask not used in self-attention",
        "masked self-attention takes tgt_mask (causal and padding); without it each position "
        "sees the tokens it is meant to predict (and a causal mask of your own misses the "
        "target's padding).",
        _variants(("src", None), ("src", None)) + _variants(("causal",), ("src", None)),
    ),
    Mistake(
        "memory_normalized", "Memory normalized in the decoder",
        "the sublayer's LayerNorm is the decoder's, for x only (before the sublayer in "
        "pre-norm, after the sum in post-norm): memory comes from the encoder as it is, already "
        "normalized there.",
        _with(memory_normed=True) + _with(memory_normed="always"),
    ),
    Mistake(
        "attention_module_reused", "One attention module used for both attentions",
        "self.self_attn and self.cross_attn have their own weights: self-attention over x with "
        "self.self_attn, cross-attention to memory with self.cross_attn.",
        _with(modules=("self_attn", "self_attn")) + _with(modules=("cross_attn", "cross_attn"))
        + _with(modules=("cross_attn", "self_attn")),
    ),
    Mistake(
        "sublayer_reused", "One sublayer (and its LayerNorm) used for several steps",
        "self.sublayers[0], [1] and [2] each have their own LayerNorm: wrap self-attention in "
        "sublayers[0], cross-attention in sublayers[1], the feed-forward network in sublayers[2].",
        tuple(v for subs in product(range(3), repeat=3) if len(set(subs)) < 3
              for v in _with(subs=subs)),
    ),
    Mistake(
        "order", "Sublayers in the wrong order",
        "the paper's order: masked self-attention, then cross-attention, then feed-forward.",
        _with(cross_first=True),
    ),
    Mistake(
        "no_residual", "Residual connection missing",
        "each sublayer's output is ADDED to its input: x + Dropout(f(...)), normalized after "
        "the sum in post-norm; self.sublayers[i](x, f) does it for you, around every sublayer.",
        tuple(v for bare in ((0,), (1,), (2,), (0, 1, 2)) for v in _with(bare=bare)),
    ),
    Mistake(
        "no_feed_forward", "Feed-forward sublayer missing",
        "after cross-attention comes a third sublayer: self.sublayers[2](x, self.feed_forward).",
        _with(ffn=False),
    ),
    Mistake(
        "extra_residual", "Residual added twice",
        "self.sublayers[i](x, f) already adds the residual (x + Dropout(f(...)), normalized in "
        "post-norm): x = self.sublayers[0](x, ...), not x = x + self.sublayers[0](x, ...).",
        tuple(v for extra in ((0, 1, 2), (0,), (1,), (2,)) for v in _with(extra=extra)),
    ),
    Mistake(
        "not_chained", "Sublayers not chained",
        "each sublayer takes the previous one's output: x = self.sublayers[i](x, ...) in turn, "
        "not every sublayer applied to the layer's input; a sublayer whose result is not "
        "passed on is as good as skipped.",
        tuple(v for inputs in ((0, 0, 0), (0, 0, 2), (0, 1, 0)) for v in _with(inputs=inputs)),
    ),
    Mistake(
        "sublayer_skipped", "A sublayer skipped",
        "a decoder layer runs three sublayers, one after the other: masked self-attention, "
        "cross-attention to memory (the only place the source enters), then the feed-forward "
        "network, each through its own self.sublayers[i].",
        _with(skip=(0,)) + _with(skip=(1,)),
    ),
    Mistake(
        "argument_ignored", "Sublayer function ignores its argument",
        "self.sublayers[i](x, f) calls f with the LayerNorm of x in pre-norm: write f as "
        "lambda y: ... and use y inside it, not the x outside.",
        tuple(v for outer in ((0,), (1,), (0, 1)) for v in _with(outer=outer)),
    ),
    Mistake(
        "norm_first_ignored", "norm_first ignored",
        "with norm_first=True the LayerNorm comes before each sublayer; self.sublayers[i](x, f) "
        "places it for you.",
        (_post_norm,),
    ),
    Mistake(
        "by_hand", "Sublayer dropout missing",
        "self.sublayers[i](x, f) applies the dropout (in training), the residual and the norm: "
        "use it rather than writing x + f(x) and the norm by hand.",
        (_by_hand,),
    ),
)


def _tokens(lengths, seq):
    """Token ids 1 at real positions, 0 (padding) after each length: (batch, seq)."""
    return (torch.arange(seq) < torch.tensor(lengths)[:, None]).long()


def _case(seed, tgt_lengths, src_lengths, tgt_len, src_len, norm_first=False, masks=True,
          train=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(tgt_lengths), tgt_len, D_MODEL, generator=g)
    memory = torch.randn(len(src_lengths), src_len, D_MODEL, generator=g)
    src_mask = padding_mask(_tokens(src_lengths, src_len), 0) if masks else None
    tgt_mask = target_mask(_tokens(tgt_lengths, tgt_len), 0) if masks else None
    label = describe(x=x, memory=memory, src_mask=src_mask, tgt_mask=tgt_mask)
    label += ", norm_first=True" if norm_first else ""
    label += ", in training mode (dropout=0.1)" if train else ""
    return Case((x, memory, src_mask, tgt_mask), names=("x", "memory", "src_mask", "tgt_mask"),
                label=label, init=(D_MODEL, HEADS, D_FF),
                init_kwargs={"dropout": 0.1, "norm_first": norm_first}, train=train, seed=seed)


def _run_layer(layer, args, case):
    x, memory, src_mask, tgt_mask = args
    return layer(x, memory, src_mask=src_mask, tgt_mask=tgt_mask)


# The first case has tgt_len == src_len, so that swapped inputs and swapped masks still run and
# each mistake computes something different from the reference. Other lengths follow.
LAYER = Item(
    EXERCISE, "DecoderLayer", DecoderLayer,
    [
        _case(0, [5, 4, 2], [5, 3, 4], 5, 5),
        _case(1, [4, 3], [7, 2], 4, 7),
        _case(2, [6, 6], [3, 1], 6, 3, norm_first=True),
        _case(3, [3, 3], [4, 4], 3, 4, masks=False),
        _case(4, [4, 2], [5, 3], 4, 5, train=True),
    ],
    laddered(LAYER_MISTAKES, _LADDER), run=_run_layer,
    formula="Compare each sublayer with the paper: masked self-attention, cross-attention to "
            "memory, feed-forward, each x = Sublayer(x).",
    twins=_with(),
    section=("06_decoder", "3. The decoder layer, step by step"),
)

ITEMS = (MASK, LAYER)
