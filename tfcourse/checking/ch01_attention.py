"""Exercise 01: scaled dot-product attention, its cases and its catalogue of mistakes."""

import dataclasses
import functools
import math

import torch

from ..attention import scaled_dot_product_attention as reference
from .mistakes import Mistake, laddered, member
from .pipeline import NO_GRADIENT_MORE, Case, Item

EXERCISE = "ex01_attention"
NAME = "scaled_dot_product_attention"
MIN = torch.finfo(torch.float32).min


def _scale(q, k, v):
    return math.sqrt(q.size(-1))


def _attend(q, k, v, m=None, *, scale=_scale, fill=float("-inf"), after=False, dim=-1,
            normalize=torch.softmax, empty=True, swap=False, mix="weights", give="weights",
            weights_scale=1.0, mix_before_empty=False):
    """softmax(Q K^T / scale) V, with the variations that mistakes make. `scale` and
    `fill` are what the scores are divided by and what masked scores become; `empty`:
    fully masked rows get zero weights, as in the reference (`mix_before_empty`: the output
    is mixed with the weights before those rows are zeroed)."""
    scores = (k @ q.transpose(-2, -1) if swap else q @ k.transpose(-2, -1)) / scale(q, k, v)
    if m is not None and not after:
        scores = scores.masked_fill(~m, fill)
    weights = scores if normalize is None else normalize(scores, dim=dim)
    if m is not None and after:
        weights = weights.masked_fill(~m, 0.0)
    mixed = weights
    if m is not None and empty and not after:
        weights = weights.masked_fill(~m.any(-1, keepdim=True), 0.0)
    weights = weights / weights_scale
    output = (scores if mix == "scores" else mixed if mix_before_empty else weights) @ v
    return output, (scores if give == "scores" else weights)


def _zeroed(q, k, v, m=None, weights_too=True):
    """The scores times the bool mask (masked scores 0, not -inf), and with `weights_too` the
    weights of masked keys zeroed after the softmax (rows no longer summing to 1)."""
    scores = q @ k.transpose(-2, -1) / _scale(q, k, v)
    weights = torch.softmax(scores if m is None else scores * m, dim=-1)
    if m is not None and weights_too:
        weights = weights.masked_fill(~m, 0.0)
    return weights @ v, weights


def _not(mask):
    return None if mask is None else ~mask


def _with(**bug):
    return lambda q, k, v, m=None: _attend(q, k, v, m, **bug)


def _float32_softmax(q, k, v, m=None):
    """softmax(..., dtype=torch.float32): float64 weights meet float64 values and fail."""
    scores = q @ k.transpose(-2, -1) / _scale(q, k, v)
    if m is not None:
        scores = scores.masked_fill(~m, MIN)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    if m is not None:
        weights = weights.masked_fill(~m.any(-1, keepdim=True), 0.0)
    return weights @ v, weights


def _as_3d(case, error):
    """A 4-D case with its (batch, heads) axes flattened into one: what 3-D-only code gets right."""
    q, k, v, *mask = case.args
    if q.dim() != 4:
        return None
    flat = [x.flatten(0, 1) for x in (q, k, v)]
    if mask and mask[0].dim() == 4:
        flat.append(mask[0].expand(*q.shape[:2], *mask[0].shape[2:]).flatten(0, 1))
    elif mask:
        flat.append(mask[0])
    return dataclasses.replace(case, args=tuple(flat))


def _added(q, k, v, m=None):
    """The bool mask added to the scores, as if it were an additive float mask."""
    scores = q @ k.transpose(-2, -1) / _scale(q, k, v)
    if m is not None:
        scores = scores + m
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _dropped(p):
    """F.dropout(weights, p) inside attention: on in every mode."""

    def compute(q, k, v, m=None):
        output, weights = reference(q, k, v, m)
        weights = torch.nn.functional.dropout(weights, p)
        return weights @ v, weights

    return compute


def _raw(scores, q, v, m):
    """Attention from already multiplied scores (the wrong-axes computations)."""
    scores = scores / _scale(q, None, v)
    if m is not None:
        scores = scores.masked_fill(~m, MIN)
    weights = torch.softmax(scores, dim=-1)
    if m is not None:
        weights = weights.masked_fill(~m.any(-1, keepdim=True), 0.0)
    return weights @ v, weights


