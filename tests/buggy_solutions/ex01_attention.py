"""Wrong ways to write scaled dot-product attention, and the diagnosis each must get."""

import math
import time

import torch
import torch.nn.functional as F

from . import wrong


def _masked(scores, mask, fill=float("-inf")):
    return scores if mask is None else scores.masked_fill(~mask, fill)


def _finish(weights, value, mask):
    """Correct handling of fully masked rows, for solutions whose mistake is elsewhere."""
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.no_scaling")
def no_scaling(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1)
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.no_scaling")
def no_scaling_einsum(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-1e9, dtype=scores.dtype))
    weights = F.softmax(scores, dim=-1)
    return _finish(weights, value, mask)


@wrong("scaled_dot_product_attention.scaled_by_d_k")
def scaled_by_d_k(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / query.shape[-1]
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.scaled_by_d_k")
def scaled_by_d_k_twice_sqrt(query, key, value, mask=None):
    d_k = key.size(-1)
    scores = (query / math.sqrt(d_k)) @ (key / math.sqrt(d_k)).transpose(-1, -2)
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.scaled_by_sqrt_d_v")
def scaled_by_sqrt_d_v(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / value.size(-1) ** 0.5
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.multiplied")
def multiplied_by_sqrt_d_k(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) * math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.softmax_wrong_axis")
def softmax_over_queries(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), dim=-2), value, mask)


@wrong("scaled_dot_product_attention.softmax_wrong_axis")
def softmax_dim_1(query, key, value, mask=None):
    # dim=1 is the query axis of 3-D input (and the heads axis of 4-D input)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    return _finish(_masked(scores, mask, -1e9).softmax(1), value, mask)


@wrong("scaled_dot_product_attention.softmax_wrong_axis")
def softmax_dim_2(query, key, value, mask=None):
    # dim=2 is the key axis of 3-D scores, but the query axis of 4-D (batch, heads, q, k) ones
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return _finish(torch.softmax(scores, dim=2), value, mask)


@wrong("scaled_dot_product_attention.softmax_wrong_axis")
def softmax_module_dim_2(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / query.shape[-1] ** 0.5
    weights = torch.nn.Softmax(dim=2)(_masked(scores, mask)).nan_to_num(0.0)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.mask_inverted")
def mask_inverted(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))  # True taken to mean "blocked"
    weights = torch.softmax(scores, -1)
    return _finish(weights, value, None if mask is None else ~mask)


