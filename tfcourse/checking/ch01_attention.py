"""Checks for exercise 01: scaled dot-product attention, and its catalogue of mistakes."""

import math

import torch

from ..attention import scaled_dot_product_attention as reference
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

NAME = "scaled_dot_product_attention"


def _attend(scores, value, mask=None, masked=float("-inf"), after=False, dim=-1):
    """softmax(scores) @ value with the variations that mistakes make."""
    if mask is not None and not after:
        scores = scores.masked_fill(~mask, masked)
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and after:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


def _scores(q, k, scale):
    return q @ k.transpose(-2, -1) / scale


def _sqrt_dk(q):
    return math.sqrt(q.size(-1))


BUILTIN = Mistake(
    "Built-in attention called",
    "you called torch.nn.functional.scaled_dot_product_attention; the exercise is to write "
    "softmax(Q K^T / sqrt(d_k)) V yourself with @ (matmul) and torch.softmax.",
)
IN_PLACE = Mistake(
    "Input modified in place",
    "your function changed the caller's {names}. Use out-of-place operations "
    "(x = x / s, not x /= s; masked_fill, not masked_fill_).",
)
WRONG_ORDER = Mistake(
    "Output and weights returned in the wrong order",
    "return `output, weights`: the attended values first, the attention weights second.",
    (lambda q, k, v, m=None: reference(q, k, v, m)[::-1],),
)
MISTAKES = (
    Mistake(
        "Scores not scaled",
        "divide Q K^T by sqrt(d_k) before the softmax; without it large d_k saturates the softmax.",
        (lambda q, k, v, m=None: _attend(_scores(q, k, 1.0), v, m),),
    ),
    Mistake(
        "Scaled by d_k instead of sqrt(d_k)",
        "the dot product of two random d_k-vectors has variance d_k, so its standard deviation "
        "is sqrt(d_k): that is what to divide by.",
        (lambda q, k, v, m=None: _attend(_scores(q, k, q.size(-1)), v, m),),
    ),
    Mistake(
        "Scaled by sqrt(d_v) instead of sqrt(d_k)",
        "the scale comes from the width of the vectors being multiplied in Q K^T (queries and "
        "keys), not from the values.",
        (lambda q, k, v, m=None: _attend(_scores(q, k, math.sqrt(v.size(-1))), v, m),),
    ),
    Mistake(
        "Scores multiplied by sqrt(d_k) instead of divided",
        "scaling should make the scores smaller, not larger.",
        (lambda q, k, v, m=None: _attend(_scores(q, k, 1 / _sqrt_dk(q)), v, m),),
    ),
    Mistake(
        "Softmax over the wrong axis",
        "each query's weights must sum to 1 over the keys: the last axis of the scores (dim=-1).",
        tuple(
            (lambda q, k, v, m=None, d=d: _attend(_scores(q, k, _sqrt_dk(q)), v, m, dim=d))
            for d in (-2, -3, -4, 0, 1)
        ),
    ),
    Mistake(
        "Mask polarity inverted",
        "here True means 'may attend' (as in F.scaled_dot_product_attention); you blocked the "
        "keys that are allowed and let through the masked ones.",
        (lambda q, k, v, m=None: reference(q, k, v, ~m),),
    ),
    Mistake(
        "Mask applied after the softmax",
        "zeroing weights after the softmax leaves rows that no longer sum to 1. Fill the masked "
        "scores before the softmax so the remaining keys share all the weight.",
        (lambda q, k, v, m=None: _attend(_scores(q, k, _sqrt_dk(q)), v, m, after=True),),
    ),
    Mistake(
        "Masked scores set to 0 instead of -inf",
        "exp(0) = 1, so masked keys still get weight. Fill masked scores with -inf (or a very "
        "negative number) so that exp() makes them 0.",
        (lambda q, k, v, m=None: _attend(_scores(q, k, _sqrt_dk(q)), v, m, masked=0.0),),
    ),
    Mistake(
        "Mask ignored",
        "your weights are the same as with no mask: use `mask` to block the keys where it is False.",
        (lambda q, k, v, m=None: reference(q, k, v),),
    ),
)
WRONG_AXES = Mistake(
    "Key transposed on the wrong axes",
    "your code works for 3-D inputs (batch, seq, d_k) but not for 4-D (batch, heads, seq, d_k). "
    "Transpose the last two axes, whatever the rank: key.transpose(-2, -1).",
    (lambda q, k, v, m=None: _attend(q @ k.transpose(1, 2) / _sqrt_dk(q), v, m),),
)
FULLY_MASKED = Mistake(
    "Fully masked query row not handled",
    "when every key of a query is masked, softmax over all -inf is 0/0 = NaN (or uniform with a "
    "finite fill). Such a query attends to nothing: make its weights (and so its output) 0.",
)
NO_GRADIENT = Mistake(
    "No gradient flows back to the inputs",
    "training needs gradients through attention: stay in torch (no .detach(), .item(), "
    ".numpy(), torch.no_grad() or new tensors built from values).",
)


