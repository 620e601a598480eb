"""Exercise 04: layer normalization, the feed-forward network and the residual sublayer,
their cases and their catalogue of mistakes.

The stubs give each class's __init__, so the checks copy the reference's parameters into
the learner's module (load_state_dict) and compare forward passes exactly, in eval mode and
in training mode (dropout on, the same seeded randomness for both).
"""

import torch
from torch.nn import functional as F

from ..feed_forward import PositionWiseFeedForward
from ..normalization import LayerNorm, SublayerConnection
from .comparison import describe
from .mistakes import Mistake, laddered, member
from .pipeline import Case, Item, gradient_case

EXERCISE = "ex04_feed_forward_and_norm"


def _randn(g, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g, dtype=dtype)


def _dropout_in_eval(module, t):
    """F.dropout(t, p) without training=...: drops in eval mode too."""
    return F.dropout(t, module.dropout.p, training=True)


DROPOUT_IN_EVAL_HINT = (
    "F.dropout(x, p) drops in every mode (its `training` is True by default): use the module "
    "self.dropout, which drops only in training mode (model.train()), not in eval mode.")

# ---------------------------------------------------------------------------------------
# LayerNorm


def _norm(module, x, dim=-1, correction=0, eps="inside", affine="after", center=True,
          power=0.5):
    """Layer normalization with the variations that mistakes make."""
    w, b, e = module.weight, module.bias, module.eps
    mean = x.mean(dim, keepdim=True) if center else 0
    if center:
        var = x.var(dim, keepdim=True, correction=correction)
    else:
        var = (x * x).mean(dim, keepdim=True)
    if isinstance(eps, float):  # a number of the learner's own instead of self.eps
        e, eps = eps, "inside"
    if eps == "inside":
        std = torch.sqrt(var + e) if power == 0.5 else (var + e) ** power
    else:
        std = torch.sqrt(var) + (e if eps == "outside" else 0)
    y = (x - mean) / std + (e if eps == "after" else 0)
    if affine == "after":
        return y * w + b
    if affine == "swapped":
        return y * b + w
    if affine == "bias_first":
        return (y + b) * w
    return y * (w if "w" in affine else 1) + (b if "b" in affine else 0)


class _WrittenOut(LayerNorm):
    """The reference the checks run: the package's LayerNorm computes with F.layer_norm, the
    built-in the learner must not call; this is the same formula written out."""

    def forward(self, x):
        return _norm(self, x)


def _norm_with(**bug):
    return lambda module, x: _norm(module, x, **bug)


def _by_moments(var):
    """LayerNorm whose variance is var(x), E[x^2] - E[x]^2 written one way or another."""
    return lambda m, x: (x - x.mean(-1, keepdim=True)) / torch.sqrt(var(x) + m.eps) * m.weight + m.bias


