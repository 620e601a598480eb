"""Checks for exercise 04: layer normalization, the feed-forward network and the residual
sublayer, and their catalogue of mistakes.

The stubs give each class's __init__, so the checks can copy the reference's parameters
into the learner's module (load_state_dict) and compare forward passes exactly.
"""

import torch
from torch.nn import functional as F

from ..feed_forward import PositionWiseFeedForward
from ..normalization import LayerNorm, SublayerConnection
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


def _module(cls, args, state):
    """The learner's cls(*args) holding the reference's parameters `state`, in eval mode.
    Built under a fixed seed, and the caller's random state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = cls(*args)
    module.to(next(iter(state.values())).dtype).load_state_dict(state)
    return module.eval()


def _compare(name, cls, args, state, inputs, forward_args, expected, mistakes, mistake_args,
             seed=None):
    """Run the learner's module on `forward_args` (clones); fail naming a mistake, or return.

    With `seed`, the module runs in training mode after torch.manual_seed(seed) (dropout)."""
    made = call(_module, cls, args, state)
    fail_on_error(made, f"{name}.__init__", ", ".join(map(repr, args)))
    module = made.value
    given = [a.clone() if isinstance(a, torch.Tensor) else a for a in forward_args]
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            module.train()
            torch.manual_seed(seed)
        outcome = call(module, *given)
    fail_on_error(outcome, f"{name}.forward", inputs)
    if any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(given, forward_args)):
        raise CheckFailure(
            f"Input modified in place: {name}.forward changed the caller's x. Use out-of-place "
            "operations (x = x - mean, not x -= mean)."
        )
    problem = tensor_problem(outcome.value, expected, "the output")
    if problem:
        raise CheckFailure(f"Wrong output: {problem} on {inputs}")
    if close(outcome.value, expected):
        return outcome
    mistake = first_match(mistakes, outcome.value, *mistake_args, same=close)
    if mistake is not None:
        mistake.fail(f"  on {inputs}")
    raise CheckFailure(
        f"Wrong output on {inputs}, and no common mistake matches: "
        f"{difference(outcome.value, expected)}."
    )


def _randn(g, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g, dtype=dtype)


# ---------------------------------------------------------------------------------------
# LayerNorm


def _norm(x, weight, bias, eps, dim=-1, correction=0, eps_inside=True, affine=(True, True)):
    """Layer normalization with the variations that mistakes make."""
    mean = x.mean(dim, keepdim=True)
    var = x.var(dim, keepdim=True, correction=correction)
    std = torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps
    y = (x - mean) / std
    return y * (weight if affine[0] else 1) + (bias if affine[1] else 0)


NORM_BUILTIN = Mistake(
    "Built-in layer norm called",
    "you called torch.nn.LayerNorm or F.layer_norm; the exercise is to write "
    "(x - mean) / sqrt(var + eps) * weight + bias yourself.",
)
NORM_MISTAKES = (
    Mistake(
        "Unbiased variance",
        "LayerNorm divides by d_model, not d_model - 1: x.var(-1, unbiased=False) (or "
        "correction=0), or the mean of the squared deviations. torch.var is unbiased by default.",
        (lambda x, w, b, eps: _norm(x, w, b, eps, correction=1),),
    ),
    Mistake(
        "Epsilon outside the square root",
        "eps goes under the root, sqrt(var + eps), as in torch.nn.LayerNorm; not sqrt(var) + eps.",
        (lambda x, w, b, eps: _norm(x, w, b, eps, eps_inside=False),),
    ),
    Mistake(
        "Epsilon missing",
        "divide by sqrt(var + eps): eps (self.eps) keeps the division safe when a position's "
        "features are (nearly) all equal.",
        (lambda x, w, b, eps: _norm(x, w, b, 0.0),),
    ),
    Mistake(
        "Normalized over the wrong axis",
        "LayerNorm takes the mean and variance of each position's own d_model features: the "
        "last axis (dim=-1, keepdim=True), whatever the number of leading axes.",
        tuple(
            (lambda x, w, b, eps, d=d: _norm(x, w, b, eps, dim=d))
            for d in (0, 1, -2, (-2, -1), (0, 1), (0, -1), (1, 2), (0, 1, 2))
        ),
    ),
    Mistake(
        "Gain or bias missing",
        "after normalizing, scale by the learned gain self.weight and shift by the learned bias "
        "self.bias (they start at 1 and 0, so the mistake only shows once they are trained).",
        tuple(
            (lambda x, w, b, eps, a=a: _norm(x, w, b, eps, affine=a))
            for a in ((False, True), (True, False), (False, False))
        ),
    ),
)


def _norm_case(seed, shape, scale, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = scale * _randn(g, *shape, dtype=dtype) + 0.5
    d_model = shape[-1]
    state = {"weight": 1 + _randn(g, d_model, dtype=dtype), "bias": _randn(g, d_model, dtype=dtype)}
    return x, state


NORM_CASES = [
    _norm_case(0, (2, 5, 8), 3.0),
    _norm_case(1, (3, 4, 6), 0.003),  # variance ~ 1e-5 ~ eps: where eps matters
    _norm_case(2, (2, 3, 4, 8), 1.0),  # 4-D: the axis must be -1
    _norm_case(3, (4, 6), 2.0, torch.float64),
]


@checks("LayerNorm")
def check_layer_norm(cls):
    for x, state in NORM_CASES:
        d_model = x.size(-1)
        reference = LayerNorm(d_model).to(x.dtype)
        reference.load_state_dict(state)
        inputs = describe(x=x) + f", {x.dtype}, d_model={d_model}"
        with torch.no_grad():
            expected = reference(x)
        params = (reference.weight.detach(), reference.bias.detach(), reference.eps)
        outcome = _compare("LayerNorm", cls, (d_model,), state, inputs, (x,), expected,
                           NORM_MISTAKES, (x, *params))
        if "layer_norm" in outcome.torch_calls:
            NORM_BUILTIN.fail()


# ---------------------------------------------------------------------------------------
# PositionWiseFeedForward


def _ffn(x, ffn, first=True, second=False, activation=None):
    """linear2(act(linear1(x))) with the variations that mistakes make."""
    act = activation or ffn.activation
    h = ffn.linear1(x)
    h = act(h) if first else h
    y = ffn.linear2(h)
    return act(y) if second else y


FFN_MISTAKES = (
    Mistake(
        "Activation after the second linear layer",
        "FFN(x) = linear2(activation(linear1(x))): the activation sits between the two layers "
        "only; the output is not passed through it (it must be able to be negative).",
        (
            lambda x, ffn: _ffn(x, ffn, first=False, second=True),
            lambda x, ffn: _ffn(x, ffn, second=True),
        ),
    ),
    Mistake(
        "Activation missing",
        "without a nonlinearity the two linear layers collapse into one: apply self.activation "
        "to the hidden layer, between linear1 and linear2.",
        (lambda x, ffn: _ffn(x, ffn, first=False),),
    ),
    Mistake(
        "`activation` ignored",
        "with activation='gelu' the hidden layer goes through GELU: use self.activation, which "
        "__init__ set from the argument, not a fixed ReLU.",
        (lambda x, ffn: _ffn(x, ffn, activation=F.relu),),
    ),
)


def _ffn_case(seed, shape, d_ff, activation):
    g = torch.Generator().manual_seed(seed)
    d_model = shape[-1]
    with torch.random.fork_rng(devices=[]):  # importing the checks leaves the seed alone
        reference = PositionWiseFeedForward(d_model, d_ff, activation=activation)
    state = {
        "linear1.weight": _randn(g, d_ff, d_model),
        "linear1.bias": _randn(g, d_ff),
        "linear2.weight": _randn(g, d_model, d_ff) / d_ff**0.5,
        "linear2.bias": _randn(g, d_model),
    }
    reference.load_state_dict(state)
    return _randn(g, *shape), d_ff, activation, reference.eval()


FFN_CASES = [
    _ffn_case(0, (2, 5, 6), 10, "relu"),
    _ffn_case(1, (3, 4, 6), 12, "gelu"),
    _ffn_case(2, (7, 4), 9, "relu"),  # (..., d_model): any leading axes
]


@checks("PositionWiseFeedForward")
def check_position_wise_feed_forward(cls):
    for x, d_ff, activation, reference in FFN_CASES:
        d_model = x.size(-1)
        args = (d_model, d_ff, 0.0, activation)
        inputs = describe(x=x) + f", d_model={d_model}, d_ff={d_ff}, activation={activation!r}"
        with torch.no_grad():
            expected = reference(x)
        _compare("PositionWiseFeedForward", cls, args, reference.state_dict(), inputs, (x,),
                 expected, FFN_MISTAKES, (x, reference))


# ---------------------------------------------------------------------------------------
# SublayerConnection


def _post(x, sub, norm):
    return norm(x + sub(x))


def _pre(x, sub, norm):
    return x + sub(norm(x))


SUBLAYER_MISTAKES = (
    Mistake(
        "Residual missing",
        "add the input back: the sublayer's output is x + Sublayer(...), so the input (and its "
        "gradient) always has a direct path through the layer.",
        (
            lambda x, sub, norm, norm_first: norm(sub(x)),
            lambda x, sub, norm, norm_first: sub(norm(x)),
            lambda x, sub, norm, norm_first: sub(x),
        ),
    ),
    Mistake(
        "Norm on the wrong side of the residual (pre- and post-norm mixed up)",
        "post-norm (norm_first=False, the paper): LayerNorm(x + Sublayer(x)); pre-norm "
        "(norm_first=True): x + Sublayer(LayerNorm(x)), the input itself is not normalized.",
        (
            lambda x, sub, norm, norm_first: (_post if norm_first else _pre)(x, sub, norm),
            lambda x, sub, norm, norm_first: norm(x) + sub(x),
            lambda x, sub, norm, norm_first: norm(x + sub(norm(x))),
        ),
    ),
    Mistake(
        "Residual taken from the normalized input",
        "in pre-norm the residual adds the raw input x, not LayerNorm(x): x + Sublayer(LayerNorm(x)).",
        (lambda x, sub, norm, norm_first: norm(x) + sub(norm(x)),),
    ),
)


def _train_variant(where):
    """The training-mode output when dropout is put `where`: 'sum' (around x + Sublayer)
    or None (left out)."""

    def compute(x, sub, norm, norm_first, seed):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if norm_first:
                y = x + sub(norm(x))
                return y if where is None else F.dropout(y, DROPOUT)
            y = x + sub(x)
            return norm(y if where is None else F.dropout(y, DROPOUT))

    return (compute,)


DROPOUT = 0.5
DROPOUT_MISTAKES = (
    Mistake(
        "Dropout applied to the residual too",
        "dropout goes on the sublayer's output only, x + Dropout(Sublayer(...)): the residual "
        "path carries x unchanged.",
        _train_variant("sum"),
    ),
    Mistake(
        "Dropout not applied",
        "in training the sublayer's output goes through self.dropout before it is added to x "
        "(the paper's residual dropout, section 5.4).",
        _train_variant(None),
    ),
)


def _sublayer_case(seed, shape, norm_first, training=False):
    g = torch.Generator().manual_seed(seed)
    d_model = shape[-1]
    w = _randn(g, d_model, d_model) / d_model**0.5
    state = {"norm.weight": 1 + 0.5 * _randn(g, d_model), "norm.bias": _randn(g, d_model)}
    x = 2 * _randn(g, *shape) + 1
    return x, (lambda h: torch.tanh(h @ w)), norm_first, state, (seed if training else None)


SUBLAYER_CASES = [
    _sublayer_case(0, (2, 5, 8), False),
    _sublayer_case(1, (3, 4, 8), True),
    _sublayer_case(2, (2, 3, 6), False, training=True),
    _sublayer_case(3, (2, 3, 6), True, training=True),
]


@checks("SublayerConnection")
def check_sublayer_connection(cls):
    name = "SublayerConnection"
    for x, sub, norm_first, state, seed in SUBLAYER_CASES:
        d_model = x.size(-1)
        dropout = DROPOUT if seed is not None else 0.0
        args = (d_model, dropout, norm_first)
        reference = SublayerConnection(*args)
        reference.load_state_dict(state)
        inputs = (
            describe(x=x) + f", norm_first={norm_first}"
            + (f", training with dropout={dropout}" if seed is not None else "")
        )
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            if seed is None:
                reference.eval()
            else:
                torch.manual_seed(seed)
            expected = reference(x, sub)
        if seed is None:
            mistakes, mistake_args = SUBLAYER_MISTAKES, (x, sub, reference.norm, norm_first)
        else:
            mistakes, mistake_args = DROPOUT_MISTAKES, (x, sub, reference.norm, norm_first, seed)
        _compare(name, cls, args, state, inputs, (x, sub), expected, mistakes, mistake_args,
                 seed=seed)