def _scaled_output(q, k, v, m):
    """The scale applied to the output instead of the scores."""
    output, weights = _attend(q, k, v, m, scale=lambda *a: 1.0)
    return output / _scale(q, k, v), weights


_FROM_THE_FRONT = ("{}'s axis 2, counted from the front: the d_k of a 3-D (batch, seq, d_k) "
                   "input, but the {} of a 4-D (batch, heads, seq, d_k) one")
# (name, what it is, the size) of each size taken for d_k; the first that gives a learner's
# result names it (on 3-D inputs q.size(1) is q_len, and q.size(-3) the batch size).
_WRONG_SIZES = (
    ("q_len", "the number of queries, query's axis -2", lambda q, k: q.size(-2)),
    ("k_len", "the number of keys, key's axis -2", lambda q, k: k.size(-2)),
    ("q_len", _FROM_THE_FRONT.format("query", "q_len"), lambda q, k: q.shape[2]),
    ("k_len", _FROM_THE_FRONT.format("key", "k_len"), lambda q, k: k.shape[2]),
    ("batch", "the batch size, query's axis 0", lambda q, k: q.size(0)),
    ("heads", "the number of heads, axis 1 of 4-D inputs", lambda q, k: q.size(-3)),
)


BUILTIN = Mistake(
    "builtin", "Built-in attention called",
    "you called torch.nn.functional.scaled_dot_product_attention; the exercise is to write "
    "softmax(Q K^T / sqrt(d_k)) V yourself with @ (matmul) and torch.softmax.",
    uses=("scaled_dot_product_attention",),
)
def _additive(q, k, v, m=None, fill=-1e9):
    """An additive mask, scores + (~mask) * fill: a fully masked row keeps its scores' softmax
    (-1e4: Hugging Face BERT's extended attention mask)."""
    scores = q @ k.transpose(-2, -1) / _scale(q, k, v)
    if m is not None:
        scores = scores + (~m).to(scores.dtype) * fill
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _added_fill(fill, dtype=None):
    """An additive mask with a finite value, scores + (~mask) * fill (BERT's extended
    attention mask): fully masked rows zeroed, as in the reference. `dtype`: the mask made in
    that dtype (TensorFlow's (1 - tf.cast(mask, tf.float32)) * -1e9) instead of the scores'."""

    def compute(q, k, v, m=None):
        scores = q @ k.transpose(-2, -1) / _scale(q, k, v)
        if m is None:
            return _attend(q, k, v)
        weights = torch.softmax(scores + (~m).to(dtype or scores.dtype) * fill, dim=-1)
        weights = weights.masked_fill(~m.any(-1, keepdim=True), 0.0)
        return weights @ v, weights

    return compute


def _max_over_masked(q, k, v, m=None):
    """A hand-written softmax, exp(s - max s) * mask / sum, whose max includes the masked
    scores (a sum of 0, a fully masked row, gives weights 0)."""
    scores = q @ k.transpose(-2, -1) / _scale(q, k, v)
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    if m is not None:
        e = e * m
    weights = e / e.sum(-1, keepdim=True).clamp(min=torch.finfo(e.dtype).tiny)
    return weights @ v, weights


