"""Wrong ways to write scaled dot-product attention, and the diagnosis each must get."""

import math
import time

import torch
import torch.nn.functional as F

from . import diagnosis


def _masked(scores, mask, fill=float("-inf")):
    return scores if mask is None else scores.masked_fill(~mask, fill)


def _finish(weights, value, mask):
    """Correct handling of fully masked rows, for solutions whose mistake is elsewhere."""
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ value, weights


@diagnosis("Scores not scaled")
def no_scaling(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1)
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@diagnosis("Scores not scaled")
def no_scaling_einsum(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-1e9, dtype=scores.dtype))
    weights = F.softmax(scores, dim=-1)
    return _finish(weights, value, mask)


@diagnosis("Scaled by d_k instead of sqrt(d_k)")
def scaled_by_d_k(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / query.shape[-1]
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@diagnosis("Scaled by d_k instead of sqrt(d_k)")
def scaled_by_d_k_twice_sqrt(query, key, value, mask=None):
    d_k = key.size(-1)
    scores = (query / math.sqrt(d_k)) @ (key / math.sqrt(d_k)).transpose(-1, -2)
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@diagnosis("Scaled by sqrt(d_v) instead of sqrt(d_k)")
def scaled_by_sqrt_d_v(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / value.size(-1) ** 0.5
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@diagnosis("Scores multiplied by sqrt(d_k) instead of divided")
def multiplied_by_sqrt_d_k(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) * math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@diagnosis("Softmax over the wrong axis")
def softmax_over_queries(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), dim=-2), value, mask)


@diagnosis("Softmax over the wrong axis")
def softmax_dim_1(query, key, value, mask=None):
    # dim=1 is the query axis of 3-D input (and the heads axis of 4-D input)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    return _finish(_masked(scores, mask, -1e9).softmax(1), value, mask)


@diagnosis("Mask polarity inverted")
def mask_inverted(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))  # True taken to mean "blocked"
    weights = torch.softmax(scores, -1)
    return _finish(weights, value, None if mask is None else ~mask)


@diagnosis("Mask polarity inverted")
def mask_inverted_additive(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + mask.to(scores.dtype) * -1e9
    return _finish(torch.softmax(scores, -1), value, None if mask is None else ~mask)


@diagnosis("Mask applied after the softmax")
def mask_after_softmax(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ value, weights


@diagnosis("Masked scores set to 0 instead of -inf")
def masked_to_zero(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, 0)
    return _finish(torch.softmax(scores, -1), value, mask)


@diagnosis("Masked scores set to 0 instead of -inf")
def mask_multiplied_into_scores(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores * mask
    return _finish(torch.softmax(scores, -1), value, mask)


@diagnosis("Mask ignored")
def mask_ignored(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(scores, -1)
    return weights @ value, weights


@diagnosis("Key transposed on the wrong axes")
def transpose_1_2(query, key, value, mask=None):
    scores = query @ key.transpose(1, 2) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@diagnosis("Key transposed on the wrong axes")
def permute_3d(query, key, value, mask=None):
    scores = torch.bmm(query, key.permute(0, 2, 1)) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@diagnosis("Output and weights returned in the wrong order")
def weights_first(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    output, weights = _finish(weights, value, mask)
    return weights, output


@diagnosis("Input modified in place")
def query_scaled_in_place(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1)
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@diagnosis("Input modified in place")
def mask_inverted_in_place(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        mask.logical_not_()
        scores = scores.masked_fill(mask, -1e9)
        mask.logical_not_()
        mask[..., 0] = True
    return _finish(torch.softmax(scores, -1), value, mask)


@diagnosis("Built-in attention called")
def builtin(query, key, value, mask=None):
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    return output, _finish(weights, value, mask)[1]


@diagnosis("Built-in attention called")
def builtin_imported_by_name(query, key, value, mask=None):
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    return sdpa(query, key, value, attn_mask=mask), None


@diagnosis("Fully masked query row not handled")
def minus_inf_gives_nan(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask), dim=-1)
    return weights @ value, weights


@diagnosis("Fully masked query row not handled")
def large_negative_gives_uniform(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), dim=-1)
    return weights @ value, weights


@diagnosis("No gradient flows back to the inputs")
def detached(query, key, value, mask=None):
    with torch.no_grad():
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


# Learner code that misbehaves in other ways: each gets one clear message.


@diagnosis(f"{'scaled_dot_product_attention'} should return a tuple (output, weights), got None")
def forgot_return(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    weights @ value  # noqa: B018


@diagnosis("Wrong output: output has shape")
def returns_scores_shape(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    return weights, weights


@diagnosis("Wrong output: output has dtype")
def returns_float32(query, key, value, mask=None):
    scores = query.float() @ key.float().transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    return _finish(weights, value.float(), mask)


@diagnosis("Wrong output on")
def returns_nan(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    return weights @ value * float("nan"), weights


@diagnosis("Raised ZeroDivisionError: division by zero")
def raises(query, key, value, mask=None):
    return 1 / 0


@diagnosis("Too slow")
def endless_loop(query, key, value, mask=None):
    while True:
        time.sleep(0.01)


@diagnosis("Scores not scaled")
def prints_a_lot(query, key, value, mask=None):
    for i in range(100_000):
        print("debug", i)
    return no_scaling(query, key, value, mask)