NORM_MISTAKES = (
    Mistake(
        "builtin", "Built-in layer norm called",
        "you called torch.nn.LayerNorm or F.layer_norm; the exercise is to write "
        "(x - mean) / sqrt(var + eps) * weight + bias yourself.",
        uses=("layer_norm",),
    ),
    Mistake(
        "no_keepdim", "keepdim=True missing",
        "x.mean(-1) drops the last axis, so it no longer lines up with x: keep it, "
        "x.mean(-1, keepdim=True) (the same for the variance).",
        (lambda m, x: (x - x.mean(-1)) / torch.sqrt(x.var(-1, correction=0) + m.eps) * m.weight + m.bias,),
    ),
    Mistake(
        "unbiased", "Unbiased variance",
        "LayerNorm divides by d_model, not d_model - 1: x.var(-1, unbiased=False) (or "
        "correction=0), or the mean of the squared deviations. torch.var is unbiased by default.",
        (_norm_with(correction=1), _norm_with(correction=1, eps="outside")),
    ),
    Mistake(
        "eps_outside", "Epsilon outside the square root",
        "eps goes under the root, sqrt(var + eps), as in torch.nn.LayerNorm; not sqrt(var) + eps, "
        "nor added after the division.",
        (_norm_with(eps="outside"), _norm_with(eps="after")),
    ),
    Mistake(
        "no_eps", "Epsilon missing (or too small to matter)",
        "divide by sqrt(var + eps) with the module's own eps, self.eps: it keeps the division "
        "safe when a position's features are (nearly) all equal; an eps of your own such as "
        "1e-12 is as good as none.",
        (_norm_with(eps="none"),),
    ),
    Mistake(
        "eps_ignored", "self.eps ignored",
        "use the module's own eps, self.eps (set by __init__), not a number of your own.",
        tuple(_norm_with(eps=e) for e in (1e-5, 1e-6, 1e-8, 1e-12, 1e-9, 1e-7, 1e-3, 1e-4)),
    ),
    Mistake(
        "wrong_axis", "Normalized over the wrong axis",
        "LayerNorm takes the mean and variance of each position's own d_model features: the "
        "last axis (dim=-1, keepdim=True), whatever the number of leading axes.",
        tuple(_norm_with(dim=d) for d in (0, 1, 2, -2, (-2, -1), (0, 1), (0, -1), (1, 2), (0, 1, 2))),
    ),
    Mistake(
        "wrong_power", "Wrong power of (var + eps): {which}",
        "normalize by the standard deviation, the square root of (var + eps), as in the "
        "docstring's formula. {effect}",
        tuple(member(_norm_with(power=p), which=which, effect=effect) for p, which, effect in (
            (1, "no square root at all (divided by the variance itself)",
             "Dividing by the variance leaves the features with a spread of 1 / std, not 1."),
            (2, "squared instead of square-rooted",
             "Dividing by (var + eps) ** 2 leaves the features with a spread of 1 / std ** 3, "
             "not 1."),
            (-0.5, "the reciprocal square root, then divided by it",
             "(var + eps) ** -0.5 (torch.rsqrt) is 1 / std already: multiply by it, or divide by "
             "the root itself."),
            (1.5, "raised to 1.5 instead of 0.5",
             "Dividing by (var + eps) ** 1.5 leaves the features with a spread of 1 / var, not 1."),
        )),
    ),
    Mistake(
        "not_centered", "Mean not subtracted",
        "normalize (x - mean) / sqrt(var + eps): subtract each position's mean first (and take "
        "the variance around it).",
        (lambda module, x: x / torch.sqrt(x.var(-1, keepdim=True, correction=0) + module.eps)
         * module.weight + module.bias,
         _norm_with(center=False)),
    ),
    Mistake(
        "variance_not_centered", "Variance not centered",
        "the variance is the mean of the squared deviations from the mean, ((x - mean) ** 2)"
        ".mean(-1); the mean of x ** 2 is not (unless the mean is 0).",
        (lambda m, x: (x - x.mean(-1, keepdim=True)) / torch.sqrt((x * x).mean(-1, keepdim=True) + m.eps)
         * m.weight + m.bias,),
    ),
    Mistake(
        "cancellation", "Variance as E[x^2] - E[x]^2: catastrophic cancellation",
        "E[x^2] - E[x]^2 is the variance in exact arithmetic, but where a position's mean is "
        "large against its spread both terms are about mean^2, and float32 keeps 7 digits "
        "(float64 16): their difference, the small variance, loses them all (and can come out negative). "
        "Subtract the mean first, then square: ((x - mean) ** 2).mean(-1).",
        tuple(_by_moments(var) for var in (
            lambda x: (x * x).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2,
            lambda x: ((x * x).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2).clamp(min=0),
            lambda x: (x * x).sum(-1, keepdim=True) / x.size(-1)
            - (x.sum(-1, keepdim=True) / x.size(-1)) ** 2)),
    ),
    Mistake(
        "l2_normalized", "Divided by the L2 norm instead of standardized",
        "LayerNorm subtracts each position's mean and divides by its standard deviation, "
        "(x - mean) / sqrt(var + eps); x / ||x|| (F.normalize) is another normalization.",
        (lambda m, x: F.normalize(x, dim=-1, eps=m.eps) * m.weight + m.bias,
         lambda m, x: F.normalize(x - x.mean(-1, keepdim=True), dim=-1, eps=m.eps) * m.weight + m.bias),
    ),
    Mistake(
        "gain_bias_swapped", "Gain and bias swapped",
        "self.weight (gamma, starts at 1) multiplies, self.bias (beta, starts at 0) is added: "
        "weight * x_hat + bias.",
        (_norm_with(affine="swapped"),),
    ),
    Mistake(
        "bias_before_gain", "Bias added before the gain",
        "scale first, then shift: weight * x_hat + bias, not (x_hat + bias) * weight.",
        (_norm_with(affine="bias_first"),),
    ),
    Mistake(
        "no_affine", "Gain or bias missing",
        "after normalizing, scale by the learned gain self.weight and shift by the learned bias "
        "self.bias (they start at 1 and 0, so the mistake only shows once they are trained).",
        tuple(_norm_with(affine=a) for a in ("b", "w", "")),
    ),
    Mistake(
        "affine_before_norm", "Gain and bias applied to x before normalizing{how}",
        "normalizing takes each position's mean and spread away, and with them what was done to "
        "x before (the bias entirely, the gain in part): scale and shift the normalized x, "
        "weight * (x - mean) / sqrt(var + eps) + bias.",
        (member(lambda m, x: _norm(m, x * m.weight + m.bias, affine=""), how=""),
         member(lambda m, x: _norm(m, x * m.weight, affine="b"), how=" (the gain; the bias after)"),
         member(lambda m, x: _norm(m, x * m.weight + m.bias), how=", and again after")),
    ),
)