def _exp_over_sum(guard, over=None):
    """A hand-written softmax, exp(s) / sum exp(s), with no maximum subtracted: exp of a large
    score is inf, and inf / inf NaN; or, with `over`, stabilised with a maximum taken over more
    than the row: "all" (scores.max(), the whole tensor) or "matrix" (each (q_len, k_len)
    matrix), where a row far below that maximum has every e^(s - max) underflow to 0, and
    0 / 0. Masked scores filled with -inf; `guard`, how fully masked rows (a sum of 0) get
    weights 0: "where" (where the sum is 0), "any" (the rows with no allowed key, zeroed
    afterwards), "multiplied" (exp(s) * mask, no fill), "multiplied_divided" (the same, each
    sum of 0 replaced by 1: inf * 0 stays NaN), "nan_to_num" (every NaN made 0, the overflowed
    ones too)."""

    def compute(q, k, v, m=None):
        scores = q @ k.transpose(-2, -1) / _scale(q, k, v)
        if m is not None and not guard.startswith("multiplied"):
            scores = scores.masked_fill(~m, float("-inf"))
        if over is not None:
            scores = scores - (scores.max() if over == "all" else scores.amax((-2, -1), keepdim=True))
        e = torch.exp(scores)
        if m is not None and guard.startswith("multiplied"):
            e = e * m
        total = e.sum(-1, keepdim=True)
        if guard == "multiplied_divided":
            weights = e / torch.where(total == 0, torch.ones_like(total), total)
        elif guard in ("where", "multiplied"):
            weights = torch.where(total > 0, e / total.clamp(min=torch.finfo(e.dtype).tiny),
                                  torch.zeros_like(e))
        else:
            weights = e / total
            if guard == "nan_to_num":
                weights = weights.nan_to_num(0.0)
            elif m is not None:
                weights = weights.masked_fill(~m.any(-1, keepdim=True), 0.0)
        return weights @ v, weights

    return compute


