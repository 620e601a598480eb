"""Exercise 12: the parts of Llama's block: RMSNorm, SwiGLU, rotary positions, and attention
with rotary positions and a cache; their cases and their catalogues of mistakes.

The class items (RMSNorm, SwiGLU) are given their __init__: the checks copy the reference's
parameters, randomized, into the learner's module and compare forward passes. rotate's
cases reach the regimes where its mistakes show: an offset (start, a cache's length), a base
of Llama 3's 500,000, and bfloat16 at positions in the thousands (an angle computed in
bfloat16 is off by radians there).

Why the cases are what they are: the properties of inputs that real Llama-style code gets
wrong (issue threads and pull requests of transformers, llama.cpp, mlx and mlx-lm, Meta's
llama, GPT-NeoX, course repositories), each reached by at least one case:
- RMSNorm: a mean far from 0 (centering shows), rms about eps, an eps of its own, 4-D and 1-D
  inputs, float64 beyond float32's range, float16 beyond its own, bfloat16.
- SwiGLU: each of the layer's activations (SiLU, GELU, ReLU: a hard-coded one, or another
  library's variant, shows), dropout in training and in eval mode (F.dropout left on shows),
  float64 (where GELU's variants show) and bfloat16.
- rotate: both pair conventions, each in half precision (float16 and bfloat16) at positions
  in the thousands; an offset; a base of 500,000; an earlier case's shape with another base,
  start or dtype (tables cached by shape alone); a 2-D x; float64; a gradient.
- rotary_attention: no cache; one and several new tokens after a cache, and more new tokens
  than cached ones (an offset added twice shows); bases other than the
  default with a cache (500 and 500,000); another d_head (a module cached by d_head); a
  gradient. Its attention is chapter 01's: chapter 01's attention mistakes (masked to zero,
  the mask after the softmax, the scale, ...) are tried here too, after the rotation and the
  cache done right.
The function items run their cases again in reverse order once all passed (`again`).
"""

import dataclasses
import math

import torch
import torch.nn.functional as F

from ..attention import scaled_dot_product_attention
from ..feed_forward import SwiGLU
from ..normalization import RMSNorm
from ..positional import RotaryEmbedding, apply_rotary, rotary_cos_sin
from . import ch01_attention as ch01
from .ch04_feed_forward_and_norm import _randn
from .comparison import close, describe, same
from .errors import BROADCAST
from .mistakes import Mistake, laddered, member
from .pipeline import Case, Item, gradient_case

EXERCISE = "ex12_modern_block"
_NB = "12_modern_block"


# ---------------------------------------------------------------------------------------
# RMSNorm


def _rms(module, x, center=False, eps="inside", power=0.5, gain=True, dim=-1, l2=False,
         spread=None, keepdim=True, compute=None, count=None, inner=1, cast=True, stat="square"):
    """RMSNorm with the variations that mistakes make (float32 at least, as the reference).
    spread: the variance (around the mean) instead of the mean square, with `spread` as its
    correction (0: x.var(correction=0), 1: x.var()), x itself left uncentered; gain "plus_one":
    Gemma's (1 + weight); keepdim False: the mean of squares loses its last axis (raises, as
    the learner's code does); compute: the dtype computed in (torch.float32: HF's upcast,
    whatever x's dtype; "input": x's own, no upcast); count: what the sum of squares is divided
    by instead of d_model (h -> number); inner: the statistic's own power before eps is
    added (0.5: already a root, the std or the rms, then rooted again); cast False: the result
    left in the dtype computed in, not cast back to x's; stat: the statistic squared instead
    of the mean of the squares ("abs": mean(|x|)^2, "mean": mean(x)^2; "abs_unsquared" and
    "mean_unsquared": mean(|x|) and mean(x) themselves, under the root)."""
    h = x.to({None: torch.promote_types(x.dtype, torch.float32), "input": x.dtype}.get(
        compute, compute))
    if center:
        h = h - h.mean(dim, keepdim=True)
    if spread is not None:
        square = h.var(dim, correction=spread, keepdim=True)
    else:
        square = (h * h).sum(dim, keepdim=keepdim) if l2 else (h * h).mean(dim, keepdim=keepdim)
        if count is not None:
            square = (h * h).sum(dim, keepdim=keepdim) / count(h)
        if stat != "square":
            square = {"abs": h.abs(), "mean": h}[stat.split("_")[0]].mean(dim, keepdim=keepdim) ** (
                1 if stat.endswith("unsquared") else 2)
    square = square ** inner
    e = module.eps
    if eps == "finfo":  # nn.RMSNorm(eps=None): the dtype's machine epsilon
        e, eps = torch.finfo(h.dtype).eps, "inside"
    if isinstance(eps, float):  # a number of the learner's own instead of self.eps
        e, eps = eps, "inside"
    if eps == "inside":
        root = (square + e) ** power
    else:
        root = square ** power + (e if eps == "outside" else 0)
    y = (h / root).to(x.dtype) if cast else h / root
    return {True: lambda: y * module.weight, False: lambda: y, "added": lambda: y + module.weight,
            "plus_one": lambda: y * (1 + module.weight)}[gain]()


def _rms_with(**bug):
    return lambda module, x: _rms(module, x, **bug)