def _norm_case(seed, shape, scale, dtype=torch.float32, eps=None, mean=0.5):
    g = torch.Generator().manual_seed(seed)
    x = scale * _randn(g, *shape, dtype=dtype) + mean
    d_model = shape[-1]
    state = {"weight": 1 + _randn(g, d_model, dtype=dtype), "bias": _randn(g, d_model, dtype=dtype)}
    label = describe(x=x) + f", {x.dtype}, d_model={d_model}" + (f", eps={eps}" if eps else "")
    return Case((x,), names=("x",), label=label, init=(d_model,) + ((eps,) if eps else ()),
                state=state, dtype=dtype, seed=seed)


# The second hints (check(..., hint=2)), by mistake, for each item (sections: the item's).
_EVAL = "call module.eval() and run it twice on the same x: the outputs must be equal."
_NORM_LADDER = {
    "affine_before_norm": (None, "set self.bias to 5 and print one output row: it must be 5 "
                           "more than with a bias of 0."),
    "builtin": (None, "write the mean, the variance and the division yourself, with "
                "x.mean(...) and torch operations."),
    "no_keepdim": (None, "print x.mean(-1).shape next to x.shape: can they be subtracted "
                   "position by position?"),
    "unbiased": (None, "compare x.var(-1) with ((x - mean) ** 2).mean(-1) for one row: which "
                 "one is torch.nn.LayerNorm's?"),
    "eps_outside": (None, "write your denominator as a formula: is eps inside or outside the "
                    "square root?"),
    "no_eps": (None, "run your norm on a row of equal numbers: what does 0 / 0 give?"),
    "eps_ignored": (None, "build the module with eps=0.5 and print self.eps: is that the eps "
                    "your forward uses?"),
    "wrong_axis": (None, "on a (batch, seq, d_model) x, print your mean's shape: it must be "
                   "(batch, seq, 1), one mean per position."),
    "wrong_power": (None, "print the std of one normalized row before the gain: it must be "
                    "about 1. Which power of (var + eps) is the standard deviation?"),
    "not_centered": (None, "print the mean of one normalized row before the gain: it must be "
                     "about 0."),
    "variance_not_centered": (None, "for the row [1., 2., 3.] the variance is 2/3: print "
                              "yours."),
    "cancellation": (None, "on a row x = 1000 + torch.randn(16) print (x * x).mean() - "
                     "x.mean() ** 2 next to ((x - x.mean()) ** 2).mean(): which is the "
                     "variance, about 1?"),
    "l2_normalized": (None, "print the mean and std of one normalized row before the gain: 0 "
                      "and 1, not a norm of 1."),
    "gain_bias_swapped": (None, "set self.weight to 2 and self.bias to 0 and print one output "
                          "row: it should be twice the normalized row."),
    "bias_before_gain": (None, "set self.weight to 2 and self.bias to 1: the output should be "
                         "2 * x_hat + 1; print yours."),
    "no_affine": (None, "set self.weight to 2 and print one output row: does it change?"),
}
_FFN_LADDER = {
    "activation_last": (None, "feed an x that makes linear2's output negative: your output "
                        "should be able to show it."),
    "activation_first": (None, "print the shape of the tensor your activation receives: "
                         "(..., d_ff), linear1's output, not (..., d_model)."),
    "no_activation": (None, "print (linear1(x) < 0).sum(): after the activation, what "
                      "becomes of those entries?"),
    "activation_ignored": (None, "print self.activation: the layer was built with it; does "
                           "your forward call it?"),
    "gelu_approximated": (None, "print F.gelu(torch.tensor(1.0)) and your activation of 1.0: "
                          "equal to 7 digits?"),
    "bias_dropped": (None, "print self.linear1.bias: your forward must use it too."),
    "layers_misapplied": (None, "print self.linear1 and self.linear2: which maps d_model to "
                          "d_ff, and which comes first?"),
    "python_max": (None, "print max(0, torch.tensor([-1., 2.])): Python compares whole "
                   "objects, not entries."),
    "residual_inside": (None, "feed x = 0 with zero biases: the FFN alone must give 0."),
    "dropout_missing": (None, "in training mode with dropout=0.5, print how many hidden units "
                        "are 0 before linear2."),
    "dropout_misplaced": (None, "write your forward as one expression: which function does "
                          "self.dropout wrap?"),
    "dropout_in_eval": (None, _EVAL),
}
_SUBLAYER_LADDER = {
    "sandwich": (None, "with norm_first=True count the norm calls of your forward: one, on x."),
    "no_residual": (None, "pass a sublayer that returns zeros: the output must still depend "
                    "on x."),
    "norm_misplaced": (None, "write both branches as formulas, and for each one mark where "
                       "self.norm is applied: once, and on which side of the sum?"),
    "normalized_twice": (None, "in pre-norm, pass a sublayer that returns zeros: the output "
                         "must be x itself, not LayerNorm(x). Count the calls of self.norm "
                         "in each branch."),
    "residual_normalized": (None, "in pre-norm, pass a sublayer that returns zeros: the output "
                            "must be x itself."),
    "no_norm": (None, "in post-norm, print the mean and std of one output row: 0 and 1 "
                "(before the norm's gain and bias)."),
    "norm_parameters_unused": (None, "set self.norm.weight to 2: does your output change?"),
    "dropout_on_sum": (None, "in training mode with a sublayer that returns zeros, the output "
                       "must be x exactly."),
    "dropout_missing": (None, "in training mode with dropout=0.5, run twice: the outputs "
                        "should differ."),
    "dropout_on_input": (None, "which tensor does self.dropout wrap in your forward: what goes "
                         "into the sublayer, or what comes out?"),
    "dropout_in_eval": (None, _EVAL),
}