FULLY_MASKED = Mistake(
    "fully_masked", "Fully masked query row not handled",
    "when every key of a query is masked, softmax over all -inf is 0/0 = NaN (or uniform with a "
    "finite fill). Such a query attends to nothing: make its weights (and so its output) 0.",
    tuple(_with(fill=fill, empty=False) for fill in (float("-inf"), -1e9, MIN))
    + tuple(functools.partial(_additive, fill=fill) for fill in (-1e9, -1e4, -1e5, -65504.0))
    # the weights zeroed, but the output mixed before: such a query outputs the values' mean
    + tuple(_with(fill=fill, mix_before_empty=True) for fill in (-1e9, MIN)),
)
NO_GRADIENT = Mistake(
    "no_gradient", "No gradient flows back to the inputs",
    "training needs gradients through attention: stay in torch (no .detach(), .item(), "
    ".numpy(), torch.no_grad() or new tensors built from values).",
    more=NO_GRADIENT_MORE,
)
MISTAKES = (
    Mistake(
        "fill_not_representable", "Mask fill value not representable in the scores' dtype",
        "the scores have the inputs' dtype, and a fill beyond that dtype's range cannot be "
        "stored: masked_fill raises. float16 reaches only -65504, so a constant such as -1e9 "
        "does not fit in it, and torch.finfo(torch.float32).min fits neither bfloat16 nor "
        "float16. Take the fill from the scores' own dtype, torch.finfo(scores.dtype).min, or "
        "use float('-inf').",
        # any fill beyond the dtype's range raises alike: float32's min names -1e30 in float16
        (_with(fill=MIN), _with(fill=-3.4e38), _with(fill=-1e9)),
    ),
    BUILTIN,
    Mistake(
        "wrong_order", "Output and weights returned in the wrong order",
        "return `output, weights`: the attended values first, the attention weights second.",
        (lambda q, k, v, m=None: reference(q, k, v, m)[::-1],),
    ),
    Mistake(
        "no_scaling", "Scores not scaled",
        "divide Q K^T by sqrt(d_k) before the softmax; without it large d_k saturates the softmax.",
        (_with(scale=lambda q, k, v: 1.0),),
    ),
    Mistake(
        "scaled_by_d_k", "Scaled by d_k instead of sqrt(d_k)",
        "the dot product of two random d_k-vectors has variance d_k, so its standard deviation "
        "is sqrt(d_k): that is what to divide by (once).",
        (_with(scale=lambda q, k, v: q.size(-1)),),
    ),
    Mistake(
        "scaled_by_sqrt_d_v", "Scaled by sqrt(d_v) instead of sqrt(d_k)",
        "the scale comes from the width of the vectors being multiplied in Q K^T (queries and "
        "keys), not from the values.",
        (_with(scale=lambda q, k, v: math.sqrt(v.size(-1))),),
    ),
    Mistake(
        "multiplied", "Scores multiplied by sqrt(d_k) instead of divided",
        "scaling should make the scores smaller, not larger.",
        (_with(scale=lambda q, k, v: 1 / _scale(q, k, v)),),
    ),
    Mistake(
        "scaled_by_wrong_size", "Scaled by sqrt({size}) instead of sqrt(d_k)",
        "you took the square root of {how}. d_k is the width of each query and key vector, "
        "the LAST axis of query (and key), however many axes come before it: not a sequence "
        "length, the batch size or the number of heads.",
        tuple(member(_with(scale=lambda q, k, v, size=size: math.sqrt(size(q, k))), size=name,
                     how=how) for name, how, size in _WRONG_SIZES),
    ),
    Mistake(
        "scaled_after_softmax", "Scaled after the softmax",
        "divide the scores by sqrt(d_k) BEFORE the softmax: after it, the weights no longer "
        "sum to 1 (and the softmax still saturates).",
        (lambda q, k, v, m=None: _attend(q, k, v, m, scale=lambda *a: 1.0,
                                         weights_scale=_scale(q, k, v)),
         lambda q, k, v, m=None: _scaled_output(q, k, v, m)),
    ),
    Mistake(
        "softmax_wrong_axis", "Softmax over the wrong axis",
        "each query's weights must sum to 1 over the keys: the last axis of the scores (dim=-1).",
        # dim=2: the keys of 3-D scores (batch, q_len, k_len), the queries of 4-D ones
        tuple(_with(dim=d) for d in (-2, -3, -4, 0, 1, 2)),
    ),
    Mistake(
        "no_softmax", "Softmax missing",
        "the weights are softmax(scores): positive, summing to 1 over the keys. Without it the "
        "raw scores weigh the values.",
        tuple(_with(normalize=None, fill=fill) for fill in (float("-inf"), -1e9, MIN, 0.0)),
    ),
    Mistake(
        "log_softmax", "log_softmax used instead of softmax",
        "the weights are probabilities, softmax(scores), not their logarithms.",
        (_with(normalize=torch.log_softmax, empty=False), _with(normalize=torch.log_softmax)),
    ),
    Mistake(
        "values_times_scores", "Values combined with the scores instead of the weights",
        "output = weights @ V, with weights = softmax(scores): the softmax's result, not the "
        "scores, weighs the values.",
        (_with(mix="scores"), _with(mix="scores", fill=-1e9), _with(mix="scores", fill=MIN)),
    ),
    Mistake(
        "scores_returned", "Scores returned instead of the weights",
        "return the attention weights, softmax(scores) (each row sums to 1), not the scores.",
        (_with(give="scores"), _with(give="scores", fill=-1e9), _with(give="scores", fill=MIN)),
    ),
    Mistake(
        "key_not_transposed", "Key not transposed",
        "the scores are Q K^T: multiply the queries by the TRANSPOSED keys, "
        "key.transpose(-2, -1), so that each query meets each key over their d_k features.",
        (lambda q, k, v, m=None: _raw(q @ k, q, v, m),
         lambda q, k, v, m=None: _raw(torch.matmul(q, k), q, v, m)),
    ),
    Mistake(
        "torch_sqrt_of_int", "torch.sqrt of a Python number",
        "query.size(-1) is an int, and torch.sqrt takes tensors: use math.sqrt(d_k) (or d_k ** 0.5).",
        (lambda q, k, v, m=None: _raw(q @ k.transpose(-2, -1) * torch.sqrt(q.size(-1)), q, v, m),),
    ),
    Mistake(
        "keys_combined", "Keys combined instead of the values",
        "the output is weights @ V: the weights say how much of each key's VALUE to take.",
        (lambda q, k, v, m=None: (reference(q, k, v, m)[1] @ k, reference(q, k, v, m)[1]),),
    ),
    Mistake(
        "float32", "Computed in float32 whatever the inputs' dtype",
        "keep the inputs' dtype: float64 inputs give float64 weights and output (no "
        "dtype=torch.float32 in the softmax, no .float()).",
        (_float32_softmax,
         lambda q, k, v, m=None: reference(q.float(), k.float(), v.float(), m)),
    ),
    Mistake(
        "dropout", "Dropout in attention",
        "this function has no training mode, so no dropout (the module that calls it applies "
        "dropout to the weights, in training only); and F.dropout drops by default, which makes "
        "the output random.",
        tuple(_dropped(p) for p in (0.1, 0.2, 0.3, 0.5)),
    ),
    Mistake(
        "mask_added", "Mask added to the scores",
        "this mask is bool, True = may attend; adding it adds 1 to the allowed scores and blocks "
        "nothing. Fill the blocked scores instead: scores.masked_fill(~mask, float('-inf')).",
        (_added,),
    ),
    Mistake(
        "mask_axis_added", "Mask given an extra axis",
        "the mask already broadcasts to the scores (..., q_len, k_len): use it as it is. An axis "
        "added for the heads (unsqueeze) makes the weights and the output grow one.",
        (lambda q, k, v, m=None: _attend(q, k, v, None if m is None else m.unsqueeze(1)),),
    ),
    Mistake(
        "mask_inverted", "Mask polarity inverted",
        "here True means 'may attend' (as in F.scaled_dot_product_attention); you blocked the "
        "keys that are allowed and let through the masked ones.",
        (lambda q, k, v, m=None: reference(q, k, v, _not(m)),
         lambda q, k, v, m=None: _attend(q, k, v, _not(m), empty=False, fill=-1e9)),
    ),
    Mistake(
        "mask_after_softmax", "Mask applied after the softmax",
        "zeroing weights after the softmax leaves rows that no longer sum to 1. Fill the masked "
        "scores before the softmax so the remaining keys share all the weight.",
        (_with(after=True),),
    ),
    Mistake(
        "masked_to_zero", "Masked scores set to 0 instead of -inf",
        "exp(0) = 1, so masked keys still get weight. Fill masked scores with -inf (or a very "
        "negative number) so that exp() makes them 0.",
        (_with(fill=0.0), _with(fill=0.0, empty=False), _zeroed),
    ),
    Mistake(
        "fill_not_low_enough", "Masked scores filled with a number real scores can go below",
        "a masked key must lose against every allowed key, however large the scores: on scores "
        "of the order of 10^6 your fill value is no longer the lowest, and masked keys take "
        "the weight. Fill with float('-inf') (or torch.finfo(scores.dtype).min).",
        tuple(_with(fill=fill) for fill in (-1e4, -1e3, -1e2, -1e5, -65504.0, -3e4, -5e4))
        + tuple(_added_fill(fill) for fill in (-1e4, -1e3, -1e5, -65504.0)),
    ),
    Mistake(
        "mask_float32", "Additive mask made in float32 whatever the scores' dtype",
        "(1 - mask.float()) * -1e9, TensorFlow's and Keras's way (tf.cast(mask, tf.float32)), "
        "is float32: added to bfloat16 or float16 scores it makes them float32, and the "
        "weights then meet values of another dtype. Make it in the scores' dtype, "
        "(~mask).to(scores.dtype) * fill, or fill the scores: scores.masked_fill(~mask, "
        "float('-inf')).",
        tuple(_added_fill(fill, torch.float32) for fill in (-1e9, -1e4, -1e30, MIN)),
    ),
    Mistake(
        "max_over_masked", "Softmax's maximum taken over the masked scores too",
        "a softmax written by hand, exp(s - max) with the masked keys zeroed afterwards, takes "
        "its max over every score: when a masked key has the largest score (scores of the "
        "order of 10^6 here), every allowed key's exp underflows to 0. Mask the scores first "
        "(-inf), then subtract the max of what is left, or use torch.softmax.",
        (_max_over_masked,),
    ),
    Mistake(
        "softmax_overflow", "Softmax written without subtracting the row's maximum",
        "exp() of a score above about 88 is inf in float32, and inf / inf is NaN: on scores of "
        "the order of 10^6 a softmax written as exp(s) / exp(s).sum() overflows. softmax(s) = "
        "softmax(s - c) for any c: subtract each row's largest (allowed) score before exp, so "
        "that no exp exceeds 1, or use torch.softmax.",
        tuple(_exp_over_sum(guard) for guard in ("where", "any", "multiplied", "multiplied_divided",
                                                 "nan_to_num")),
    ),
    Mistake(
        "global_max", "Softmax stabilised with the maximum of the whole tensor, not of each row",
        "softmax(s) = softmax(s - c) for a c of each row's own: subtract each row's largest "
        "(allowed) score, amax(-1, keepdim=True). A maximum over every row (scores.max()) lies "
        "far above the scores of some rows when they differ in scale (here of the order of "
        "10^6): there every e^(s - max) underflows to 0 and the row's softmax is 0 / 0.",
        tuple(_exp_over_sum(guard, over) for over in ("all", "matrix")
              for guard in ("any", "nan_to_num", "where")),
    ),
    Mistake(
        "mask_ignored", "Mask ignored",
        "your weights are the same as with no mask: use `mask` to block the keys where it is False.",
        (lambda q, k, v, m=None: reference(q, k, v),),
    ),
    Mistake(
        "query_key_swapped", "Queries and keys swapped",
        "the scores are Q K^T: row i holds query i's dot product with every key, so that the "
        "softmax over a row chooses among the keys. K Q^T is its transpose.",
        (_with(swap=True),),
    ),
    Mistake(
        "wrong_axes", "Key transposed on the wrong axes",
        "key is (..., k_len, d_k) for 3-D inputs (batch, seq, d_k) and 4-D ones (batch, heads, "
        "seq, d_k) alike: transpose its last two axes, whatever the rank: key.transpose(-2, -1).",
        (
            lambda q, k, v, m=None: _raw(q @ k.transpose(1, 2), q, v, m),
            lambda q, k, v, m=None: _raw(q @ k.permute(0, 2, 1), q, v, m),
            lambda q, k, v, m=None: _raw(q @ k.permute(0, 1, 3, 2), q, v, m),  # 4-D only
        ) + tuple(  # any other pair of axes (it raises, or mixes the batch into the scores);
            # (2, 3): right on 4-D inputs only, an IndexError on 3-D ones
            (lambda i, j: lambda q, k, v, m=None: _raw(q @ k.transpose(i, j), q, v, m))(a, b)
            for a, b in ((0, 1), (0, 2), (0, -1), (-3, -1), (-3, -2), (0, -2), (2, 3))),
    ),
    Mistake(
        "three_d_only", "Works only for 3-D inputs",
        "your code works for (batch, seq, d_k) but not for (batch, heads, seq, d_k): torch.bmm, "
        "permute(0, 2, 1) and einsum('bqd,bkd->bqk') take 3-D tensors only. Use @ (matmul) and "
        "key.transpose(-2, -1), which work whatever the number of leading axes.",
        (
            lambda q, k, v, m=None: _raw(torch.bmm(q, k.transpose(1, 2)), q, v, m),
            lambda q, k, v, m=None: _raw(torch.einsum("bqd,bkd->bqk", q, k), q, v, m),
        ),
        probe=_as_3d,
    ),
    FULLY_MASKED,
)