def _case(seed, batch, q_len, k_len, d_k, d_v, mask=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, q_len, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, k_len, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, k_len, d_v, generator=g, dtype=dtype)
    return q, k, v, mask


def _lengths_mask(lengths, k_len):
    """(batch, 1, k_len): keys beyond each sequence's length are padding."""
    return (torch.arange(k_len) < torch.tensor(lengths)[:, None])[:, None, :]


def _offset_causal(q_len, k_len, offset):
    """(q_len, k_len): query i may see keys j <= i + offset (every row mixes True and False)."""
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(offset)


# Every row of every partial mask has both allowed and blocked keys, so each mask mistake
# computes something different from the reference. Fully masked rows come last.
CASES = [
    _case(0, (2,), 5, 7, 8, 6),
    _case(1, (2, 3), 5, 7, 8, 6),
    _case(2, (2, 4), 5, 4, 4, 6),  # heads == k_len == d_k: the 3-D-only transpose runs, wrongly
    _case(3, (2,), 5, 7, 16, 6, mask=_lengths_mask([4, 6], 7)),
    _case(4, (2, 3), 5, 7, 8, 6, mask=_offset_causal(5, 7, 1)),
    _case(5, (3,), 1, 1, 3, 2, dtype=torch.float64),
    _case(6, (2, 2), 3, 5, 4, 6, mask=_lengths_mask([0, 3], 5)[:, None]),  # batch 0: all padding
]


def _same(actual, predicted):
    return (
        isinstance(actual, (tuple, list))
        and len(actual) == 2
        and close(actual[0], predicted[0])
        and close(actual[1], predicted[1])
    )


@checks(NAME)
def check_scaled_dot_product_attention(fn):
    """Compare `fn` with the reference on CASES; name the mistake when one matches."""
    passed_3d = False
    for q, k, v, mask in CASES:
        inputs = describe(query=q, key=k, value=v, mask=mask)
        args = (q, k, v) if mask is None else (q, k, v, mask)
        given = [a.clone() for a in args]  # the learner may change these; CASES stay intact
        outcome = call(fn, *given)
        if "scaled_dot_product_attention" in outcome.torch_calls:
            BUILTIN.fail()
        if outcome.error is not None and q.dim() == 4 and passed_3d:
            if not isinstance(outcome.error, NotImplementedError):
                WRONG_AXES.fail(f"  on {inputs} it raised {type(outcome.error).__name__}")
        fail_on_error(outcome, NAME, inputs)
        changed = [n for n, a, b in zip(("query", "key", "value", "mask"), given, args)
                   if not torch.equal(a, b)]
        if changed:
            raise CheckFailure(f"{IN_PLACE.title}: {IN_PLACE.hint.format(names=' and '.join(changed))}")
        expected = reference(*args)
        result = outcome.value
        if _same(result, expected):
            passed_3d |= q.dim() == 3
            continue
        if _same(result, WRONG_ORDER.computes[0](*args)):
            WRONG_ORDER.fail(f"  on {inputs}")
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            kind = type(result).__name__ if result is not None else "None"
            raise CheckFailure(
                f"{NAME} should return a tuple (output, weights), got {kind} on {inputs}"
                + ("\n  did you forget `return output, weights`?" if result is None else "")
            )
        for value, want, what in zip(result, expected, ("output", "weights")):
            problem = tensor_problem(value, want, what, dtype_from="the inputs' dtype")
            if problem:
                raise CheckFailure(f"Wrong {what}: {problem} on {inputs}")
        mistake = first_match(MISTAKES, result, *args, same=_same)
        if mistake is None and q.dim() == 4 and passed_3d:
            mistake = first_match((WRONG_AXES,), result, *args, same=_same)
        if mistake is None and mask is not None and not mask.all(-1).all():
            empty = ~mask.any(-1, keepdim=True).expand_as(expected[1])  # fully masked rows
            if empty.any() and close(result[1].masked_fill(empty, 0), expected[1]):
                mistake = FULLY_MASKED
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        what = "weights" if not close(result[1], expected[1]) else "output"
        got, want = (result[1], expected[1]) if what == "weights" else (result[0], expected[0])
        raise CheckFailure(
            f"Wrong {what} on {inputs}, and no common mistake matches: {difference(got, want)}. "
            "Compare each step with softmax(Q K^T / sqrt(d_k)) V."
        )
    _check_gradient(fn)


def _check_gradient(fn):
    q, k, v, _ = _case(7, (2,), 3, 4, 5, 2, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    outcome = call(lambda *a: fn(*a)[0].sum().backward(), *leaves)
    if outcome.error is not None and not isinstance(outcome.error, RuntimeError):
        fail_on_error(outcome, NAME, describe(query=q, key=k, value=v))
    reference(*(expected := [t.clone().requires_grad_() for t in (q, k, v)]))[0].sum().backward()
    if outcome.error is not None or not all(
        a.grad is not None and close(a.grad, b.grad) for a, b in zip(leaves, expected)
    ):
        NO_GRADIENT.fail()