NORM = Item(
    EXERCISE, "LayerNorm", _WrittenOut,
    [
        _norm_case(0, (2, 5, 8), 3.0),
        _norm_case(1, (3, 4, 6), 0.003),  # variance ~ 1e-5 ~ eps: where eps matters
        _norm_case(2, (2, 3, 4, 8), 1.0),  # 4-D: the axis must be -1
        _norm_case(3, (4, 6), 2.0, torch.float64),
        _norm_case(4, (2, 3, 6), 0.03, eps=1e-3),  # eps of its own: self.eps matters
        gradient_case(_norm_case(5, (2, 3, 6), 1.0), "x"),
        # positions whose mean (10^5) is 10^5 times their spread: E[x^2] - E[x]^2 cancels
        # (float64, where a right solution's rounding stays below the tolerance)
        _norm_case(6, (2, 3, 16), 1.0, torch.float64, mean=1e5),
    ],
    laddered(NORM_MISTAKES, _NORM_LADDER),
    formula="Compare with weight * (x - mean) / sqrt(var + eps) + bias over the last axis.",
    twins=(_norm_with(),),
    section=("04_feed_forward_and_norm", "2. Layer normalization"),
)


# ---------------------------------------------------------------------------------------
# PositionWiseFeedForward


def _ffn(ffn, x, first=True, second=False, activation=None, drop="hidden", residual=False,
         linear="layer", zeroth=False):
    """linear2(dropout(act(linear1(x)))) with the variations that mistakes make. drop: where
    the dropout goes ("hidden" is right; "eval": there, in eval mode too; "hidden+output":
    twice). linear: "layer", "no_bias" (x @ W.T) or "untransposed" (x @ W + b). zeroth: the
    activation applied to the input x too, before linear1 (`first` says whether it stays
    on the hidden layer)."""
    act = activation or ffn.activation
    x = act(x) if zeroth else x

    def maybe(where, t):
        if drop == "eval" and where == "hidden":
            return _dropout_in_eval(ffn, t)
        return ffn.dropout(t) if where in (drop or "").split("+") else t

    def apply(layer, t):
        if linear == "no_bias":
            return t @ layer.weight.T
        if linear == "untransposed":
            return t @ layer.weight + layer.bias
        return layer(t)

    h = apply(ffn.linear1, maybe("input", x))
    h = maybe("before", h)
    h = act(h) if first else h
    y = apply(ffn.linear2, maybe("hidden", h))
    y = maybe("output", act(y) if second else y)
    return x + y if residual else y