# The second hint (check(..., hint=2)) and the section that teaches the step, by mistake.
_SCALING = ("01_attention", "4. Why divide by $\\sqrt{d_k}$?")
_MASKING = ("01_attention", "5. Masking: who may attend to whom")
_LADDER = {
    "no_scaling": (_SCALING, "print scores.std() for d_k = 8 and for d_k = 512: without the "
                   "division it grows like sqrt(d_k), and the softmax of large scores is almost "
                   "one-hot."),
    "scaled_by_d_k": (_SCALING, "the division keeps the scores' variance at 1: the variance of "
                      "a sum of d_k unit products is d_k; what divides it back to 1?"),
    "scaled_by_sqrt_d_v": (_SCALING, "d_k is the width the dot products sum over: which "
                           "input's last axis is it?"),
    "multiplied": (_SCALING, "print scores.std() before and after your scaling: it should go "
                   "down."),
    "scaled_by_wrong_size": (_SCALING, "print query.shape and the size you take the square "
                             "root of, for the case above (and for a 3-D and a 4-D input): it "
                             "should be the queries' (and keys') last axis."),
    "scaled_after_softmax": (_SCALING, "print weights.sum(-1): after the softmax every row "
                             "must still sum to 1."),
    "softmax_wrong_axis": (None, "print weights.sum(-1): each query's row must sum to 1."),
    "key_not_transposed": (None, "write the shapes down: (..., q_len, d_k) @ (..., d_k, k_len) "
                           "gives (..., q_len, k_len): which two axes of key must trade places?"),
    "scores_returned": (None, "print the second thing you return, .sum(-1): it should be all "
                        "ones."),
    "mask_added": (_MASKING, "print mask.dtype and (scores + mask)[0]: adding a bool adds 0 "
                   "or 1, which blocks nothing."),
    "mask_inverted": (_MASKING, "print mask[0] next to weights[0]: in this course True means "
                      "'may attend', so the positions to block are where the mask is False."),
    "mask_after_softmax": (_MASKING, "print weights.sum(-1) for a masked row: it should be 1."),
    "masked_to_zero": (_MASKING, "print torch.exp(torch.tensor(0.0)): a blocked score must "
                       "become something whose exp is 0."),
    "fill_not_representable": (_MASKING, "print torch.finfo(torch.float16).min and "
                               "torch.finfo(torch.bfloat16).min next to your fill value: which "
                               "one is further from 0?"),
    "fill_not_low_enough": (_MASKING, "on the case above print scores.min() and your fill "
                            "value: the fill must lose against every score there is."),
    "mask_ignored": (_MASKING, "print your weights with and without the mask: they should "
                     "differ wherever the mask is False."),
    "builtin": (None, "write the four steps yourself: scores, scale, softmax, weighted sum "
                "of the values, with @ and torch.softmax."),
    "wrong_order": (None, "print the shapes of the two things you return: the output "
                    "(..., q_len, d_v) comes first."),
    "no_softmax": (None, "print weights.sum(-1): every row must sum to 1, and no weight may "
                   "be negative."),
    "log_softmax": (None, "print weights.min(): weights are probabilities, never negative."),
    "values_times_scores": (None, "print the tensor you multiply V by, .sum(-1): all ones."),
    "torch_sqrt_of_int": (_SCALING, "print type(query.size(-1)): what does torch.sqrt "
                          "accept?"),
    "keys_combined": (None, "print the shape of your output with d_v != d_k: its last axis "
                      "comes from value."),
    "float32": (None, "print your output's dtype for float64 inputs: float64."),
    "dropout": (None, "call your function twice on the same inputs: the outputs must be "
                "equal."),
    "mask_axis_added": (_MASKING, "print mask.shape and the scores' shape, aligned from the "
                        "right: every axis must be equal or 1."),
    "mask_float32": (_MASKING, "on bfloat16 inputs print the dtype of your mask term and of "
                     "the scores after adding it: both must stay bfloat16."),
    "max_over_masked": (_MASKING, "on the case above print the largest score of a row and "
                        "the largest allowed score of that row: which one does your softmax "
                        "subtract?"),
    "softmax_overflow": (None, "print torch.exp(torch.tensor(100.0)) and the largest score "
                         "of the case above: what does exp make of it, and what is inf / inf?"),
    "global_max": (None, "print the maximum you subtract and its shape, and each row's "
                   "largest score, on the case above: what is e^(row's largest - your "
                   "maximum) in float32?"),
    "query_key_swapped": (None, "with q_len != k_len print your scores' shape: (..., q_len, "
                          "k_len)."),
    "wrong_axes": (None, "on a 4-D key (batch, heads, k_len, d_k), print the shape after your "
                   "transpose: only the last two axes may move."),
    "three_d_only": (None, "call your function on 4-D inputs (2, 3, 5, 8): which call "
                     "refuses them?"),
    "fully_masked": (("01_attention", "A query that may see nothing"),
                     "make a mask whose first row is all False and print weights[..., 0, :]: "
                     "what does softmax give on a row of -inf?"),
}
MISTAKES = laddered(MISTAKES, _LADDER)