@wrong("scaled_dot_product_attention.mask_inverted")
def mask_inverted_additive(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + mask.to(scores.dtype) * -1e9
    return _finish(torch.softmax(scores, -1), value, None if mask is None else ~mask)


@wrong("scaled_dot_product_attention.mask_after_softmax")
def mask_after_softmax(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ value, weights


@wrong("scaled_dot_product_attention.masked_to_zero")
def masked_to_zero(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, 0)
    return _finish(torch.softmax(scores, -1), value, mask)


@wrong("scaled_dot_product_attention.masked_to_zero")
def mask_as_a_factor_then_zeroed(query, key, value, mask=None):
    scores = torch.matmul(query, key.mT) * query.size(-1) ** -0.5
    if mask is not None:
        scores = scores * mask.to(scores.dtype)
    weights = scores.softmax(-1)
    if mask is not None:
        weights = torch.where(mask, weights, torch.zeros_like(weights))
    return weights @ value, weights


@wrong("scaled_dot_product_attention.masked_to_zero")
def mask_multiplied_into_scores(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores * mask
    return _finish(torch.softmax(scores, -1), value, mask)


@wrong("scaled_dot_product_attention.mask_ignored")
def mask_ignored(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(scores, -1)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.wrong_axes")
def transpose_1_2(query, key, value, mask=None):
    scores = query @ key.transpose(1, 2) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.wrong_axes")
def permute_3d(query, key, value, mask=None):
    scores = torch.bmm(query, key.permute(0, 2, 1)) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.wrong_axes")
def swapaxes_first_and_last(query, key, value, mask=None):
    scores = torch.matmul(query, key.swapaxes(0, -1)) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.wrong_axes")
def transpose_2_3(query, key, value, mask=None):  # a real wrong solution's: 4-D inputs only
    temperature = query.size(-1) ** 0.5
    attn = torch.matmul(query / temperature, key.transpose(2, 3))
    if mask is not None:
        attn = attn.masked_fill(mask == 0, -1e9)
    return _finish(torch.softmax(attn, dim=-1), value, mask)


@wrong("scaled_dot_product_attention.wrong_axes")
def permute_heads_layout(query, key, value, mask=None):
    scores = query @ key.permute(0, 1, 3, 2) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.fill_not_representable")
def fill_a_float32_sized_literal(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -3.4e38)
    return _finish(torch.softmax(scores, -1), value, mask)


@wrong("scaled_dot_product_attention.fill_not_representable")
def fill_minus_1e9_in_float16(query, key, value, mask=None):
    """-1e9 (HF transformers' and many tutorials' fill) is beyond float16's -65504."""
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.fill_not_representable")
def fill_minus_1e30_full_like(query, key, value, mask=None):
    """Another constant: any fill beyond float16's range raises alike."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * query.size(-1) ** -0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -1e30))
    return _finish(scores.softmax(-1), value, mask)


@wrong("scaled_dot_product_attention.wrong_order")
def weights_first(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    output, weights = _finish(weights, value, mask)
    return weights, output


@wrong("scaled_dot_product_attention.in_place")
def query_scaled_in_place(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1)
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.in_place")
def mask_inverted_in_place(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        mask.logical_not_()
        scores = scores.masked_fill(mask, -1e9)
        mask.logical_not_()
        mask[..., 0] = True
    return _finish(torch.softmax(scores, -1), value, mask)


@wrong("scaled_dot_product_attention.builtin")
def builtin(query, key, value, mask=None):
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    return output, _finish(weights, value, mask)[1]


@wrong("scaled_dot_product_attention.builtin")
def builtin_imported_by_name(query, key, value, mask=None):
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    return sdpa(query, key, value, attn_mask=mask), None


@wrong("scaled_dot_product_attention.fully_masked")
def minus_inf_gives_nan(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask), dim=-1)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.fully_masked")
def large_negative_gives_uniform(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), dim=-1)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.no_gradient")
def detached(query, key, value, mask=None):
    with torch.no_grad():
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


# Learner code that misbehaves in other ways: each gets one clear message.


@wrong("scaled_dot_product_attention.nothing_returned")
def forgot_return(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    weights @ value  # noqa: B018


@wrong("scaled_dot_product_attention.wrong_shape")
def returns_scores_shape(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    return weights, weights


@wrong("scaled_dot_product_attention.float32")
def returns_float32(query, key, value, mask=None):
    scores = query.float() @ key.float().transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    return _finish(weights, value.float(), mask)


@wrong("scaled_dot_product_attention.not_finite")
def returns_nan(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    return weights @ value * float("nan"), weights


@wrong("scaled_dot_product_attention.raised")
def raises(query, key, value, mask=None):
    return 1 / 0


@wrong("scaled_dot_product_attention.too_slow")
def endless_loop(query, key, value, mask=None):
    while True:
        time.sleep(0.01)


@wrong("scaled_dot_product_attention.no_scaling")
def prints_a_lot(query, key, value, mask=None):
    for i in range(100_000):
        print("debug", i)
    return no_scaling(query, key, value, mask)


# Mistakes found by thinking like a learner: the paper's notation taken literally, a step
# in the wrong place, an argument in the wrong role.


@wrong("scaled_dot_product_attention.scaled_by_wrong_size")
def scaled_by_key_length(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(key.size(1))  # (batch, k_len, d_k): k_len
    return _finish(torch.softmax(_masked(scores, mask, -1e9), -1), value, mask)


@wrong("scaled_dot_product_attention.scaled_by_wrong_size")
def d_k_from_axis_2(query, key, value, mask=None):
    d_k = query.shape[2]  # d_k of (batch, q_len, d_k); q_len of (batch, heads, q_len, d_k)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return _finish(torch.softmax(scores, dim=-1), value, mask)


@wrong("scaled_dot_product_attention.scaled_by_wrong_size")
def d_k_from_key_axis_2(query, key, value, mask=None):
    scale = key.size(2) ** -0.5  # k_len on 4-D inputs
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    return _finish(torch.softmax(_masked(scores, mask), -1), value, mask)


@wrong("scaled_dot_product_attention.scaled_after_softmax")
def scaled_after_softmax(query, key, value, mask=None):
    weights = torch.softmax(_masked(query @ key.transpose(-2, -1), mask, -1e9), dim=-1)
    weights = weights / math.sqrt(query.size(-1))
    return _finish(weights, value, mask)


@wrong("scaled_dot_product_attention.no_softmax")
def no_softmax(query, key, value, mask=None):
    weights = _masked(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask, -1e9)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.log_softmax")
def log_softmax(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    return _finish(F.log_softmax(_masked(scores, mask), dim=-1), value, mask)


@wrong("scaled_dot_product_attention.values_times_scores")
def values_times_scores(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = _finish(torch.softmax(_masked(scores, mask), -1), value, mask)[1]
    return scores @ value, weights


@wrong("scaled_dot_product_attention.scores_returned")
def scores_returned(query, key, value, mask=None):
    scores = _masked(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask)
    return _finish(torch.softmax(scores, -1), value, mask)[0], scores


@wrong("scaled_dot_product_attention.query_key_swapped")
def keys_times_queries(query, key, value, mask=None):
    scores = key @ query.transpose(-2, -1) / math.sqrt(query.size(-1))  # K Q^T
    return _finish(torch.softmax(_masked(scores, mask), -1), value, mask)


@wrong("scaled_dot_product_attention.three_d_only")
def batched_matmul(query, key, value, mask=None):
    scores = torch.bmm(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask), -1), value, mask)


@wrong("scaled_dot_product_attention.three_d_only")
def einsum_3d(query, key, value, mask=None):
    scores = torch.einsum("bik,bjk->bij", query, key) / math.sqrt(query.size(-1))
    weights = torch.softmax(_masked(scores, mask, -1e9), -1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return torch.einsum("bij,bjd->bid", weights, value), weights


@wrong("scaled_dot_product_attention.key_not_transposed")
def key_not_transposed(query, key, value, mask=None):
    scores = torch.matmul(query, key) / math.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask), -1), value, mask)


@wrong("scaled_dot_product_attention.torch_sqrt_of_int")
def torch_sqrt_of_an_int(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / torch.sqrt(query.size(-1))
    return _finish(torch.softmax(_masked(scores, mask), -1), value, mask)


@wrong("scaled_dot_product_attention.keys_combined")
def keys_combined(query, key, value, mask=None):
    weights = _finish(torch.softmax(_masked(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)),
                                            mask), -1), value, mask)[1]
    return weights @ key, weights


@wrong("scaled_dot_product_attention.float32")
def float32_softmax(query, key, value, mask=None):
    scores = _masked(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask, -1e9)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    return _finish(weights, value, mask)


@wrong("scaled_dot_product_attention.dropout")
def dropout_on_weights(query, key, value, mask=None):
    scores = _masked(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask)
    weights = F.dropout(torch.softmax(scores, -1).nan_to_num(0.0), p=0.1)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.mask_added")
def bool_mask_added(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + mask  # as torch's float attn_mask is
    weights = torch.softmax(scores, -1)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.mask_axis_added")
def mask_unsqueezed(query, key, value, mask=None):
    if mask is not None:
        mask = mask.unsqueeze(1)
    scores = _masked(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask)
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.recursion")
def calls_itself(query, key, value, mask=None):
    return calls_itself(query, key, value, mask)  # meant: torch's function of the same name


@wrong("scaled_dot_product_attention.fully_masked")
def additive_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + (1 - mask.to(scores.dtype)) * -1e9
    weights = torch.softmax(scores, -1)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.fully_masked")
def output_before_zeroing(query, key, value, mask=None):
    """The fully masked rows' weights zeroed, but after the output was mixed from them."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    output = weights @ value
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return output, weights


@wrong("scaled_dot_product_attention.fill_not_low_enough")
def fill_minus_ten_thousand(query, key, value, mask=None):
    """A common fill value: large enough for unit-sized scores, not for large ones."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e4)
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.fill_not_low_enough")
def additive_mask_minus_ten_thousand(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + (~mask).to(scores.dtype) * -1e4  # BERT's extended attention mask
    return _finish(torch.softmax(scores, -1), value, mask)


@wrong("scaled_dot_product_attention.max_over_masked")
def softmax_by_hand_max_over_every_key(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    e = (scores - scores.max(dim=-1, keepdim=True).values).exp()
    if mask is not None:
        e = torch.where(mask, e, torch.zeros_like(e))
    total = e.sum(-1, keepdim=True)
    weights = torch.where(total > 0, e / total, torch.zeros_like(e))
    return weights @ value, weights


@wrong("scaled_dot_product_attention.softmax_overflow")
def softmax_by_hand_without_max(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores)
    denom = e.sum(dim=-1, keepdim=True)
    weights = torch.where(denom > 0, e / denom.clamp(min=1e-30), torch.zeros_like(e))
    return weights @ value, weights


@wrong("scaled_dot_product_attention.softmax_overflow")
def softmax_by_hand_mask_multiplied(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(query.size(-1))
    e = scores.exp()
    if mask is not None:
        e = e * mask
    weights = (e / e.sum(-1, keepdim=True)).nan_to_num(0.0)
    return weights @ value, weights


# ---------------------------------------------------------------------------------------
# Numerical regimes


@wrong("scaled_dot_product_attention.global_max")
def softmax_minus_global_max(query, key, value, mask=None):
    # "subtract the max for stability", as np.exp(x - np.max(x)) does: one max for everything
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.max())
    weights = (e / e.sum(dim=-1, keepdim=True)).nan_to_num(0.0)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.global_max")
def softmax_minus_max_per_matrix(query, key, value, mask=None):
    scores = torch.matmul(query, key.transpose(-1, -2)) * query.shape[-1] ** -0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    top = scores.flatten(-2).max(-1).values[..., None, None]  # one max per (batch, head)
    e = (scores - top).exp()
    total = e.sum(-1, keepdim=True)
    weights = torch.where(total > 0, e / total.clamp_min(1e-38), torch.zeros_like(e))
    return weights @ value, weights


@wrong("scaled_dot_product_attention.mask_float32")
def additive_mask_as_in_keras(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + (1.0 - mask.float()) * -1e9  # tf.cast(mask, tf.float32)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(dim=-1, keepdim=True)
    return weights @ value, weights


@wrong("scaled_dot_product_attention.lower_precision")
def computed_in_float32(query, key, value, mask=None):
    """'float32 for stability', cast back to the inputs' dtype at the end."""
    q, k, v = query.float(), key.float(), value.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return (weights @ v).to(query.dtype), weights.to(query.dtype)


@wrong("scaled_dot_product_attention.softmax_overflow")
def exp_times_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    e = torch.exp(scores)  # no maximum subtracted
    if mask is not None:
        e = e * mask  # inf * 0 is NaN
    total = e.sum(-1, keepdim=True)
    weights = e / torch.where(total == 0, torch.ones_like(total), total)
    return weights @ value, weights