def _ffn_with(**bug):
    return lambda ffn, x: _ffn(ffn, x, **bug)


def _ffn_with_gelu(form):
    """The FFN with GELU computed by `form` (ReLU left as it is)."""
    return lambda ffn, x: _ffn(ffn, x, activation=form if ffn.activation is F.gelu else None)


FFN_MISTAKES = (
    Mistake(
        "activation_last", "Activation after the second linear layer",
        "FFN(x) = linear2(activation(linear1(x))): the activation sits between the two layers "
        "only; the output is not passed through it (it must be able to be negative).",
        (_ffn_with(first=False, second=True), _ffn_with(second=True)),
    ),
    Mistake(
        "activation_first", "Activation applied to the input, before the first linear layer",
        "FFN(x) = linear2(activation(linear1(x))): the activation acts on the hidden layer, "
        "linear1's output (d_ff wide), not on x itself.",
        (_ffn_with(first=False, zeroth=True), _ffn_with(zeroth=True),
         _ffn_with(first=False, second=True, zeroth=True)),
    ),
    Mistake(
        "no_activation", "Activation missing",
        "without a nonlinearity the two linear layers collapse into one: apply self.activation "
        "to the hidden layer, between linear1 and linear2.",
        (_ffn_with(first=False),),
    ),
    Mistake(
        "activation_ignored", "`activation` ignored",
        "with activation='gelu' the hidden layer goes through GELU, with 'relu' through ReLU: "
        "use self.activation, which __init__ set from the argument, not a fixed function (a "
        "ReLU, or GELU, or its tanh approximation, whatever the layer was built with).",
        (_ffn_with(activation=F.relu), _ffn_with(activation=F.gelu),
         _ffn_with(activation=lambda h: F.gelu(h, approximate="tanh")),
         _ffn_with(activation=lambda h: h * torch.sigmoid(1.702 * h))),
    ),
    Mistake(
        "gelu_approximated", "GELU approximated",
        "the exercise's GELU is the exact one, F.gelu: x * Phi(x) with Phi the normal "
        "distribution's CDF. The tanh form (GPT-2's, approximate='tanh') and x * sigmoid(1.702 x) "
        "are approximations: call self.activation.",
        tuple(_ffn_with_gelu(form) for form in (
            lambda h: F.gelu(h, approximate="tanh"), lambda h: h * torch.sigmoid(1.702 * h))),
    ),
    Mistake(
        "bias_dropped", "Biases left out",
        "FFN(x) = max(0, x W_1 + b_1) W_2 + b_2: each nn.Linear adds its bias. Call the layers, "
        "self.linear1(x), rather than multiply by their weights.",
        (_ffn_with(linear="no_bias"),),
    ),
    Mistake(
        "layers_misapplied", "Linear layers misapplied",
        "self.linear1 maps d_model -> d_ff and self.linear2 d_ff -> d_model: call linear1 first, "
        "then linear2, each once, as layers: self.linear1(x), not x @ self.linear1.weight "
        "(nn.Linear stores its weight transposed, (out_features, in_features)).",
        (lambda ffn, x: ffn.linear1(ffn.dropout(ffn.activation(ffn.linear2(x)))),
         lambda ffn, x: ffn.linear1(ffn.dropout(ffn.activation(ffn.linear1(x)))),
         _ffn_with(linear="untransposed")),
    ),
    Mistake(
        "python_max", "Python's max used on a tensor",
        "max(0, h) compares h with 0 as one Python value: for the paper's max(0, .) use "
        "self.activation(h) (or torch.relu(h), h.clamp(min=0)).",
        (lambda ffn, x: ffn.linear2(max(0, ffn.linear1(x))),
         lambda ffn, x: ffn.linear2(max(ffn.linear1(x), 0))),
    ),
    Mistake(
        "residual_inside", "Residual added inside the feed-forward network",
        "FFN(x) is only linear2(activation(linear1(x))): the residual x + ... belongs to the "
        "sublayer around it (SublayerConnection), which adds it once.",
        (_ffn_with(residual=True),),
    ),
    Mistake(
        "dropout_missing", "Dropout not applied",
        "in training the hidden activations go through self.dropout before linear2: "
        "linear2(dropout(activation(linear1(x)))).",
        (_ffn_with(drop=None),),
    ),
    Mistake(
        "dropout_misplaced", "Dropout in the wrong place",
        "dropout goes on the hidden activations, after the activation and before linear2: "
        "linear2(dropout(activation(linear1(x)))).",
        tuple(_ffn_with(drop=d) for d in ("input", "before", "output", "hidden+output")),
    ),
    Mistake("dropout_in_eval", "Dropout applied in eval mode", DROPOUT_IN_EVAL_HINT,
            (_ffn_with(drop="eval"),)),
)