def _inputs(seed, batch, q_len, k_len, d_k, d_v, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, q_len, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, k_len, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, k_len, d_v, generator=g, dtype=dtype)
    return q, k, v


def _case(seed, batch, q_len, k_len, d_k, d_v, mask=None, dtype=torch.float32, magnitude=1.0):
    """`magnitude`: queries and keys scaled by it (the scores by its square)."""
    q, k, v = _inputs(seed, batch, q_len, k_len, d_k, d_v, dtype)
    args = (q * magnitude, k * magnitude, v) + (() if mask is None else (mask,))
    case = Case(args, names=("query", "key", "value", "mask"), seed=seed)
    if magnitude != 1.0:
        case.label += f" (scores of the order of {magnitude**2:.0e})"
    if dtype in (torch.float16, torch.bfloat16):
        case.label += f", in {str(dtype).replace('torch.', '')}"
    return case


def _lengths_mask(lengths, k_len):
    """(batch, 1, k_len): keys beyond each sequence's length are padding."""
    return (torch.arange(k_len) < torch.tensor(lengths)[:, None])[:, None, :]


def _offset_causal(q_len, k_len, offset):
    """(q_len, k_len): query i may see keys j <= i + offset (every row mixes True and False)."""
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(offset)


def _gradients(fn, args, case):
    """The gradients of output.sum() with respect to query, key and value."""
    leaves = [a.requires_grad_() for a in args]
    fn(*leaves)[0].sum().backward()
    return tuple(a.grad for a in leaves)