RMS_MISTAKES = (
    Mistake(
        "builtin", "Built-in RMSNorm called",
        "you called torch.nn.RMSNorm or F.rms_norm; the exercise is to write x / sqrt(mean(x^2) "
        "+ eps) * weight yourself.",
        uses=("rms_norm",),
    ),
    Mistake(
        "mean_subtracted", "Mean subtracted: that is LayerNorm, not RMSNorm",
        "RMSNorm does not center: it divides x itself by its root mean square, sqrt(mean(x^2) + "
        "eps). Subtracting the mean (and dividing by the standard deviation) is LayerNorm.",
        (_rms_with(center=True), _rms_with(center=True, eps="outside")),
    ),
    Mistake(
        "std_not_rms", "Divided by the standard deviation, not the root mean square",
        "x.var() and x.std() subtract the mean inside; RMSNorm's mean(x^2) does not: divide x "
        "by sqrt(mean(x^2) + eps), the mean of the squares themselves.",
        tuple(_rms_with(spread=c, eps=e, inner=i) for c in (1, 0) for e in ("inside", "outside")
              for i in (1, 0.5)),  # inner 0.5: x.std(), then rooted again
    ),
    Mistake(
        "statistic_squared", "{which} squared, not the mean of the squares",
        "the root mean square squares each feature FIRST, then averages: sqrt(mean(x^2) + eps), "
        "x.pow(2).mean(-1, keepdim=True). {why}",
        tuple(member(_rms_with(stat=s, eps=e), which=w, why=y) for s, w, y in (
            ("abs", "The mean absolute value", "mean(|x|)^2 is smaller whenever the features "
             "differ in size (mean(|x|) <= rms), so the output comes out too large."),
            ("mean", "The mean", "mean(x)^2 lets positive and negative features cancel (it is 0 "
             "for a row of mean 0)."))
              for e in ("inside", "outside")),
    ),
    Mistake(
        "statistic_not_squared", "{which} under the square root, not the mean of the squares",
        "the root mean square squares each feature, then averages: sqrt(mean(x^2) + eps), "
        "x.pow(2).mean(-1, keepdim=True). {why}",
        tuple(member(_rms_with(stat=s, eps=e), which=w, why=y) for s, w, y in (
            ("abs_unsquared", "The mean absolute value, mean(|x|),", "sqrt(mean(|x|)) has the "
             "units of sqrt(x), not of x: the output is not scale-free (x times 4 comes out "
             "times 2)."),
            ("mean_unsquared", "The mean, mean(x),", "sqrt(mean(x)) lets positive and negative "
             "features cancel, and is NaN for a row of negative mean."))
              for e in ("inside", "outside")),
    ),
    Mistake(
        "eps_outside", "Epsilon outside the square root",
        "eps goes under the root, sqrt(mean(x^2) + eps), as in torch.nn.RMSNorm and Llama; not "
        "sqrt(mean(x^2)) + eps.",
        (_rms_with(eps="outside"),),
    ),
    Mistake(
        "no_eps", "Epsilon missing",
        "divide by sqrt(mean(x^2) + eps): eps (self.eps) keeps the division safe when a "
        "position's features are all (nearly) 0.",
        (_rms_with(eps="none"),),
    ),
    Mistake(
        "eps_ignored", "self.eps ignored",
        "use the module's own eps, self.eps (set by __init__), not a number of your own.",
        tuple(_rms_with(eps=e) for e in (1e-5, 1e-6, 1e-8, 1e-12, "finfo")),
    ),
    Mistake(
        "wrong_power", "Wrong power of (mean(x^2) + eps): {which}",
        "divide by the ROOT mean square, (mean(x^2) + eps) ** 0.5. {effect}",
        tuple(member(_rms_with(power=p), which=which, effect=effect) for p, which, effect in (
            (1, "no square root", "Dividing by the mean square leaves rows of root mean square "
             "1 / rms, not 1."),
            (-0.5, "the reciprocal square root, then divided by it", "(mean(x^2) + eps) ** -0.5 "
             "(torch.rsqrt) is 1 / rms already: multiply by it."))) + tuple(
            member(_rms_with(inner=0.5, eps=e), which="a second square root: sqrt(rms + eps), the "
                   "rms already rooted", effect="Take one root: of mean(x^2) + eps.")
            for e in ("inside", "outside")),
    ),
    Mistake(
        "l2_norm", "Divided by the L2 norm, not the root mean square",
        "sqrt(sum(x^2)) is sqrt(d_model) times the root mean square: take the MEAN of the "
        "squares over the features, so that a normalized row has root mean square 1 (F.normalize "
        "gives norm 1).",
        (_rms_with(l2=True), lambda m, x: F.normalize(x, dim=-1, eps=m.eps) * m.weight),
    ),
    Mistake(
        "wrong_axis", "Normalized over the wrong axis",
        "each position is normalized over its own d_model features: the mean of x^2 over the "
        "last axis (dim=-1, keepdim=True).",
        tuple(_rms_with(dim=d) for d in (0, 1, -2, (-2, -1)))
        + (lambda module, x: _rms(module, x, dim=tuple(range(x.dim()))),),  # the whole tensor
    ),
    Mistake(
        "unbiased_count", "Mean of squares divided by d_model - 1",
        "the root MEAN square divides the sum of the squares by d_model, the number of "
        "features: x.pow(2).mean(-1). d_model - 1 is the unbiased variance's count (around a "
        "mean that RMSNorm does not subtract).",
        (_rms_with(count=lambda h: h.size(-1) - 1),),
    ),
    Mistake(
        "wrong_count", "Sum of squares divided by {which}, not by d_model",
        "the root MEAN square averages each position's own d_model features: x.pow(2).mean(-1, "
        "keepdim=True), or the sum over the last axis divided by x.size(-1). {which_cap} counts "
        "something else, so every row comes out scaled by a constant.",
        tuple(member(_rms_with(count=c), which=w, which_cap=w[0].upper() + w[1:])
              for c, w in ((lambda h: h.size(0), "x.shape[0], the batch size"),
                           (lambda h: h.size(1), "x.shape[1], the sequence length"),
                           (lambda h: h.size(-2), "x.shape[-2], the sequence length"),
                           (lambda h: h.numel(), "x.numel(), the number of every entry"),
                           (lambda h: h.numel() // h.size(-1), "the number of positions"))),
    ),
    Mistake(
        "keepdim", "Mean of squares taken without keepdim=True",
        "x.pow(2).mean(-1) drops the last axis: (..., seq) does not line up with x (..., seq, "
        "d_model). Keep it: x.pow(2).mean(-1, keepdim=True) is (..., seq, 1).",
        (_rms_with(keepdim=False),),
    ),
    Mistake(
        "gain_plus_one", "Gain applied as (1 + weight): Gemma's convention",
        "here the gain is self.weight itself (it starts at 1): weight * x / rms. Gemma's "
        "RMSNorm stores weight - 1 and multiplies by (1 + weight); this module does not.",
        (_rms_with(gain="plus_one"),),
    ),
    Mistake(
        "no_upcast", "Computed in {dtype}: the squares overflow",
        "mean(x^2) in {dtype} overflows past 65504 (an x of 256 is enough), and x / inf is 0: "
        "compute the statistics in float32 at least, x.to(torch.promote_types(x.dtype, "
        "torch.float32)), as Llama's RMSNorm does, then return x's dtype.",
        (member(_rms_with(compute="input"), dtype="float16"),),
    ),
    Mistake(
        "float32_compute", "Computed in float32 whatever x's dtype",
        "upcasting to float32 (Hugging Face's LlamaRMSNorm does) protects float16 and "
        "bfloat16, but a float64 x then loses its precision, and its squares overflow past "
        "1e19: compute in float32 AT LEAST, torch.promote_types(x.dtype, torch.float32), and "
        "return x's dtype.",
        (_rms_with(compute=torch.float32),),
    ),
    Mistake(
        "not_cast_back", "Not cast back to x's dtype: computed in float32 and returned so",
        "compute in float32 at least, then cast the normalized x back to x's dtype BEFORE the "
        "gain, as Hugging Face's LlamaRMSNorm does: self.weight * h.to(x.dtype). A float16 model "
        "must get float16 out of its norms.",
        (_rms_with(cast=False),),
    ),
    Mistake(
        "no_gain", "Gain missing",
        "multiply the normalized x by the learned gain self.weight (it starts at 1, so the "
        "mistake shows only once it is trained).",
        (_rms_with(gain=False),),
    ),
    Mistake(
        "gain_added", "Gain added, not multiplied: x / rms + weight",
        "the gain scales each normalized feature: weight * x / sqrt(mean(x^2) + eps); added, "
        "it shifts the features instead (a bias's job).",
        (_rms_with(gain="added"),),
    ),
    Mistake(
        "gain_before_norm", "Gain applied before normalizing: the RMS of weight * x is taken",
        "normalize x first, then scale: weight * x / sqrt(mean(x^2) + eps). Multiplied in "
        "first, the gain is divided out again by the root mean square it enters (a gain of 2 "
        "everywhere would vanish).",
        (lambda module, x: _rms(module, module.weight * x, gain=False),),
    ),
)

_RMS_LADDER = {
    "gain_before_norm": (None, "set self.weight to 2 everywhere: your output must double."),
    "builtin": (None, "write the mean of the squares and the division yourself."),
    "mean_subtracted": (None, "normalize the row [1., 2., 3.] with weight 1: RMSNorm gives "
                        "[0.46, 0.93, 1.39] (its mean stays positive); print yours."),
    "not_cast_back": (None, "run your norm on a float16 x and print the output's dtype."),
    "std_not_rms": (None, "for the row [1., 2., 3.] print x.var(-1) and x.pow(2).mean(-1): "
                    "1.0 against 4.67; RMSNorm divides by the root of the second."),
    "statistic_squared": (None, "for the row [1., -2., 3.] print x.pow(2).mean(-1): 4.67, "
                          "and x.abs().mean(-1) ** 2: 4.0."),
    "eps_outside": (None, "write your denominator as a formula: is eps inside or outside the "
                    "square root?"),
    "no_eps": (None, "run your norm on a row of zeros: what does 0 / 0 give?"),
    "eps_ignored": (None, "build the module with eps=0.5 and print self.eps: is that the eps "
                    "your forward uses?"),
    "wrong_power": (None, "print the root mean square of one normalized row before the gain: "
                    "it must be about 1."),
    "l2_norm": (None, "print (y ** 2).mean(-1) of your normalized rows before the gain: 1, "
                "not 1 / d_model."),
    "wrong_axis": (None, "on a (batch, seq, d_model) x, print the shape of your mean of "
                   "squares: (batch, seq, 1)."),
    "no_gain": (None, "set self.weight to 2 and print one output row: does it double?"),
    "gain_added": (None, "set self.weight to 0: your output must be 0."),
    "keepdim": (None, "print x.pow(2).mean(-1).shape next to x.shape."),
    "unbiased_count": (None, "for the row [1., 2., 3.] print x.pow(2).mean(-1): 4.67."),
    "wrong_count": (None, "for x of shape (2, 5, 8), print the number you divide the sum of "
                    "squares by: 8."),
    "statistic_not_squared": (None, "multiply x by 4: your normalized rows must not change."),
    "gain_plus_one": (None, "with self.weight all ones, your output must have root mean "
                      "square 1, not 2."),
    "no_upcast": (None, "print (torch.tensor([300.0], dtype=torch.float16) ** 2)."),
    "float32_compute": (None, "print the dtype your mean of squares is computed in for a "
                        "float64 x."),
}


def _at_float32_precision(actual, expected):
    """same(), but a float64 result compared at float32's precision: a mistake computed in
    float32 (float32_compute) rounds otherwise than the learner's code."""
    if isinstance(expected, torch.Tensor) and expected.dtype == torch.float64:
        return (isinstance(actual, torch.Tensor) and actual.dtype == torch.float64
                and close(actual.float(), expected.float()))
    return same(actual, expected)


def _rms_case(seed, shape, scale, dtype=torch.float32, eps=None):
    g = torch.Generator().manual_seed(seed)
    x = (scale * _randn(g, *shape) + 0.5 * scale).to(dtype)  # a mean far from 0
    d_model = shape[-1]
    state = {"weight": (1 + _randn(g, d_model)).to(dtype)}
    label = describe(x=x) + f", {x.dtype}, d_model={d_model}" + (f", eps={eps}" if eps else "")
    return Case((x,), names=("x",), label=label, init=(d_model,) + ((eps,) if eps else ()),
                state=state, dtype=dtype, seed=seed)


RMS = Item(
    EXERCISE, "RMSNorm", RMSNorm,
    [
        _rms_case(0, (2, 5, 8), 2.0),
        _rms_case(1, (3, 4, 6), 1e-6),  # rms ~ eps: where eps, and where it stands, matter
        _rms_case(2, (2, 3, 4, 7), 0.03, eps=1e-3),  # 4-D, an eps of its own ~ mean(x^2)
        _rms_case(3, (4, 6), 3.0, torch.float64),
        gradient_case(_rms_case(4, (2, 3, 6), 1.0), "x"),
        _rms_case(5, (3, 5), 1e20, torch.float64),  # squares beyond float32's range
        _rms_case(6, (2, 3, 8), 1000.0, torch.float16),  # squares beyond float16's range
        _rms_case(7, (2, 3, 8), 300.0, torch.bfloat16),  # bfloat16: the range, not the digits
        _rms_case(8, (9,), 2.0),  # one vector: no batch, no sequence axis
    ],
    laddered(RMS_MISTAKES, _RMS_LADDER), match=_at_float32_precision,
    formula="Compare with weight * x / sqrt(mean(x^2 over the last axis) + eps).",
    twins=(_rms_with(),),
    section=(_NB, "1. RMSNorm: LayerNorm without the mean"),
)


# ---------------------------------------------------------------------------------------
# SwiGLU


def _swiglu(ffn, x, act=None, swap=False, where="gate", combine="mul", drop=True, twice="",
            split="", layout=False):
    """down(dropout(act(gate(x)) * up(x))) with the variations that mistakes make. where: the
    activation on "gate", "both", "product" or "none"; combine: "mul" or "add"; drop: the
    dropout applied (True), not (False), "after" self.down, or on the "input" x; twice: "gate"
    or "up", the one projection used for both branches; split: "gate" or "up", the one projection whose output
    is chunked in two halves (a fused gate_up layer's code); layout: x @ weight, each linear's
    weight read as (in, out) (Flax's kernel, TensorFlow's) though torch's is (out, in)."""
    act = act or ffn.activation
    if drop == "input":
        x, drop = ffn.dropout(x), False
    if layout:
        h = act(x @ ffn.gate.weight) * (x @ ffn.up.weight)
        return ffn.dropout(h) @ ffn.down.weight
    gate, up = ffn.gate(x), ffn.up(x)
    if swap:
        gate, up = up, gate
    if twice:
        gate = up = {"gate": gate, "up": up}[twice]
    if split:
        up, gate = {"gate": gate, "up": up}[split].chunk(2, dim=-1)
    if where == "product":
        h = act(gate * up)
    else:
        g = act(gate) if where in ("gate", "both") else gate
        u = act(up) if where == "both" else up
        h = g * u if combine == "mul" else g + u
    if drop == "after":
        return ffn.dropout(ffn.down(h))
    return ffn.down(ffn.dropout(h) if drop else h)


def _swiglu_with(**bug):
    return lambda ffn, x: _swiglu(ffn, x, **bug)


SWIGLU_MISTAKES = (
    Mistake(
        "one_projection_twice", "self.{which} used in both branches, self.{other} never",
        "SwiGLU has two projections of x: activation(self.gate(x)) * self.up(x), each layer "
        "once. With one of them twice, the other layer's weights never act.",
        tuple(member(_swiglu_with(twice=w), which=w, other=o) for w, o in (("up", "gate"),
                                                                            ("gate", "up"))),
    ),
    Mistake(
        "one_projection_split", "One projection split in two halves: gate and up are two layers here",
        "a fused layer (one Linear to 2 d_ff, chunked in two, as some codebases store SwiGLU) "
        "is not this module's: self.gate and self.up are each (d_ff, d_model); apply each to x, "
        "whole: activation(self.gate(x)) * self.up(x).",
        tuple(_swiglu_with(split=w) for w in ("gate", "up")),
    ),
    Mistake(
        "weight_layout", "x @ weight: nn.Linear's weight is (out_features, in_features)",
        "torch stores a Linear's weight as (out, in) and computes x @ weight.T + bias (Flax's and "
        "TensorFlow's kernels are (in, out)): call the layers, self.gate(x), self.up(x) and "
        "self.down(h).",
        (_swiglu_with(layout=True),),
    ),
    Mistake(
        "gate_up_swapped", "Gate and up swapped",
        "the activation goes on self.gate(x), and self.up(x) is multiplied as it is: "
        "activation(gate(x)) * up(x). The two have the same shape, so only the values tell.",
        (_swiglu_with(swap=True),),
    ),
    Mistake(
        "wrong_activation", "{which} instead of the layer's activation",
        "a function written into forward ignores the layer's setting: call self.activation, "
        "which __init__ set from the argument (silu by default; gelu makes GEGLU, relu ReGLU).",
        tuple(member(_swiglu_with(act=act), which=which) for act, which in (
            (F.gelu, "GELU"), (torch.sigmoid, "A sigmoid (GLU's)"), (F.relu, "ReLU"),
            (F.silu, "SiLU"))),
    ),
    Mistake(
        "activation_variant", "{which} instead of the exact {name}",
        "self.activation is {name} as torch defines it ({exact}): call it as it is; {which} is "
        "another library's variant, close to it but not it.",
        tuple(member(lambda ffn, x, f=f, a=a: _swiglu(ffn, x, act=f if ffn.activation is a else None),
                     which=which, name=name, exact=exact) for a, f, which, name, exact in (
            (F.gelu, lambda z: F.gelu(z, approximate="tanh"), "GELU's tanh approximation "
             "(gelu_pytorch_tanh)", "GELU", "F.gelu, with erf"),
            (F.gelu, lambda z: z * torch.sigmoid(1.702 * z), "Quick GELU, z sigmoid(1.702 z) "
             "(CLIP's)", "GELU", "F.gelu, with erf"),
            (F.relu, lambda z: F.relu(z) ** 2, "Squared ReLU (Primer's)", "ReLU", "F.relu"))),
    ),
    Mistake(
        "residual_inside", "A residual added inside the feed-forward network",
        "the block adds x back around the whole sublayer (x + ffn(norm(x))); the network itself "
        "returns down(dropout(activation(gate(x)) * up(x))) alone.",
        (lambda ffn, x: x + _swiglu(ffn, x),),
    ),
    Mistake(
        "activation_misplaced", "Activation in the wrong place",
        "only the gate goes through the activation, before the product: activation(gate(x)) * "
        "up(x); not the product, and not up(x) too.",
        (_swiglu_with(where="product"), _swiglu_with(where="both")),
    ),
    Mistake(
        "no_gating", "No gating: one branch only",
        "SwiGLU multiplies two projections of x, the gate (through the activation) and up: "
        "down(activation(gate(x)) * up(x)).",
        (lambda ffn, x: ffn.down(ffn.dropout(ffn.activation(ffn.gate(x)))),
         lambda ffn, x: ffn.down(ffn.dropout(ffn.activation(ffn.up(x)))),
         lambda ffn, x: ffn.down(ffn.dropout(ffn.up(x)))),
    ),
    Mistake(
        "no_activation", "No activation on the gate: a bilinear layer, self.activation never "
        "called",
        "SwiGLU's gate goes through the layer's activation before the product: "
        "activation(gate(x)) * up(x). Without it, gate(x) * up(x) is the bilinear variant "
        "(Shazeer's GLU variants paper): another layer, whatever its name.",
        (_swiglu_with(where="none"),),
    ),
    Mistake(
        "activation_twice", "Activation applied twice to the gate",
        "the gate goes through self.activation once: activation(gate(x)) * up(x); "
        "activation(activation(gate(x))) squeezes it a second time (a gate whose layer already "
        "applies its SiLU, ported to a module that applies it again).",
        (lambda ffn, x: _swiglu(ffn, x, act=lambda z: ffn.activation(ffn.activation(z))),
         lambda ffn, x: _swiglu(ffn, x, where="both", act=lambda z: ffn.activation(
             ffn.activation(z)))),
    ),
    Mistake(
        "activation_after_down", "Activation applied after the down projection{how}",
        "the activation acts on the gate branch, d_ff wide, before the product: "
        "down(dropout(activation(gate(x)) * up(x))); the down projection's output, the "
        "layer's result, goes out as it is.",
        (member(lambda ffn, x: ffn.activation(_swiglu(ffn, x, where="none")),
                how=", not to the gate: activation(down(gate(x) * up(x)))"),
         member(lambda ffn, x: ffn.activation(_swiglu(ffn, x)),
                how=" too: activation(down(activation(gate(x)) * up(x)))")),
    ),
    Mistake(
        "down_one_branch", "Down projection applied to the {which} branch alone, then multiplied "
        "by {other} (a parenthesis slip)",
        "close the parentheses after the product: down(dropout(activation(gate(x)) * up(x))). "
        "{which_cap} projected to d_model times {other} (d_ff wide) does not even have the same "
        "width when d_ff != d_model.",
        tuple(member(c, which=w, other=o, which_cap=w.capitalize()) for c, w, o in (
            (lambda ffn, x: ffn.down(ffn.dropout(ffn.activation(ffn.gate(x)))) * ffn.up(x),
             "gate", "up(x)"),
            (lambda ffn, x: ffn.down(ffn.activation(ffn.gate(x))) * ffn.dropout(ffn.up(x)),
             "gate", "up(x)"),
            (lambda ffn, x: ffn.activation(ffn.gate(x)) * ffn.down(ffn.dropout(ffn.up(x))),
             "up", "activation(gate(x))"))),
    ),
    Mistake(
        "dropout_always_on", "Dropout left on in eval mode: F.dropout without training=",
        "F.dropout(h, p) drops in every mode (its training argument defaults to True); the "
        "module self.dropout (nn.Dropout) follows model.train() and model.eval(): use it, or "
        "pass training=self.training.",
        (lambda ffn, x: ffn.down(F.dropout(ffn.activation(ffn.gate(x)) * ffn.up(x),
                                           ffn.dropout.p)),),
    ),
    Mistake(
        "added", "Gate added instead of multiplied",
        "the gate scales up(x) feature by feature: activation(gate(x)) * up(x), a product.",
        (_swiglu_with(combine="add"),),
    ),
    Mistake(
        "dropout_missing", "Dropout not applied",
        "in training the gated hidden layer goes through self.dropout before self.down.",
        (_swiglu_with(drop=False),),
    ),
    Mistake(
        "concatenated", "The two branches concatenated, not multiplied",
        "SwiGLU multiplies the branches feature by feature: activation(gate(x)) * up(x), d_ff "
        "wide; torch.cat makes 2 d_ff features, which self.down (d_ff -> d_model) cannot take.",
        (lambda ffn, x: ffn.down(ffn.dropout(torch.cat((ffn.activation(ffn.gate(x)), ffn.up(x)),
                                                       -1))),),
    ),
    Mistake(
        "dropout_after_down", "Dropout after the down projection",
        "the dropout goes on the gated hidden layer, before self.down: down(dropout(activation("
        "gate(x)) * up(x))), as the docstring writes it (nanoGPT drops after its projection; "
        "this layer does not).",
        (_swiglu_with(drop="after"),),
    ),
    Mistake(
        "dropout_on_input", "Dropout on the input x",
        "the dropout goes on the gated hidden layer, before self.down: down(dropout(activation("
        "gate(x)) * up(x))); the block drops the sublayer's output, and x itself reaches gate and "
        "up whole.",
        (_swiglu_with(drop="input"),),
    ),
    Mistake(
        "no_down", "Down projection missing",
        "the gated hidden layer is d_ff wide: self.down brings it back to d_model, "
        "down(dropout(activation(gate(x)) * up(x))).",
        (lambda ffn, x: ffn.dropout(ffn.activation(ffn.gate(x)) * ffn.up(x)),),
    ),
    Mistake(
        "down_each_branch", "Down projection applied to each branch, the two results multiplied",
        "the product is taken d_ff wide and projected ONCE: down(activation(gate(x)) * up(x)). "
        "down(activation(gate(x))) * down(up(x)) multiplies two d_model-wide vectors: the same "
        "shape, another function.",
        (lambda ffn, x: ffn.down(ffn.dropout(ffn.activation(ffn.gate(x)))) * ffn.down(ffn.up(x)),
         lambda ffn, x: ffn.dropout(ffn.down(ffn.activation(ffn.gate(x))) * ffn.down(ffn.up(x)))),
    ),
)

_SWIGLU_LADDER = {
    "no_activation": (None, "print whether your forward calls self.activation."),
    "activation_twice": (None, "count the calls of self.activation in your forward: one."),
    "activation_after_down": (None, "print which tensor your activation receives: (..., d_ff) "
                              "wide, gate(x)."),
    "down_one_branch": (None, "print the shape of what self.down receives: (..., d_ff), the "
                        "product."),
    "concatenated": (None, "print the shape of what self.down receives: (..., d_ff)."),
    "dropout_always_on": (None, "in eval mode with dropout=0.5, call your layer twice on the "
                          "same x: the outputs must be equal."),
    "down_each_branch": (None, "print the shape of what you multiply: (..., d_ff), before "
                         "self.down."),
    "one_projection_twice": (None, "print which layers your forward calls: self.gate, self.up "
                             "and self.down, each once."),
    "one_projection_split": (None, "print self.gate(x).shape: (..., d_ff), the whole gate."),
    "weight_layout": (None, "print self.gate.weight.shape next to x.shape."),
    "gate_up_swapped": (None, "print which of self.gate(x) and self.up(x) your activation "
                        "receives."),
    "wrong_activation": (None, "print self.activation(torch.tensor(-1.0)) and your activation "
                         "of -1.0: SiLU gives -0.2689."),
    "activation_misplaced": (None, "write your hidden layer as a formula: which term does the "
                             "activation wrap?"),
    "no_gating": (None, "count the projections of x your forward uses: three (gate, up, "
                  "down)."),
    "added": (None, "set self.up's weight to zeros: the hidden layer must become 0."),
    "dropout_missing": (None, "in training mode with dropout=0.5, print how many hidden units "
                        "are 0 before self.down."),
    "dropout_after_down": (None, "in training mode with dropout=0.5, print how many hidden "
                           "units are 0 before self.down, and how many outputs are 0 after it."),
    "no_down": (None, "print your output's shape next to x's."),
    "dropout_on_input": (None, "in training mode with dropout=0.5, print which tensor your "
                         "self.dropout receives."),
    "activation_variant": (None, "print self.activation(torch.tensor(-1.0)) next to your "
                           "activation of -1.0."),
    "residual_inside": (None, "set every weight to 0: your output must be 0, not x."),
}


def _swiglu_case(seed, shape, d_ff, activation="silu", dropout=0.0, train=False,
                 dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = _randn(g, *shape, dtype=dtype)
    label = describe(x=x) + f", d_model={shape[-1]}, d_ff={d_ff}, activation={activation!r}"
    if dropout:
        label += f", dropout={dropout} in {'training' if train else 'eval'} mode"
    return Case((x,), names=("x",), label=label, init=(shape[-1], d_ff, dropout, activation),
                train=train, seed=seed, dtype=None if dtype == torch.float32 else dtype)


SWIGLU = Item(
    EXERCISE, "SwiGLU", SwiGLU,
    [
        _swiglu_case(0, (2, 5, 6), 10),
        _swiglu_case(1, (3, 4, 6), 12, "gelu"),  # GEGLU: the activation is the layer's
        _swiglu_case(2, (7, 4), 9),
        _swiglu_case(3, (2, 3, 6), 10, dropout=0.5, train=True),
        _swiglu_case(4, (2, 3, 6), 10, dtype=torch.float64),
        _swiglu_case(5, (2, 3, 6), 10, "relu"),  # ReGLU
        _swiglu_case(6, (2, 3, 6), 10, "gelu", dtype=torch.bfloat16),
        _swiglu_case(7, (2, 3, 6), 10, "gelu", dtype=torch.float64),  # where GELU's variants show
        _swiglu_case(8, (2, 3, 6), 10, dropout=0.5),  # dropout > 0 in eval mode: off
    ],
    laddered(SWIGLU_MISTAKES, _SWIGLU_LADDER),
    formula="Compare with down(dropout(activation(gate(x)) * up(x))).",
    twins=(_swiglu_with(),),
    section=(_NB, "2. SwiGLU: a gated feed-forward network"),
)


# ---------------------------------------------------------------------------------------
# rotate(x, start=0, base=10000.0, pairs="halves")


def _rotate(x, start=0, base=10000.0, pairs="halves", *, offset=True, own_base=None,
            exponent="2i/d", angle_dtype=torch.float64, sign=1, swap=False, layout=None,
            rounded=None, written=None, heads_axis=False, table_dtype=None, positions_to=None,
            seq_axis=None, formula=None, partial=None, angle_shift=False, read_swapped=False):
    """RoPE with the variations that mistakes make. layout: how the d_head / 2 angles are
    laid out over the features for `pairs` (None: right; "interleaved" for halves,
    "halved" for adjacent: the other convention's); written: `pairs` read in the other
    layout and written in its own (written == pairs), read in its own and written in the
    other ("other"), or the two rotated parts written in the other order ("swapped");
    heads_axis: the positions counted along axis -3 (x read as (batch, seq, heads, d_head));
    table_dtype: cos and sin cast to it instead of x's dtype (float32: the result promoted);
    positions_to "seq": torch.arange(start, seq); seq_axis: the axis seq is read from
    (x.shape[2]); formula: (a, b, cos, sin) -> the pair's two rotated features (a typo's);
    partial: the number of leading features rotated (GPT-NeoX's rotary_ndims, theta computed
    over them), the rest passed through; angle_shift: start added to the angles, not to the
    positions; read_swapped: each pair read as (b, a)."""
    if partial:
        rotated = _rotate(x[..., :partial], start, base, pairs)
        return torch.cat((rotated, x[..., partial:]), -1)
    heads_axis = heads_axis and x.dim() > 2
    seq, d = x.size(-3 if heads_axis else -2), x.size(-1)
    seq = seq if seq_axis is None else x.shape[seq_axis]
    base = own_base or base
    angle_dtype = x.dtype if angle_dtype == "x" else angle_dtype
    i = torch.arange(d // 2, dtype=angle_dtype)
    power = {"2i/d": 2 * i / d, "i/d": i / d, "-2i/d": -2 * i / d, "2i/(d-2)": 2 * i / (d - 2),
             "2(i+1)/d": 2 * (i + 1) / d,
             "4i/d": 4 * i / d, "2i//d": 2 * i // d, "(2i+1)/d": (2 * i + 1) / d}[exponent]
    theta = base ** -power
    positions = torch.arange(seq, dtype=angle_dtype) + (start if offset else 0)
    if positions_to == "seq":
        positions = torch.arange(start, seq, dtype=angle_dtype)
    if rounded == "theta":  # theta rounded to x's dtype, the angles then in float64
        theta = theta.to(x.dtype).to(angle_dtype)
    if rounded == "positions":
        positions = positions.to(x.dtype).to(angle_dtype)
    angle = positions[:, None] * theta  # (seq, d / 2)
    if angle_shift:
        angle = torch.arange(seq, dtype=angle_dtype)[:, None] * theta + start
    if heads_axis:  # Meta's reshape_for_broadcast: (seq, 1, d / 2)
        angle = angle[:, None, :]
    cos, sin = angle.cos().to(table_dtype or x.dtype), angle.sin().to(table_dtype or x.dtype)
    if swap:
        cos, sin = sin, cos
    sin = sign * sin
    if written == pairs:  # pairs read in one layout, the result written in the other
        half = x.size(-1) // 2
        if pairs == "adjacent":
            a, b = x[..., :half], x[..., half:]
            return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)
    if written in ("other", "swapped") or heads_axis or formula or read_swapped:
        a, b = (x[..., 0::2], x[..., 1::2]) if pairs == "adjacent" else x.chunk(2, dim=-1)
        a, b = (b, a) if read_swapped else (a, b)
        first, second = (formula or _rotation)(a, b, cos, sin)
        if written == "swapped":
            first, second = second, first
        if (pairs == "adjacent") == (written == "other"):
            return torch.cat((first, second), -1)
        return torch.stack((first, second), -1).flatten(-2)
    if layout is None:
        return apply_rotary(x, cos, sin, pairs)
    if pairs == "halves":  # the angles of adjacent pairs, features paired as halves
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        a, b = x.chunk(2, dim=-1)
        rotated = torch.cat((-b, a), -1)
    else:  # the angles of halves, features paired as adjacent ones
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
    return x * cos + rotated * sin


def _rotation(a, b, cos, sin):
    return a * cos - b * sin, a * sin + b * cos


# One term of (a cos - b sin, a sin + b cos) written otherwise: (the typo, the formula's terms).
_TYPOS = (
    ("the second component's cos and sin exchanged: a cos + b sin", lambda a, b, c, s: (
        a * c - b * s, a * c + b * s)),
    ("the first component's cos and sin exchanged: a sin - b cos", lambda a, b, c, s: (
        a * s - b * c, a * s + b * c)),
    ("the first component's sign flipped: a cos + b sin", lambda a, b, c, s: (
        a * c + b * s, a * s + b * c)),
    ("the second component's sign flipped: b cos - a sin", lambda a, b, c, s: (
        a * c - b * s, b * c - a * s)),
    ("the second component's b term subtracted: a sin - b cos", lambda a, b, c, s: (
        a * c - b * s, a * s - b * c)),
    ("the first component's a term negated: -a cos - b sin", lambda a, b, c, s: (
        -a * c - b * s, a * s + b * c)),
    ("the first component's b written a: a cos - a sin", lambda a, b, c, s: (
        a * c - a * s, a * s + b * c)),
    ("the second component's a written b: b sin + b cos", lambda a, b, c, s: (
        a * c - b * s, b * s + b * c)),
    ("the first component's a written b: b cos - b sin", lambda a, b, c, s: (
        b * c - b * s, a * s + b * c)),
    ("the second component's b written a: a sin + a cos", lambda a, b, c, s: (
        a * c - b * s, a * s + a * c)),
    ("sin written cos in the first component: a cos - b cos", lambda a, b, c, s: (
        a * c - b * c, a * s + b * c)),
    ("cos written sin in the second component: a sin + b sin", lambda a, b, c, s: (
        a * c - b * s, a * s + b * s)),
    ("the second component the first's: a cos - b sin twice", lambda a, b, c, s: (
        a * c - b * s, a * c - b * s)),
)


def _rotate_with(only=None, **bug):
    """_rotate with `bug`, for every pair convention or for the `only` one (the other right)."""
    return lambda x, start=0, base=10000.0, pairs="halves": _rotate(
        x, start, base, pairs, **(bug if only in (None, pairs) else {}))


def _other_pairs(x, start=0, base=10000.0, pairs="halves"):
    return _rotate(x, start, base, {"halves": "adjacent", "adjacent": "halves"}[pairs])


def _always(fixed):
    return lambda x, start=0, base=10000.0, pairs="halves": _rotate(x, start, base, fixed)


def _sizes_clash(error, a, b):
    """Whether `error` is torch's broadcast error between sizes a and b (in either order)."""
    found = BROADCAST.search(str(error))
    return bool(found) and {int(found[1]), int(found[2])} == {a, b}


def _from_zero(case, error):
    """The rotate case at start 0, when `error` is a clash of seq with the seq - start
    positions left of a table of seq positions sliced at start (None otherwise)."""
    x, start = case.args[0], case.kwargs.get("start", 0)
    seq = x.size(-2)
    if not start or not _sizes_clash(error, seq, max(seq - start, 0)):
        return None
    return dataclasses.replace(case, kwargs={**case.kwargs, "start": 0}, label=case.label + " (at start=0)")


def _unpacked_swapped(theta_from, halves_by):
    """rotate with d, seq = x.shape[-2:] (the two sizes unpacked in the wrong order), in the
    common ways of writing it: theta from torch.arange(0, d, 2) or arange(d // 2), halves
    sliced at d // 2 or chunked (it raises where the learner's code does)."""
    def compute(x, start=0, base=10000.0, pairs="halves"):
        d, seq = x.shape[-2:]
        i = torch.arange(0, d, 2) if theta_from == "step" else 2 * torch.arange(d // 2)
        angle = torch.outer(torch.arange(start, start + seq, dtype=torch.float64),
                            base ** (-i.double() / d))
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        if pairs == "adjacent":
            a, b = x[..., 0::2], x[..., 1::2]
            return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)
        a, b = (x[..., :d // 2], x[..., d // 2:]) if halves_by == "slice" else x.chunk(2, -1)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)
    return compute


ROTATE_MISTAKES = (
    Mistake(
        "sizes_unpacked_swapped", "d_head and seq unpacked in the wrong order: d, seq = "
        "x.shape[-2:]",
        "x is (..., seq, d_head): the positions are the second-to-last axis and the features "
        "the last, seq, d_head = x.shape[-2:] (or x.size(-2), x.size(-1)); the other order "
        "builds seq angles per pair for d_head positions.",
        tuple(_unpacked_swapped(t, h) for t in ("step", "half") for h in ("slice", "chunk")),
    ),
    Mistake(
        "table_sliced_at_start", "A table of seq positions sliced at start: short, or empty, "
        "once start > 0",
        "the angles must cover positions start ... start + seq - 1: build them from those "
        "positions (torch.arange(start, start + seq)), or from a table of at least start + seq "
        "positions; a table of x's seq positions holds only seq - start of them from start on.",
        probe=_from_zero,
    ),
    Mistake(
        "pairs_mixed_up", "The two pair conventions mixed up",
        "pairs='halves' rotates x[..., i] with x[..., i + d_head/2] (transformers); "
        "pairs='adjacent' rotates x[..., 2i] with x[..., 2i + 1] (RoFormer, Meta). Both are "
        "right, but a model's weights were trained with one of them.",
        (_other_pairs, _always("halves"), _always("adjacent")),
    ),
    Mistake(
        "not_offset", "Positions not offset by start (the cache's length)",
        "with a cache the new tokens are at positions start, start + 1, ...: rotate by "
        "(start + t) theta_i, not t theta_i, or every new token looks like the first.",
        (_rotate_with(offset=False),),
    ),
    Mistake(
        "base_ignored", "base ignored",
        "theta_i = base ** (-2i / d_head) with the argument `base` (Llama 3 uses 500,000), not "
        "a number of your own.",
        tuple(_rotate_with(own_base=b) for b in (10000.0, 500000.0)),
    ),
    Mistake(
        "wrong_exponent", "Wrong frequencies: theta_i = base^({power})",
        "theta_i = base ** (-2i / d_head) for i = 0, 1, ..., d_head/2 - 1: the first pair turns "
        "by 1 radian per position, the last by nearly 1 / base.",
        tuple(member(_rotate_with(exponent=e), power="+" + e[1:] if e.startswith("-")
                     else "-" + e) for e in ("i/d", "-2i/d", "2i/(d-2)", "4i/d", "2(i+1)/d"))
        + (member(_rotate_with(exponent="2i//d"), power="-(2i // d)), integer division: every "
                  "exponent 0, every pair turning at 1 radian per position (use / or a float "
                  "arange"),
           member(_rotate_with(exponent="(2i+1)/d"), power="-(2i + 1) / d), the odd numbers "
                  "(torch.arange(1, d, 2)): every frequency one step too low (the exponents are "
                  "the even numbers, torch.arange(0, d, 2)")),
    ),
    Mistake(
        "positions_to_seq", "Positions torch.arange(start, seq), not arange(start, start + seq)",
        "the seq tokens are at positions start, ..., start + seq - 1: torch.arange(start, start "
        "+ seq). arange(start, seq) takes its bounds as a slice's: seq - start positions, none "
        "once start >= seq (and an error once start > seq).",
        (_rotate_with(positions_to="seq"),),
    ),
    Mistake(
        "seq_from_axis_2", "The number of positions read from axis 2, x.shape[2]",
        "x may be (seq, d_head), (heads, seq, d_head) or (batch, heads, seq, d_head): the "
        "positions are the second-to-last axis whatever the rank, x.size(-2); x.shape[2] is the "
        "sequence of a 4-D x only.",
        (_rotate_with(seq_axis=2),),
    ),
    Mistake(
        "low_precision", "cos and sin built in {dtype}",
        "position x theta reaches thousands of radians, where a bfloat16 number is off by "
        "several: compute the angles in float32 or float64 (torch.arange(..., dtype="
        "torch.float64)), take cos and sin, and only then cast them to x's dtype.",
        (member(_rotate_with(angle_dtype="x"), dtype="x's dtype (bfloat16)"),
         member(_rotate_with(rounded="theta"), dtype="float64 from theta rounded to x's dtype"),
         member(_rotate_with(rounded="positions"), dtype="float64 from positions made in x's "
                "dtype (in bfloat16, positions above 256 are rounded)")),
    ),
    Mistake(
        "float32_tables", "cos and sin left in float32: a half-precision x comes back float32",
        "x * cos with a float32 cos promotes a half-precision x to float32 (Meta's "
        "apply_rotary_emb computes in float32 too, then ends with .type_as(x)): cast cos and sin "
        "to x's dtype (or the result back to it), so that rotate returns x's dtype.",
        tuple(_rotate_with(only, table_dtype=torch.float32) for only in (None, "halves", "adjacent")),
    ),
    Mistake(
        "wrong_direction", "Rotated the wrong way",
        "each pair (a, b) becomes (a cos - b sin, a sin + b cos): the minus on the first; your "
        "signs turn by -angle (rotate_half is cat(-b, a), not cat(b, -a)).",
        tuple(_rotate_with(only, sign=-1) for only in (None, "halves", "adjacent")),
    ),
    Mistake(
        "cos_sin_swapped", "cos and sin swapped",
        "(a, b) -> (a cos - b sin, a sin + b cos): at position 0 the angle is 0 and x must "
        "come back unchanged (cos 0 = 1, sin 0 = 0).",
        (_rotate_with(swap=True), _rotate_with(swap=True, sign=-1)),
    ),
    Mistake(
        "read_and_written_otherwise", "Pairs read in one layout and written back in the other",
        "read pair i where `pairs` puts it and write its two rotated features back THERE: with "
        "adjacent pairs (2i, 2i + 1) in and out (x.unflatten(-1, (d_head // 2, 2)), not (2, "
        "d_head // 2)); with halves (i, i + d_head/2) in and out.",
        (_rotate_with(written="adjacent"), _rotate_with(written="halves"),
         *(_rotate_with(only, written="other") for only in (None, "adjacent", "halves"))),
    ),
    Mistake(
        "parts_swapped", "The two rotated parts written back in the other order",
        "pair (a, b) becomes (a cos - b sin, a sin + b cos), in that order: the first feature "
        "of the pair gets a cos - b sin; written the other way round, (a sin + b cos, a cos - "
        "b sin), every pair's features trade places (the halves swapped, or each adjacent two).",
        tuple(_rotate_with(only, written="swapped") for only in (None, "halves", "adjacent")),
    ),
    Mistake(
        "formula_typo", "The rotation's formula mistyped: {typo}",
        "each pair (a, b) becomes (a cos - b sin, a sin + b cos), the rotation by the angle: "
        "compare your two lines with it term by term (a mistyped one is no rotation: it changes "
        "the pair's length).",
        tuple(member(_rotate_with(only, formula=f), typo=t) for t, f in _TYPOS
              for only in (None, "halves", "adjacent")),
    ),
    Mistake(
        "pair_read_swapped", "Each pair read as (b, a): the two features of a pair exchanged",
        "pair i is (a, b) = (x[..., 2i], x[..., 2i + 1]) for adjacent pairs, (x[..., i], "
        "x[..., i + d_head/2]) for halves, a first: (a cos - b sin, a sin + b cos) with them "
        "read the other way round turns every pair backwards and writes it in the wrong places.",
        tuple(_rotate_with(only, read_swapped=True) for only in (None, "halves", "adjacent")),
    ),
    Mistake(
        "partial_rotary", "Only the first {part} of the features rotated (GPT-NeoX's rotary_pct)",
        "rotate rotates every feature of x, in d_head / 2 pairs, with theta_i = base ** (-2i / "
        "d_head) over the whole width; GPT-NeoX's and Phi's rotary_pct rotates a part only "
        "(theta over that part), passing the rest through: not this course's (Llama's) RoPE.",
        tuple(member(lambda x, start=0, base=10000.0, pairs="halves", f=f, only=only: (
            _rotate(x, start, base, pairs, partial=int(x.size(-1) * f))
            if only in (None, pairs) else _rotate(x, start, base, pairs)), part=p)
            for f, p in ((0.5, "half"), (0.25, "quarter")) for only in (None, "halves", "adjacent")),
    ),
    Mistake(
        "start_added_to_angle", "start added to the angles (t theta_i + start), not to the "
        "positions",
        "the offset moves the POSITION: the angle of token t is (start + t) * theta_i, each "
        "pair turning at its own rate; t theta_i + start adds the same start radians to every "
        "pair's angle.",
        (_rotate_with(angle_shift=True),),
    ),
    Mistake(
        "positions_on_heads", "Positions laid along the heads axis: x read as (batch, seq, "
        "heads, d_head)",
        "here x is (batch, heads, seq, d_head): the position is axis -2 (seq = x.size(-2)), and "
        "the angles (seq, d_head / 2) line up with x's last two axes. Meta's llama and "
        "flash-attention keep (batch, seq, heads, d_head), where a (seq, 1, d_head / 2) table "
        "(reshape_for_broadcast) is right; on this layout it turns each HEAD by its own "
        "position and every token of a head alike.",
        (_rotate_with(heads_axis=True),),
    ),
    Mistake(
        "angles_laid_out_for_other_pairs", "Angles laid out for the other convention",
        "the angle of pair i must be on both of its features: for halves, features i and i + "
        "d_head/2 (cat((cos, cos), -1)); for adjacent, features 2i and 2i + 1 "
        "(repeat_interleave(2, -1)).",
        tuple(_rotate_with(only, layout="other") for only in (None, "adjacent", "halves")),
    ),
)

_ROTATE_LADDER = {
    "pairs_mixed_up": (None, "rotate x = e_0 (a 1 at feature 0) at position 1: with halves the "
                       "1 moves to feature d_head/2, with adjacent to feature 1."),
    "not_offset": (None, "call rotate(x[..., 5:6, :], start=5) and compare with rotate(x)[..., "
                   "5:6, :]: equal."),
    "base_ignored": (None, "print theta for base=500000 and base=10000: the last pair's must "
                     "differ."),
    "table_sliced_at_start": (None, "print the positions your angles are built for with x of 3 "
                              "positions at start=5: 5, 6, 7."),
    "wrong_exponent": (None, "print your theta for d_head=8, base=10000: [1, 0.1, 0.01, "
                       "0.001]."),
    "low_precision": (None, "print torch.tensor(3000., dtype=torch.bfloat16) + 1: the angle "
                      "does not even move."),
    "float32_tables": (None, "print the dtype of your cos table and of your output for a "
                       "bfloat16 x."),
    "wrong_direction": (None, "rotate x = e_0 (a 1 at feature 0) by a small angle: the paired "
                        "feature must become +sin, not -sin."),
    "cos_sin_swapped": (None, "rotate any x at start=0: the output must be x itself."),
    "read_and_written_otherwise": (None, "rotate x = e_0 (a 1 at feature 0) at position 1 with "
                                   "pairs='adjacent': only features 0 and 1 may change."),
    "parts_swapped": (None, "rotate x = e_0 (a 1 at feature 0) by a small angle: feature 0 "
                      "must stay near 1."),
    "sizes_unpacked_swapped": (None, "print seq and d_head as your code reads them, next to "
                               "x.shape."),
    "formula_typo": (None, "rotate x = e_0 (a 1 at feature 0) at position 1: the output must "
                     "still have length 1."),
    "pair_read_swapped": (None, "rotate x = e_0 (a 1 at feature 0) at position 1: feature 0 must "
                          "become cos 1, 0.54."),
    "partial_rotary": (None, "rotate x = e_last (a 1 at the last feature) at position 1: it must "
                       "move."),
    "start_added_to_angle": (None, "call rotate(x[..., 5:6, :], start=5) and compare with "
                             "rotate(x)[..., 5:6, :]: equal."),
    "positions_on_heads": (None, "print x.shape and which axis your positions count along: "
                           "x.size(-2) of them."),
    "positions_to_seq": (None, "print the positions you build for x of 3 positions at "
                         "start=5: 5, 6, 7."),
    "seq_from_axis_2": (None, "call rotate on a 2-D x (seq, d_head): print the number of "
                        "positions you build."),
    "angles_laid_out_for_other_pairs": (None, "print the shape and the first row of your cos "
                                        "table next to the features it multiplies."),
}


def _rotate_case(seed, shape, start=0, base=None, pairs=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = _randn(g, *shape).to(dtype)
    kwargs = {"start": start} if start else {}
    kwargs.update({"base": base} if base else {})
    kwargs.update({"pairs": pairs} if pairs else {})
    label = describe(x=x) + f", {dtype}".replace("torch.", "") + "".join(
        f", {k}={v!r}" for k, v in kwargs.items())
    return Case((x,), kwargs, names=("x",), label=label, seed=seed)


def rotate(x, start=0, base=10000.0, pairs="halves"):
    """The reference: the package's RotaryEmbedding."""
    return RotaryEmbedding(x.size(-1), base, pairs)(x, start)


ROTATE = Item(
    EXERCISE, "rotate", rotate,
    [
        _rotate_case(0, (2, 3, 5, 8)),
        _rotate_case(1, (2, 3, 5, 8), pairs="adjacent"),
        _rotate_case(2, (1, 2, 3, 8), start=7),  # the new tokens after a cache of 7
        _rotate_case(3, (1, 2, 6, 16), start=3, base=500000.0, pairs="adjacent"),
        _rotate_case(4, (1, 2, 3, 8), start=3000, dtype=torch.bfloat16),
        _rotate_case(5, (2, 1, 7, 12), start=2, dtype=torch.float64),
        gradient_case(_rotate_case(6, (1, 2, 4, 8), start=1), "x"),
        _rotate_case(7, (1, 2, 3, 8), start=1000, pairs="adjacent", dtype=torch.float16),
        _rotate_case(8, (2, 3, 5, 8), base=500000.0),  # case 0's shape, another base
        _rotate_case(9, (5, 8), start=4),  # (seq, d_head): no batch or heads axes
        _rotate_case(10, (1, 2, 3, 8), start=7, dtype=torch.bfloat16),  # case 2's, in bfloat16
        _rotate_case(11, (1, 2, 3, 8), start=30000, dtype=torch.float16),  # theta rounded shows
    ],
    laddered(ROTATE_MISTAKES, _ROTATE_LADDER),
    formula="Compare with (a, b) -> (a cos - b sin, a sin + b cos), angle (start + t) * "
            "base ** (-2i / d_head), on the pairs that `pairs` names.",
    twins=(_rotate_with(),),
    shifts=((1, "start", "position"),), again=True,
    section=(_NB, "3. Rotary position embedding"),
)


# ---------------------------------------------------------------------------------------
# rotary_attention(q, k, v, past_k=None, past_v=None, base=10000.0)


def _attention(q, k, v, past_k=None, past_v=None, base=10000.0, *, rotate_v=False,
               offset=True, rerotate=False, mask="offset", which="qk", scale=None, past="before",
               diagonal=0, pairs="halves", shift=0, rotated_dims=None, own_base=None, fixed="",
               dim=-1, inverted=False, based="qk", axes=(-2, -2), fill=-math.inf, mixed=""):
    """Causal attention of the new positions with RoPE, with the variations mistakes make:
    scale (d_head -> what the scores are divided by); past: the cache "before" the new keys,
    "after" them, or "ignored"; diagonal: added to the mask's diagonal; mask "no_cache": the
    causal mask only when there is no cache; pairs: RoPE's pair convention; shift: added to
    the new positions' start; rotated_dims: the leading features that are rotated (GPT-NeoX's
    rotary_pct), the others left as they are; own_base: the base the new tokens are rotated
    with instead; fixed: "q" or "k", rotated from position 0 whatever the cache; dim: the softmax's;
    inverted: the mask's True read as hidden (a True = masked mask given to
    scaled_dot_product_attention, whose bool attn_mask is True = may attend); based: the side(s)
    own_base rotates; axes: the axes the cached keys and values are concatenated on (None: that
    one not concatenated); fill: what the hidden scores are set to (-1e9: an additive mask;
    "times": the mask made by multiplying by -inf, NaN where 0 * -inf);
    mask "at": a (seq, at + seq) mask, built from the shifted start; mixed "v": the cached
    keys concatenated in front of the new values, "k": the cached values in front of the keys."""
    start = 0 if past_k is None else past_k.size(-2)
    at = max((start if offset else 0) + shift, 0)

    def turn(x, at, side):
        if rotated_dims is None:
            return _rotate(x, at, (own_base if side in based else None) or base, pairs)
        return torch.cat((_rotate(x[..., :rotated_dims], at, base, pairs), x[..., rotated_dims:]), -1)

    rq = turn(q, 0 if fixed == "q" else at, "q") if "q" in which else q
    rk = turn(k, 0 if fixed == "k" else at, "k") if "k" in which else k
    v = _rotate(v, at, base, pairs) if rotate_v else v
    if past_k is not None and past == "after":
        rk, v = torch.cat((rk, past_k), -2), torch.cat((v, past_v), -2)
    if past_k is not None and past == "before":
        key_axis, value_axis = axes
        rk = rk if key_axis is None else torch.cat((past_v if mixed == "k" else past_k, rk), key_axis)
        v = v if value_axis is None else torch.cat((past_k if mixed == "v" else past_v, v), value_axis)
        if rerotate:  # the cached keys rotated again, with the new ones
            rk = _rotate(torch.cat((past_k, k), -2), 0, base)
    seq, total = q.size(-2), rk.size(-2)
    allowed = {"offset": torch.ones(seq, total, dtype=torch.bool).tril(total - seq + diagonal),
               "unshifted": torch.ones(seq, total, dtype=torch.bool).tril(),
               "none": None, "square": torch.ones(seq, seq, dtype=torch.bool).tril(),
               "no_cache": None if start else torch.ones(seq, total, dtype=torch.bool).tril(),
               "at": torch.ones(seq, at + seq, dtype=torch.bool).tril(at)}[mask]
    scores = rq @ rk.transpose(-2, -1) / (scale or math.sqrt)(q.size(-1))
    if allowed is not None and fill == "times":  # (1 - allowed) * -inf: 0 * -inf is NaN
        scores = scores + (~allowed).to(scores.dtype) * -math.inf
    elif allowed is not None:
        scores = scores.masked_fill(allowed if inverted else ~allowed, fill)
    return scores.softmax(dim) @ v  # (batch, heads, seq, d_head)


def _attention_with(**bug):
    return (lambda q, k, v, past_k=None, past_v=None, base=10000.0:
            _attention(q, k, v, past_k, past_v, base, **bug))


def _cache_length_from(axis, mask):
    """rotary_attention with start = past_k.size(axis): the new tokens rotated from it, and
    (mask) the causal mask's diagonal set by it too."""
    def compute(q, k, v, past_k=None, past_v=None, base=10000.0):
        wrong = 0 if past_k is None else past_k.size(axis) - past_k.size(-2)
        return _attention(q, k, v, past_k, past_v, base, shift=wrong,
                          diagonal=wrong if mask else 0)
    return compute


def _without_cache(case, error):
    """The attention case without its cache, when `error` is a clash of the seq new queries'
    mask with the start + seq keys' scores (None otherwise)."""
    past = case.kwargs.get("past_k")
    seq = case.args[0].size(-2)
    if past is None or not _sizes_clash(error, seq, past.size(-2) + seq):
        return None
    kwargs = {k: v for k, v in case.kwargs.items() if k not in ("past_k", "past_v")}
    return dataclasses.replace(case, kwargs=kwargs, label=case.label + " (without the cache)")


def _rope_sized(axis, q, k, v, past_k, past_v, base):
    """rotary_attention with RotaryEmbedding(q.size(axis), base) (raising as the package's
    does when that size does not fit)."""
    start = 0 if past_k is None else past_k.size(-2)
    rope = RotaryEmbedding(q.size(axis), base)
    q, k = rope(q, start), rope(k, start)
    if past_k is not None:
        k, v = torch.cat((past_k, k), -2), torch.cat((past_v, v), -2)
    causal = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start)
    return scaled_dot_product_attention(q, k, v, causal)[0]


def _through_chapter01(compute):
    """rotary_attention with chapter 01's attention replaced by `compute` (one of its mistakes'
    computations): q and k rotated at start, the cache concatenated, and the (seq, start + seq)
    causal mask (True = may attend, chapter 01's convention) all right."""
    def rotary(q, k, v, past_k=None, past_v=None, base=10000.0):
        start = 0 if past_k is None else past_k.size(-2)
        q, k = _rotate(q, start, base), _rotate(k, start, base)
        if past_k is not None:
            k, v = torch.cat((past_k, k), -2), torch.cat((past_v, v), -2)
        return compute(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))[0]
    if hasattr(compute, "fields"):
        rotary.fields = compute.fields
    return rotary


# Chapter 01's attention mistakes that rotary_attention's attention can make as well.
_CHAPTER01_SHARED = ("masked_to_zero", "mask_after_softmax", "scaled_after_softmax", "multiplied",
                     "scaled_by_wrong_size", "no_softmax", "log_softmax", "keys_combined", "mask_added",
                     "query_key_swapped", "key_not_transposed")


def _returning_cache(form, whole):
    """rotary_attention returning the keys and values with the output: the concatenated cache
    (whole) or the new tokens' rotated keys and values, in a flat or a nested tuple."""
    def compute(q, k, v, past_k=None, past_v=None, base=10000.0):
        start = 0 if past_k is None else past_k.size(-2)
        keys = _rotate(k, start, base)
        values = v
        if whole and past_k is not None:
            keys, values = torch.cat((past_k, keys), -2), torch.cat((past_v, values), -2)
        output = _attention(q, k, v, past_k, past_v, base)
        return (output, keys, values) if form == "flat" else (output, (keys, values))
    return compute


ATTENTION_MISTAKES = (
    Mistake(
        "square_mask", "A (seq, seq) causal mask on (seq, start + seq) scores",
        "with a cache the new queries read start + seq keys: the mask is (seq, start + seq), "
        "torch.ones(seq, start + seq, dtype=torch.bool).tril(start); slicing a square mask to "
        "[:seq, :seq] (the shape without a cache) no longer fits the scores.",
        (_attention_with(mask="square"),),
        probe=_without_cache,
    ),
    Mistake(
        "values_rotated", "RoPE applied to the values too",
        "rotary positions act on the scores, q . k: rotate the queries and the keys only. The "
        "values are what attention averages; rotating them mixes positions into the output.",
        (_attention_with(rotate_v=True),),
    ),
    Mistake(
        "not_offset", "New positions not offset by the cache's length",
        "the new tokens come after the past_k.size(-2) cached ones: rotate them at positions "
        "start, start + 1, ... (RotaryEmbedding(d_head, base)(k, start)), as the cached keys "
        "were; the causal mask then starts at the same start (.tril(start)).",
        (_attention_with(offset=False), _attention_with(offset=False, mask="unshifted")),
    ),
    Mistake(
        "one_side_not_offset", "{which} rotated from position 0, not from the cache's length",
        "the new queries AND the new keys are at positions start, start + 1, ... (start = "
        "past_k.size(-2)): rotate both with the same start; {which_lower} rotated from 0 score "
        "as if they came before the cache.",
        (member(_attention_with(fixed="q"), which="The new queries", which_lower="queries"),
         member(_attention_with(fixed="k"), which="The new keys", which_lower="keys")),
    ),
    Mistake(
        "base_ignored", "base ignored: {who} rotated with {base}",
        "rotate with the argument base, RotaryEmbedding(d_head, base){both}: the cached keys were "
        "rotated with it (Llama 3 uses 500,000), and a new key turned with another base no longer "
        "lines up with them.",
        tuple(member(_attention_with(own_base=10000.0, based=side), base="the default 10000",
                     who=who, both=both) for side, who, both in (
            ("qk", "the new tokens", ""),
            ("q", "the new queries", ", for the queries as for the keys"),
            ("k", "the new keys", ", for the keys as for the queries"))),
    ),
    Mistake(
        "cache_rotated_again", "Cached keys rotated again",
        "past_k holds keys already rotated at their positions: concatenate the new rotated "
        "keys after them; rotating the concatenation turns the cached ones twice.",
        (_attention_with(rerotate=True),),
    ),
    Mistake(
        "mask_not_offset", "Causal mask not shifted by the cache's length",
        "query t is position start + t: it may read keys 0 ... start + t. A (seq, start + seq) "
        "mask is .tril(start) (diagonal=start), not .tril(). (scaled_dot_product_attention's "
        "is_causal=True aligns its mask to the top left, .tril(): with a cache, pass the mask.)",
        (_attention_with(mask="unshifted"),),
    ),
    Mistake(
        "past_ignored", "Cache ignored: the new tokens read only each other",
        "the new queries attend to the cached keys AND the new ones: concatenate past_k and "
        "past_v before the new k and v (along the positions, dim=-2), then attend over all "
        "start + seq keys.",
        (_attention_with(past="ignored"), _attention_with(past="ignored", offset=False)),
    ),
    Mistake(
        "positions_off_by_one", "New positions off by one: the first new token rotated at "
        "{position}",
        "the first new token is at position start = past_k.size(-2) (the cached ones are 0 ... "
        "start - 1): rotate the new queries and keys at start, start + 1, ...",
        tuple(member(_attention_with(shift=d), position=p) for d, p in ((-1, "start - 1"),
                                                                        (1, "start + 1")))
        + tuple(member(lambda q, k, v, past_k=None, past_v=None, base=10000.0, d=d: _attention(
            q, k, v, past_k, past_v, base, shift=0 if past_k is None else d, mask="at"),
            position=p + " (the mask built from it too)")
            for d, p in ((-1, "start - 1"), (1, "start + 1"))),
    ),
    Mistake(
        "inf_times_zero", "The mask made as (1 - allowed) * -inf: 0 * -inf is NaN",
        "multiplying the 0/1 mask by -inf gives NaN (not 0) where a key is allowed, and every "
        "score plus NaN is NaN: fill the hidden scores instead, scores.masked_fill(~allowed, "
        "float('-inf')), or add a mask of 0 and -inf built with torch.where.",
        (_attention_with(fill="times"),),
    ),
    Mistake(
        "cache_mixed_up", "The cached {what} concatenated in front of the new {to}",
        "past_k holds the earlier keys and past_v the earlier values: torch.cat((past_k, k), "
        "dim=-2) and torch.cat((past_v, v), dim=-2), each with its own kind (the two have the "
        "same shape, so only the values tell).",
        (member(_attention_with(mixed="v"), what="keys (past_k)", to="values"),
         member(_attention_with(mixed="k"), what="values (past_v)", to="keys")),
    ),
    Mistake(
        "rope_sized_otherwise", "RotaryEmbedding sized with {which}, not d_head",
        "RotaryEmbedding(dim, base) rotates dim features in dim / 2 pairs: dim is d_head = "
        "q.size(-1), each head's width; q.size({axis}) is {which}.",
        tuple(member(lambda q, k, v, past_k=None, past_v=None, base=10000.0, a=a: _rope_sized(
            a, q, k, v, past_k, past_v, base), which=w, axis=a)
            for a, w in ((-2, "the number of new tokens"), (1, "the number of heads"),
                         (0, "the batch size"))),
    ),
    Mistake(
        "positions_from_total", "New tokens rotated from start + seq - 1, one new token's position",
        "with several new tokens the first is at start = past_k.size(-2) and token t at start + "
        "t: start + seq - 1 is the position of the LAST new token (right only when one token "
        "comes at a time).",
        (lambda q, k, v, past_k=None, past_v=None, base=10000.0: _attention(
            q, k, v, past_k, past_v, base, shift=0 if past_k is None else q.size(-2) - 1),),
    ),
    Mistake(
        "positions_after_new", "New tokens rotated from start + seq: the offset advanced by the new "
        "tokens before they are used",
        "the first new token is at start = past_k.size(-2) and token t at start + t: the offset "
        "moves on by seq only AFTER this call's tokens are rotated (start + seq is the next "
        "call's first position).",
        (lambda q, k, v, past_k=None, past_v=None, base=10000.0: _attention(
            q, k, v, past_k, past_v, base, shift=0 if past_k is None else q.size(-2)),),
    ),
    Mistake(
        "cache_length_from_heads", "The cache's length read from the {axis} axis",
        "past_k is (batch, heads, start, d_head): the number of cached positions is "
        "past_k.size(-2) (or size(2)); past_k.size({index}) is {what}.",
        tuple(member(_cache_length_from(at, mask), axis=axis, index=at, what=what)
              for at, axis, what in ((1, "heads", "the number of heads"),
                                     (-1, "last", "d_head, each key's width"),
                                     (0, "batch", "the batch size"))
              for mask in (False, True)),
    ),
    Mistake(
        "partial_rotary", "Only part of each head's features rotated (GPT-NeoX's rotary_pct)",
        "this model rotates every feature of the queries and keys, in d_head / 2 pairs: "
        "RotaryEmbedding(d_head, base) on the whole q and k. GPT-NeoX's and Phi's rotary_pct "
        "rotates a part only; Llama's, this course's, rotates all.",
        (lambda q, k, v, past_k=None, past_v=None, base=10000.0: _attention(
            q, k, v, past_k, past_v, base, rotated_dims=q.size(-1) // 2),),
    ),
    Mistake(
        "cache_after", "Cached keys placed after the new ones",
        "the cache holds the EARLIER positions: torch.cat((past_k, k), dim=-2), so that key j "
        "is position j and the causal mask lines up.",
        (_attention_with(past="after"),),
    ),
    Mistake(
        "mask_off_by_one", "Causal mask off by one: {how}",
        "new token t is at position start + t and reads the keys 0 ... start + t, itself "
        "included: on the (seq, start + seq) mask that is .tril(start), diagonal=start.",
        (member(_attention_with(diagonal=-1), how="each token cannot read itself"),
         member(lambda *a, **kw: _attention_with(diagonal=-1)(*a, **kw).nan_to_num(0.0),
                how="each token cannot read itself"),  # the first one's empty row made 0
         member(_attention_with(diagonal=1), how="each token reads the next one too")),
    ),
    Mistake(
        "wrong_scale", "Scores scaled by {which}, not sqrt(d_head)",
        "divide q . k by sqrt(d_head), d_head = q.size(-1): the rotation keeps the vectors' "
        "lengths, so the scale is chapter 01's.",
        tuple(member(_attention_with(scale=f), which=which) for f, which in (
            (lambda d: 1.0, "nothing"), (lambda d: d, "d_head"),
            (lambda d: d ** 0.25, "the fourth root of d_head")))
        + (member(_through_chapter01(ch01._with(scale=lambda q, k, v: math.sqrt(
            q.size(-3) * q.size(-1)))), which="sqrt(heads * d_head), the model's width d_model"),),
    ),
    Mistake(
        "no_causal_mask", "No causal mask{when}",
        "with several new tokens, each may read only the keys up to its own position: mask "
        "the later ones{why}.",
        (member(_attention_with(mask="none"), when="", why=""),
         member(_attention_with(mask="no_cache"), when=" when a cache is given",
                why=" (one new token at a time needs no mask, but a cache may come with "
                    "several: a prompt's continuation, or speculative decoding)")),
    ),
    Mistake(
        "offset_twice", "The cache's length added twice {where}",
        "start = past_k.size(-2) is added ONCE: new token t is at position start + t, rotated "
        "there and reading the keys 0 ... start + t. {effect}",
        (member(lambda q, k, v, past_k=None, past_v=None, base=10000.0: _attention(
            q, k, v, past_k, past_v, base, diagonal=0 if past_k is None else past_k.size(-2)),
            where="to the queries' positions in the mask",
            effect="Added twice, each new token also reads start keys of later positions: "
                   "with a cache the mask hides nothing."),
         member(lambda q, k, v, past_k=None, past_v=None, base=10000.0: _attention(
            q, k, v, past_k, past_v, base, shift=0 if past_k is None else past_k.size(-2)),
            where="to the new tokens' rotation positions",
            effect="Added twice, the new tokens are rotated at 2 start + t.")),
    ),
    Mistake(
        "other_pairs", "RoPE's pairs taken in {which} convention",
        "rotary_attention rotates in the course's convention, pairs='halves' (transformers'), the "
        "one the cached keys were rotated in: RotaryEmbedding(d_head, base) as it is, with no "
        "pairs argument.",
        (member(_attention_with(pairs="adjacent"), which="Meta's adjacent"),),
    ),
    Mistake(
        "one_side_rotated", "Only {which} rotated",
        "rotate both the queries and the keys, at the same positions: the score q_m . k_n then "
        "depends on m - n only.",
        tuple(member(_attention_with(which=w), which=name) for w, name in (
            ("q", "the queries"), ("k", "the keys"), ("", "nothing"))),
    ),
    Mistake(
        "softmax_wrong_axis", "Softmax over the wrong axis: over the queries",
        "each query's weights must sum to 1 over the keys: the last axis of the scores "
        "(dim=-1); dim=-2 makes each key's weights sum to 1 over the queries.",
        (_attention_with(dim=-2),),
    ),
    Mistake(
        "mask_inverted", "Mask polarity inverted: True taken as hidden",
        "scaled_dot_product_attention's bool attn_mask is True where a query MAY attend (the "
        "opposite of nn.MultiheadAttention's key_padding_mask): pass the lower triangle, "
        ".tril(start), not the upper one; by hand, masked_fill(~allowed, -inf).",
        (_attention_with(inverted=True), _attention_with(inverted=True, fill=-1e9),
         _attention_with(inverted=True, diagonal=-1),  # kpos < qpos hidden: the past, not the future
         _attention_with(inverted=True, diagonal=-1, fill=-1e9),
         lambda *a, **kw: _attention_with(inverted=True)(*a, **kw).nan_to_num(0.0)),
    ),
    Mistake(
        "cache_half_concatenated", "Cached {what} not concatenated: {how}",
        "the cache holds the earlier positions' keys AND values: concatenate both, "
        "torch.cat((past_k, k), dim=-2) and torch.cat((past_v, v), dim=-2), so that the "
        "weights over the start + seq keys meet start + seq values.",
        (member(_attention_with(axes=(-2, None)), what="values",
                how="the weights over start + seq keys meet only the seq new values"),
         member(_attention_with(axes=(None, -2)), what="keys",
                how="the new queries score only the seq new keys, against start + seq values")),
    ),
    Mistake(
        "cache_wrong_axis", "The cache concatenated on the {axis} axis, not the positions",
        "past_k and k are (batch, heads, positions, d_head): the cache adds POSITIONS, "
        "torch.cat((past_k, k), dim=-2) (and the same for the values); on dim={dim} the "
        "{axis} axis grows instead{which}.",
        tuple(member(_attention_with(axes=axes), axis=axis, dim=dim, which=which)
              for dim, axis in ((-1, "feature"), (1, "heads"), (0, "batch"))
              for axes, which in (((dim, dim), ""), ((dim, -2), " (the keys')"),
                                  ((-2, dim), " (the values')"))),
    ),
    Mistake(
        "cache_returned", "The cache returned with the output: {what}",
        "rotary_attention returns the attention's output alone, (batch, heads, seq, d_head); "
        "the layer that calls it keeps the cache: return the output, not a tuple with the keys "
        "and values (Hugging Face's attention layers return (output, past_key_value); this "
        "function is the attention inside).",
        tuple(member(_returning_cache(form, whole), what=what) for form, whole, what in (
            ("flat", True, "(output, keys, values)"), ("nested", True, "(output, (keys, values))"),
            ("flat", False, "(output, k, v), the new tokens' keys and values"),
            ("nested", False, "(output, (k, v)), the new tokens' keys and values"))),
    ),
    Mistake(
        "weights_returned", "The attention weights returned with the output",
        "rotary_attention returns the output alone, (batch, heads, seq, d_head): chapter 01's "
        "scaled_dot_product_attention returns (output, weights), so take its [0] (output, _ = "
        "...).",
        (_through_chapter01(lambda q, k, v, m: (scaled_dot_product_attention(q, k, v, m),)),),
    ),
) + tuple(dataclasses.replace(m, computes=tuple(_through_chapter01(c) for c in m.computes))
          for m in ch01.MISTAKES if m.key in _CHAPTER01_SHARED)

_ATTENTION_LADDER = {
    "square_mask": (None, "print your mask's shape next to the scores' for 2 new tokens after 3 "
                    "cached ones: (2, 5)."),
    "values_rotated": (None, "print which tensors you pass to rotate: q and k, not v."),
    "not_offset": (None, "print the start you rotate the new tokens at, next to "
                   "past_k.size(-2)."),
    "cache_rotated_again": (None, "print which tensor your keys' rotate receives: the new k "
                            "alone, before the concatenation."),
    "mask_not_offset": (None, "print your mask for 2 new tokens after 3 cached ones: the first "
                        "row must allow 4 keys, the second 5."),
    "no_causal_mask": (None, "give 3 new tokens and no cache: the first one's output must not "
                       "change when you change the last one's v."),
    "other_pairs": (None, "print the pairs argument of your RotaryEmbedding."),
    "positions_off_by_one": (None, "print the start you rotate the new tokens at, next to "
                             "past_k.size(-2)."),
    "inf_times_zero": (None, "print 0 * float('-inf')."),
    "cache_mixed_up": (None, "print which tensors each of your two torch.cat receives."),
    "offset_twice": (None, "print your mask for 2 new tokens after 3 cached ones: rows "
                     "[1 1 1 1 0] and [1 1 1 1 1]."),
    "rope_sized_otherwise": (None, "print the dim your RotaryEmbedding is built with, next to "
                             "q.size(-1)."),
    "positions_after_new": (None, "print the start you rotate 3 new tokens at, after a cache of "
                            "4: 4."),
    "positions_from_total": (None, "print the start you rotate 3 new tokens at, after a cache of "
                             "4: 4."),
    "cache_length_from_heads": (None, "print past_k.shape and the start you rotate at."),
    "partial_rotary": (None, "print the width of the tensors you give RotaryEmbedding: "
                       "d_head."),
    "one_side_not_offset": (None, "print the start you give RotaryEmbedding for the queries and "
                            "for the keys: both past_k.size(-2)."),
    "base_ignored": (None, "print the base your RotaryEmbedding is built with, next to the "
                     "argument base."),
    "past_ignored": (None, "print k.shape after your concatenation: (batch, heads, start + "
                     "seq, d_head)."),
    "cache_after": (None, "print which tensor comes first in your torch.cat of the keys."),
    "mask_off_by_one": (None, "print your mask for 2 new tokens after 3 cached ones: rows "
                        "[1 1 1 1 0] and [1 1 1 1 1]."),
    "wrong_scale": (None, "print the number you divide the scores by, next to "
                    "math.sqrt(q.size(-1))."),
    "softmax_wrong_axis": (None, "print your weights' sum over the last axis: 1 for every query."),
    "mask_inverted": (None, "print your mask for 2 new tokens after 3 cached ones: which entries "
                      "are True, the keys a query may read or the ones it may not?"),
    "cache_half_concatenated": (None, "print k.shape and v.shape after your concatenation: "
                                "both (batch, heads, start + seq, d_head)."),
    "cache_wrong_axis": (None, "print k.shape after your concatenation, for 2 new tokens after 3 "
                         "cached ones: (batch, heads, 5, d_head)."),
    "weights_returned": (None, "print type(...) of what you return: a torch.Tensor."),
    "cache_returned": (None, "print type(...) of what you return: a torch.Tensor."),
    "one_side_rotated": (None, "shift every position by 10 (start=10, for q and k alike): your "
                         "scores must not change."),
}


def _attention_case(seed, n_kv, new, past=0, base=None, heads=2, d=8):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (_randn(g, n_kv, heads, new, d) for _ in range(3))
    kwargs = {}
    if past:
        positions = torch.arange(past)
        cos, sin = rotary_cos_sin(positions, d, base or 10000.0)
        kwargs["past_k"] = apply_rotary(_randn(g, n_kv, heads, past, d), cos, sin)
        kwargs["past_v"] = _randn(g, n_kv, heads, past, d)
    if base:
        kwargs["base"] = base
    label = describe(q=q, k=k, v=v, **{n: t for n, t in kwargs.items() if n != "base"})
    label += f", base={base}" if base else ""
    return Case((q, k, v), kwargs, names=("q", "k", "v"), label=label, seed=seed)


def rotary_attention(q, k, v, past_k=None, past_v=None, base=10000.0):
    """The reference: the package's RotaryEmbedding and chapter 01's attention."""
    start = 0 if past_k is None else past_k.size(-2)
    rope = RotaryEmbedding(q.size(-1), base)
    q, k = rope(q, start), rope(k, start)
    if past_k is not None:
        k, v = torch.cat((past_k, k), -2), torch.cat((past_v, v), -2)
    causal = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start)
    return scaled_dot_product_attention(q, k, v, causal)[0]  # (batch, heads, seq, d_head)


ATTENTION = Item(
    EXERCISE, "rotary_attention", rotary_attention,
    [
        _attention_case(0, 2, 5),
        _attention_case(1, 1, 1, past=6),  # one new token after a cache of 6
        _attention_case(2, 2, 3, past=4, base=500.0),  # several new tokens after a cache
        gradient_case(_attention_case(3, 1, 4, past=2), "q"),
        _attention_case(4, 2, 4, past=5, base=500000.0),  # Llama 3's base, 4 new after 5
        _attention_case(5, 1, 3, past=3, d=16),  # another d_head: a table cached by d_head
        _attention_case(6, 1, 4, past=1),  # more new tokens than cached ones
    ],
    laddered(ATTENTION_MISTAKES, _ATTENTION_LADDER),
    formula="Compare with softmax(rotate(q, start) rotate(k, start)^T / sqrt(d_head), masked "
            "causally with the cache) [past_v; v], start = past_k.size(-2).",
    twins=(_attention_with(),), again=True,
    section=(_NB, "4. Rotary attention with a cache"),
)

ITEMS = (RMS, SWIGLU, ROTATE, ATTENTION)