def _ffn_case(seed, shape, d_ff, activation, dropout=0.0, train=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = _randn(g, *shape, dtype=dtype)
    d_model = shape[-1]
    label = describe(x=x) + f", d_model={d_model}, d_ff={d_ff}, activation={activation!r}"
    if dropout:
        label += f", dropout={dropout} in {'training' if train else 'eval'} mode"
    if dtype != torch.float32:
        label += f", {dtype}"
    return Case((x,), names=("x",), label=label, init=(d_model, d_ff, dropout, activation),
                train=train, seed=seed, dtype=None if dtype == torch.float32 else dtype)


FFN = Item(
    EXERCISE, "PositionWiseFeedForward", PositionWiseFeedForward,
    [
        _ffn_case(0, (2, 5, 6), 10, "relu"),
        _ffn_case(1, (3, 4, 6), 12, "gelu"),
        _ffn_case(2, (7, 4), 9, "relu"),  # (..., d_model): any leading axes
        _ffn_case(3, (2, 3, 6), 10, "relu", dropout=0.5, train=True),
        _ffn_case(4, (2, 3, 6), 10, "relu", dropout=0.5),
        # dropout before or after ReLU is the same (ReLU commutes with scaling by 1/(1-p)), not
        # before or after GELU
        _ffn_case(5, (2, 3, 6), 10, "gelu", dropout=0.5, train=True),
        # float64: GELU's approximations differ from it by 10,000 times the tolerance
        _ffn_case(6, (2, 3, 6), 10, "gelu", dtype=torch.float64),
    ],
    laddered(FFN_MISTAKES, _FFN_LADDER),
    formula="Compare with linear2(dropout(activation(linear1(x)))).",
    twins=(_ffn_with(),),
    section=("04_feed_forward_and_norm", "1. The position-wise feed-forward network"),
)


# ---------------------------------------------------------------------------------------
# SublayerConnection


def _sublayer(module, x, sub, norm_first=None, order="right", drop="sublayer", use_norm=True):
    """The residual sublayer with the variations that mistakes make. order: "right",
    "flipped" (pre-norm and post-norm swapped), "normalized" (residual from norm(x)),
    "norm_sum" (norm(x) + sub(x)), "both" (normalized before and after), "sandwich" (x +
    norm(sub(norm(x))), one norm on each side of the sublayer), "none" (no residual)."""
    first = module.norm_first if norm_first is None else norm_first
    if order == "flipped":
        first = not first
    norm = {True: module.norm, False: lambda t: t,
            "plain": lambda t: F.layer_norm(t, t.shape[-1:], eps=module.norm.eps)}[use_norm]

    def dropped(t, where):
        if drop == "eval" and where == "sublayer":
            return _dropout_in_eval(module, t)
        return module.dropout(t) if drop == where else t

    if order == "norm_sum":
        return norm(x) + dropped(sub(x), "sublayer")
    if order == "norm_branch":  # the norm on the sublayer's branch: x + norm(dropout(sublayer(x)))
        return x + norm(dropped(sub(x), "sublayer"))
    if order == "norm_output":  # x + dropout(norm(sublayer(x)))
        return x + dropped(norm(sub(x)), "sublayer")
    if order == "both":
        return norm(x + dropped(sub(norm(x)), "sublayer"))
    if order == "sandwich":  # pre-norm whose sublayer's output is normalized too
        return x + dropped(norm(sub(norm(x))), "sublayer")
    if first:
        h = norm(x)
        base = {"right": x, "flipped": x, "normalized": h, "none": 0}[order]
        return dropped(base + dropped(sub(dropped(h, "input")), "sublayer"), "sum")
    base = 0 if order == "none" else x
    return norm(dropped(base + dropped(sub(dropped(x, "input")), "sublayer"), "sum"))


def _sub_with(norm_first_only=None, **bug):
    """The mistake's computation; with norm_first_only=True (False), made only in pre-norm
    (post-norm), the other mode right."""

    def compute(module, x, sub):
        if norm_first_only is not None and module.norm_first != norm_first_only:
            return _sublayer(module, x, sub)
        return _sublayer(module, x, sub, **bug)

    return compute


def _residual_dropped(residual_first):
    """Dropout(x) + Dropout(Sublayer(...)), the residual's dropout drawn first or second."""

    def compute(module, x, sub):
        h = module.norm(x) if module.norm_first else x
        if residual_first:
            r = module.dropout(x)
            y = r + module.dropout(sub(h))
        else:
            y = module.dropout(sub(h))
            y = module.dropout(x) + y
        return y if module.norm_first else module.norm(y)

    return compute


SUBLAYER_MISTAKES = (
    Mistake(
        "sandwich", "Sublayer's output normalized too: a sandwich norm",
        "pre-norm normalizes the sublayer's INPUT only: x + Dropout(Sublayer(LayerNorm(x))). "
        "Normalizing its output as well (CogView's Sandwich-LN, Gemma 2's post-sublayer norms) "
        "is another architecture, with a second norm this module does not have.",
        (_sub_with(norm_first_only=True, order="sandwich"),),
    ),
    Mistake(
        "no_residual", "Residual missing",
        "add the input back: the sublayer's output is x + Sublayer(...), so the input (and its "
        "gradient) always has a direct path through the layer.",
        (_sub_with(order="none"), _sub_with(order="none", use_norm=False)),
    ),
    Mistake(  # before norm_misplaced: a norm on both sides is not a norm on the wrong one
        "normalized_twice", "Normalized twice: before the sublayer and after the sum",
        "each mode applies self.norm once: post-norm (norm_first=False) normalizes the sum only, "
        "pre-norm (norm_first=True) the sublayer's input only, and returns the sum as it is.",
        (_sub_with(norm_first_only=True, order="both"), _sub_with(order="both"),
         _sub_with(norm_first_only=False, order="both")),
    ),
    Mistake(
        "norm_misplaced", "Norm on the wrong side of the residual (pre- and post-norm mixed up)",
        "post-norm (norm_first=False, the paper): LayerNorm(x + Sublayer(x)); pre-norm "
        "(norm_first=True): x + Sublayer(LayerNorm(x)), the input itself is not normalized.",
        (_sub_with(order="flipped"), _sub_with(order="norm_sum"),
         _sub_with(norm_first=True), _sub_with(norm_first=False),
         *(_sub_with(norm_first_only=mode, order=order) for mode in (True, False)
           for order in ("norm_sum", "norm_branch", "norm_output"))),
    ),
    Mistake(
        "residual_normalized", "Residual taken from the normalized input",
        "in pre-norm the residual adds the raw input x, not LayerNorm(x): x + Sublayer(LayerNorm(x)).",
        (_sub_with(order="normalized"),),
    ),
    Mistake(
        "no_norm", "LayerNorm missing",
        "apply self.norm: LayerNorm(x + Sublayer(x)) in post-norm, x + Sublayer(LayerNorm(x)) "
        "in pre-norm.",
        (_sub_with(use_norm=False),),
    ),
    Mistake(
        "norm_parameters_unused", "self.norm's gain and bias not used",
        "normalize with self.norm, the module's own LayerNorm: its learned gain and bias are part "
        "of the sublayer (a LayerNorm made in forward, or F.layer_norm without them, leaves them out).",
        (_sub_with(use_norm="plain"),),
    ),
    Mistake(
        "dropout_on_sum", "Dropout applied to the residual too",
        "dropout goes on the sublayer's output only, x + Dropout(Sublayer(...)): the residual "
        "path carries x unchanged.",
        (_sub_with(drop="sum"), _residual_dropped(True), _residual_dropped(False)),
    ),
    Mistake(
        "dropout_missing", "Dropout not applied",
        "in training the sublayer's output goes through self.dropout before it is added to x "
        "(the paper's residual dropout, section 5.4).",
        (_sub_with(drop=None),),
    ),
    Mistake(
        "dropout_on_input", "Dropout on the sublayer's input",
        "dropout goes on the sublayer's output, x + Dropout(Sublayer(...)), not on what goes in.",
        (_sub_with(drop="input"),),
    ),
    Mistake("dropout_in_eval", "Dropout applied in eval mode", DROPOUT_IN_EVAL_HINT,
            (_sub_with(drop="eval"),)),
)


def _sublayer_case(seed, shape, norm_first, dropout=0.0, train=False):
    g = torch.Generator().manual_seed(seed)
    d_model = shape[-1]
    w = _randn(g, d_model, d_model) / d_model**0.5
    x = 2 * _randn(g, *shape) + 1

    def sublayer(h):
        return torch.tanh(h @ w)

    label = describe(x=x) + f", norm_first={norm_first}"
    if dropout:
        label += f", {'training' if train else 'eval mode'} with dropout={dropout}"
    return Case((x, sublayer), names=("x", None), label=label,
                init=(d_model, dropout, norm_first), train=train, seed=seed)


SUBLAYER = Item(
    EXERCISE, "SublayerConnection", SublayerConnection,
    [
        _sublayer_case(0, (2, 5, 8), False),
        _sublayer_case(1, (3, 4, 8), True),
        _sublayer_case(2, (2, 3, 6), False, dropout=0.5, train=True),
        _sublayer_case(3, (2, 3, 6), True, dropout=0.5, train=True),
        _sublayer_case(4, (2, 3, 6), True, dropout=0.5),
    ],
    laddered(SUBLAYER_MISTAKES, _SUBLAYER_LADDER),
    formula="Compare with LayerNorm(x + Dropout(Sublayer(x))) (post-norm) or "
            "x + Dropout(Sublayer(LayerNorm(x))) (pre-norm).",
    twins=(_sub_with(),),
    section=("04_feed_forward_and_norm", "3. The residual sublayer: post-norm or pre-norm?"),
)

ITEMS = (NORM, FFN, SUBLAYER)