def _detached(*which):
    """The gradients when the inputs `which` are cut off from the graph."""

    def compute(q, k, v):
        def attend(*inputs):
            return reference(*(x.detach() if i in which else x for i, x in enumerate(inputs)))

        return _gradients(attend, (q, k, v), None)

    return compute


GRADIENT = Case(
    _inputs(7, (2,), 3, 4, 5, 2, torch.float64), names=("query", "key", "value"), seed=7,
    label="query (2, 3, 5), key (2, 4, 5), value (2, 4, 2), backward from output.sum()",
    run=_gradients, what="gradients", parts=("the query's gradient", "the key's gradient",
                                             "the value's gradient"),
    mistakes=(NO_GRADIENT.computing(_detached(0, 1, 2), _detached(0), _detached(1),
                                    _detached(2), _detached(0, 1)),),
)

# Every row of every partial mask has both allowed and blocked keys, so each mask mistake
# computes something different from the reference. Fully masked rows come last.
CASES = [
    _case(0, (2,), 5, 7, 8, 6),
    _case(1, (2, 3), 5, 7, 8, 6),
    _case(2, (2, 4), 5, 4, 4, 6),  # heads == k_len == d_k: the 3-D-only transpose runs, wrongly
    _case(3, (2,), 5, 7, 16, 6, mask=_lengths_mask([4, 6], 7)),
    _case(4, (2, 3), 5, 7, 8, 6, mask=_offset_causal(5, 7, 1)),
    _case(5, (3,), 1, 1, 3, 2, dtype=torch.float64),
    _case(8, (2,), 6, 6, 8, 8),  # q_len == k_len: queries and keys swapped still runs
    _case(6, (2, 2), 3, 5, 4, 6, mask=_lengths_mask([0, 3], 5)[:, None]),  # batch 0: all padding
    # scores of the order of 10^6: a finite fill above -10^6 no longer masks (a row whose
    # allowed scores are all below -6 * 10^5)
    _case(9, (2,), 5, 6, 8, 6, mask=_lengths_mask([2, 5], 6), magnitude=1000.0),
    # bfloat16: a fill beyond its range (float32's min) cannot be stored; -1e9 and -inf can
    _case(10, (2, 2), 4, 5, 8, 6, mask=_lengths_mask([3, 0], 5)[:, None], dtype=torch.bfloat16),
    GRADIENT,
    # float16: -1e9 cannot be stored either (its lowest is -65504). Last: many a wrong
    # solution fills with -1e9, and its own mistake shows on a case before this one
    _case(11, (2,), 4, 5, 8, 6, mask=_offset_causal(4, 5, 1), dtype=torch.float16),
]

ITEM = Item(
    EXERCISE, NAME, reference, CASES, MISTAKES, parts=("output", "weights"),
    formula="Compare each step with softmax(Q K^T / sqrt(d_k)) V.",
    twins=(_with(),),
    section=("01_attention", "3. Build it, one step at a time"),
)

ITEMS = (ITEM,)
