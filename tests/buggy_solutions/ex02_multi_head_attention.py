"""Wrong ways to write exercise 02 (split_heads, merge_heads, MultiHeadAttention.forward),
and the diagnosis each must get. Functions named split_* / merge_* are checked as
split_heads / merge_heads; classes as MultiHeadAttention."""

import math
import time

import torch
from torch import nn

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.multi_head import MultiHeadAttention, merge_heads, split_heads

from . import wrong

# ---------------------------------------------------------------------------------------
# split_heads


@wrong("split_heads.split_without_transpose")
def split_view_straight_to_heads(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, n_heads, seq, d_model // n_heads)


@wrong("split_heads.split_without_transpose")
def split_reshape_minus_one(x, n_heads):
    return x.reshape(x.size(0), n_heads, -1, x.size(-1) // n_heads)


@wrong("split_heads.split_without_transpose")
def split_transpose_forgotten(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, n_heads, d_model // n_heads)


@wrong("split_heads.batch_heads_unflattened")
def split_seq_first_like_torch(x, n_heads):
    batch, seq, d_model = x.shape
    # (seq, batch * heads, d_head) as in torch's multi_head_attention_forward, then back
    y = x.transpose(0, 1).reshape(seq, batch * n_heads, d_model // n_heads).transpose(0, 1)
    return y.reshape(n_heads, batch, seq, d_model // n_heads).transpose(0, 1)


@wrong("split_heads.batch_heads_unflattened")
def split_folded_then_unfolded_heads_first(x, n_heads):
    batch, seq, _ = x.shape
    folded = x.view(batch, seq, n_heads, -1).transpose(1, 2).reshape(batch * n_heads, seq, -1)
    return folded.view(n_heads, batch, seq, -1).permute(1, 0, 2, 3)


@wrong("split_heads.split_strided")
def split_strided(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, -1, n_heads).permute(0, 3, 1, 2)


@wrong("split_heads.in_place")
def split_in_place(x, n_heads):
    x.mul_(1.0).add_(0.0)
    x[0, 0, 0] = 0.0
    return x.view(x.size(0), x.size(1), n_heads, -1).transpose(1, 2)


@wrong("split_heads.nothing_returned")
def split_forgot_return(x, n_heads):
    x.view(x.size(0), x.size(1), n_heads, -1).transpose(1, 2)


@wrong("split_heads.reference_used")
def split_calls_the_reference(x, n_heads):
    return split_heads(x.contiguous(), n_heads)


# ---------------------------------------------------------------------------------------
# merge_heads


@wrong("merge_heads.merge_order")
def merge_view_without_transpose(x):
    batch, heads, seq, d_head = x.shape
    return x.view(batch, seq, heads * d_head)


@wrong("merge_heads.merge_order")
def merge_heads_interleaved(x):
    return x.permute(0, 2, 3, 1).flatten(2)


@wrong("merge_heads.merge_order")
def merge_last_axes_swapped(x):
    return x.transpose(-1, -2).reshape(x.size(0), x.size(2), -1)


@wrong("merge_heads.concatenated_wrong_axis")
def merge_cat_along_positions(x):
    return torch.cat([x[:, h] for h in range(x.size(1))], dim=1)


@wrong("merge_heads.concatenated_wrong_axis")
def merge_heads_stacked_as_positions(x):
    batch, heads, seq, d_head = x.shape
    return x.reshape(batch, heads * seq, d_head)


@wrong("merge_heads.concatenated_wrong_axis")
def merge_cat_along_batch(x):
    return torch.cat(torch.unbind(x, dim=1))


@wrong("merge_heads.view_after_transpose")
def merge_view_after_transpose(x):
    batch, heads, seq, d_head = x.shape
    return x.transpose(1, 2).view(batch, seq, heads * d_head)


@wrong("merge_heads.wrong_shape")
def merge_keeps_heads(x):
    return x.flatten(2)


# ---------------------------------------------------------------------------------------
# MultiHeadAttention: the reference's __init__, a wrong forward


def _attend(q, k, v, mask, scale, fill=-1e9):
    """Inline attention with a mask fill that keeps fully masked rows finite (and uniform)."""
    scores = q @ k.transpose(-2, -1) / scale
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ v, weights


class _Buggy(MultiHeadAttention):
    def heads(self, query, key, value):
        h = self.n_heads
        return (split_heads(self.w_q(query), h), split_heads(self.w_k(key), h),
                split_heads(self.w_v(value), h))


@wrong("MultiHeadAttention.fill_not_low_enough")
class FillMinusTenThousand(_Buggy):
    """masked_fill(mask == 0, -1e4): enough for unit-sized scores, not for large ones."""

    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e4)
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        weights = self.dropout(weights)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@wrong("MultiHeadAttention.split_without_transpose")
class SplitByView(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        b, h = query.size(0), self.n_heads
        q = self.w_q(query).view(b, h, -1, self.d_head)
        k = self.w_k(key).view(b, h, -1, self.d_head)
        v = self.w_v(value).view(b, h, -1, self.d_head)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.split_merge_without_transpose")
class SplitAndMergeByView(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        b = query.size(0)
        q = self.w_q(query).view(b, self.n_heads, -1, self.d_head)
        k = self.w_k(key).view(b, self.n_heads, -1, self.d_head)
        v = self.w_v(value).view(b, self.n_heads, -1, self.d_head)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = self.w_o(out.reshape(b, -1, self.n_heads * self.d_head))
        return out, (weights if need_weights else None)


@wrong("MultiHeadAttention.split_merge_without_transpose")
class HeadsNeverTransposed(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        def split(x):  # (batch, seq, heads, d_head): no transpose
            return x.unflatten(-1, (self.n_heads, self.d_head))

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(out.flatten(-2)), weights if need_weights else None


@wrong("MultiHeadAttention.split_strided")
class SplitStrided(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        def split(x):
            return x.unflatten(-1, (self.d_head, self.n_heads)).permute(0, 3, 1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.merge_order")
class MergeWithoutTranspose(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        out = out.contiguous().view(query.shape)  # (batch, heads, q_len, d_head) -> (batch, q_len, d_model)
        return self.w_o(out), weights if need_weights else None


@wrong("MultiHeadAttention.merge_order")
class MergeHeadsMajor(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        out = torch.stack(out.unbind(1), dim=-1).flatten(2)  # features interleaved across heads
        return self.w_o(out), weights if need_weights else None


@wrong("MultiHeadAttention.no_output_projection")
class NoOutputProjection(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return merge_heads(out), weights if need_weights else None


@wrong("MultiHeadAttention.scaled_by_d_model")
class ScaledByDModel(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        out, weights = _attend(q, k, v, mask, math.sqrt(self.n_heads * self.d_head))
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.scaled_by_d_model")
class WidthTakenFromTheInput(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        d_k = query.size(-1)  # the input's width: d_model, not d_head
        q, k, v = self.heads(query, key, value)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / d_k**0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, -1).nan_to_num(0.0)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@wrong("MultiHeadAttention.mask_heads")
class MaskUnsqueezed(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        if mask is not None:
            mask = mask.unsqueeze(1)  # "same mask for all heads", but it already broadcasts
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.mask_heads")
class MaskUnsqueezedInline(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        out, weights = _attend(q, k, v, None if mask is None else mask[:, None], math.sqrt(self.d_head))
        out = out.transpose(1, 2).reshape(query.size(0), query.size(1), -1)
        return self.w_o(out), weights if need_weights else None


@wrong("MultiHeadAttention.mask_heads")
class MaskUnsqueezedUnlessFourDimensional(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        if mask is not None and mask.dim() < 4:
            mask = mask.unsqueeze(1)  # taken for (batch, k_len) or (batch, q_len, k_len)
        q, k, v = self.heads(query, key, value)
        out, weights = _attend(q, k, v, mask, math.sqrt(self.d_head))
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.mask_repeated")
class MaskRepeatedForBatchTimesHeads(_Buggy):
    """Heads folded into the batch, as torch.nn.MultiheadAttention does, but the mask repeated
    heads-major while the tensors are batch-major."""

    def forward(self, query, key, value, mask=None, need_weights=False):
        b, h = query.size(0), self.n_heads
        q, k, v = (t.flatten(0, 1) for t in self.heads(query, key, value))  # (b * h, seq, d_head)
        if mask is not None:
            mask = mask.expand(b, 1, q.size(1), k.size(1)).squeeze(1).repeat(h, 1, 1)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out, weights = out.unflatten(0, (b, h)), weights.unflatten(0, (b, h))
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.key_length")
class LengthsFromTheQuery(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        batch, seq, _ = query.shape
        q, k, v = (p(x).view(batch, seq, self.n_heads, self.d_head).transpose(1, 2)
                   for p, x in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.qkv_mixed_up")
class KeysAndValuesFromTheQuery(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, query, query), mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.qkv_mixed_up")
class KeyAndValueProjectionsSwapped(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        h = self.n_heads
        q = split_heads(self.w_q(query), h)
        k = split_heads(self.w_v(key), h)
        v = split_heads(self.w_k(value), h)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.mask_inverted")
class MaskInverted(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        mask = None if mask is None else mask.logical_not()  # torch.nn's polarity
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.mask_after_softmax")
class MaskAfterSoftmax(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        if mask is not None:  # jnp.where(mask, weights, 0)
            weights = torch.where(mask, weights, torch.zeros_like(weights))
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@wrong("MultiHeadAttention.mask_ignored")
class MaskIgnored(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value))
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.weights_averaged")
class WeightsAveraged(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights.mean(dim=1) if need_weights else None


@wrong("MultiHeadAttention.fully_masked")
class FullyMaskedGivesNaN(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@wrong("MultiHeadAttention.weights_not_returned")
class WeightsNeverReturned(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, _ = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), None


@wrong("MultiHeadAttention.weights_not_asked")
class WeightsAlwaysReturned(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights


@wrong("MultiHeadAttention.renamed")
class FusedInputProjection(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.in_proj(query).chunk(3, dim=-1)
        return self.w_o(q), None


@wrong("MultiHeadAttention.in_place")
class QueryScaledInPlace(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        query /= 1.0  # looks harmless, still writes into the caller's tensor
        query[:, 0] = 0.0
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.wrong_type")
class ReturnsOnlyTheOutput(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, _ = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out))


@wrong("MultiHeadAttention.raised")
class RaisesInInit(_Buggy):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__(d_model, n_heads, dropout, bias)
        self.d_head = 1 / 0


@wrong("MultiHeadAttention.too_slow")
class EndlessLoop(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        while True:
            time.sleep(0.01)


@wrong("MultiHeadAttention.no_scaling")
class NotScaled(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        out, weights = _attend(q, k, v, mask, scale=1.0)
        return self.w_o(merge_heads(out)), weights if need_weights else None


# ---------------------------------------------------------------------------------------
# Mistakes found by thinking like a learner


@wrong("split_heads.split_axes")
def split_features_before_positions(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, n_heads, d_model // n_heads).permute(0, 2, 3, 1)


@wrong("MultiHeadAttention.projection_reused")
class KeyProjectionCopyPasted(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_q(key), self.n_heads)  # copied from the line above
        v = split_heads(self.w_v(value), self.n_heads)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.projection_reused")
class ValueProjectionAsOutput(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_v(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.weight_untransposed")
class PapersNotation(_Buggy):
    """Q = X W^Q read literally: the Linear's weight, not the layer."""

    def forward(self, query, key, value, mask=None, need_weights=False):
        q = split_heads(query @ self.w_q.weight + self.w_q.bias, self.n_heads)
        k = split_heads(key @ self.w_k.weight + self.w_k.bias, self.n_heads)
        v = split_heads(value @ self.w_v.weight + self.w_v.bias, self.n_heads)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = merge_heads(out) @ self.w_o.weight + self.w_o.bias
        return out, weights if need_weights else None


@wrong("MultiHeadAttention.scaled_by_d_head")
class ScaledTwice(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        q = q / math.sqrt(self.d_head)  # and the attention scales again
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.heads_not_split")
class OneBigHead(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        if mask is not None and mask.dim() == 4:
            mask = mask[:, 0]
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(out), weights if need_weights else None


@wrong("MultiHeadAttention.view_after_transpose")
class MergedByView(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        out = out.transpose(1, 2).view(query.size(0), query.size(1), -1)
        return self.w_o(out), weights if need_weights else None


@wrong("split_heads.split_folded")
def split_folded_into_the_batch(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, n_heads, -1).transpose(1, 2).reshape(batch * n_heads, seq, -1)


@wrong("split_heads.split_folded")
def split_folded_by_one_view(x, n_heads):
    b, s, d = x.shape
    return x.view(b * n_heads, -1, d // n_heads)


@wrong("split_heads.split_folded")
def split_folded_heads_major(x, n_heads):
    batch, seq, d_model = x.shape
    heads = x.reshape(batch, seq, n_heads, d_model // n_heads).permute(2, 0, 1, 3)
    return heads.flatten(0, 1)


@wrong("split_heads.split_count_width_swapped")
def split_minus_one_in_place_of_the_heads(x, n_heads):
    return x.reshape(x.size(0), x.size(1), -1, n_heads).transpose(1, 2)


@wrong("split_heads.transpose_before_view")
def split_transposed_then_viewed(x, n_heads):
    batch, seq, d_model = x.shape
    return x.transpose(1, 2).contiguous().view(batch, n_heads, seq, d_model // n_heads)


@wrong("MultiHeadAttention.split_count_width_swapped")
class HeadsAndWidthSwapped(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        def split(x):
            return x.reshape(x.size(0), x.size(1), -1, self.n_heads).transpose(1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.transpose_before_view")
class TransposedThenViewed(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        def split(x):
            return x.transpose(1, 2).reshape(x.size(0), self.n_heads, x.size(1), -1)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.bias_dropped")
class FunctionalLinearsWithoutBias(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        h = self.n_heads
        q = split_heads(torch.nn.functional.linear(query, self.w_q.weight), h)
        k = split_heads(torch.nn.functional.linear(key, self.w_k.weight), h)
        v = split_heads(torch.nn.functional.linear(value, self.w_v.weight), h)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = torch.nn.functional.linear(merge_heads(out), self.w_o.weight)
        return out, weights if need_weights else None


@wrong("MultiHeadAttention.softmax_wrong_axis")
class SoftmaxOverHeads(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=1).nan_to_num(0.0)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@wrong("MultiHeadAttention.dropout_in_eval")
class FunctionalDropoutOnWeights(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, -1)
        if mask is not None:
            weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        weights = torch.nn.functional.dropout(weights, 0.1)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@wrong("MultiHeadAttention.raised")
class FloatMask(_Buggy):
    """An error raised only on the masked cases that is not the mask's shape: reported as it
    is, not as "Mask not broadcast over heads" (issue 9)."""

    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(mask.float() == 0, float("-inf")).masked_fill(mask.float(), 0.0)
        weights = torch.softmax(scores, -1).nan_to_num(0.0)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@wrong("MultiHeadAttention.mask_repeated")
class MaskTiledWithRepeatOnAThreeDimensionalMask(_Buggy):
    """The (batch, q_len, k_len) masks tiled with repeat(h, 1, 1) and viewed back as
    (batch, heads, ...): sequence b's head i gets the mask of sequence (b * h + i) % batch."""

    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        b, h, q_len, _ = q.shape
        if mask is not None:
            per_sequence = mask.expand(b, 1, q_len, k.size(2)).reshape(b, q_len, -1)
            mask = per_sequence.repeat(h, 1, 1).reshape(b, h, q_len, -1)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@wrong("MultiHeadAttention.fill_not_low_enough")
class AdditiveMinusTenThousand(_Buggy):
    """BERT's extended attention mask: scores + (1 - mask) * -10000."""

    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores + (1.0 - mask.float()) * -10000.0
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights * mask.any(-1, keepdim=True)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@wrong("MultiHeadAttention.output_projection_on_values")
class OutputProjectionOnTheValues(_Buggy):
    """W^O mistaken for a second value projection: applied before the attention."""

    def forward(self, query, key, value, mask=None, need_weights=False):
        h = self.n_heads
        q, k = split_heads(self.w_q(query), h), split_heads(self.w_k(key), h)
        v = split_heads(self.w_o(self.w_v(value)), h)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return merge_heads(out), weights if need_weights else None


# ---------------------------------------------------------------------------------------
# Other libraries' layouts


@wrong("split_heads.wrong_shape")
def split_sequence_first(x, n_heads):
    # nn.MultiheadAttention reads (seq, batch, d_model): q.view(tgt_len, bsz * num_heads, d_head)
    seq, batch, d_model = x.shape
    folded = x.contiguous().view(seq, batch * n_heads, d_model // n_heads).transpose(0, 1)
    return folded.view(batch, n_heads, seq, d_model // n_heads)


@wrong("merge_heads.wrong_shape")
def merge_flattened_from_axis_1(x):
    return x.transpose(1, 2).flatten(1)  # (batch, seq * d_model)


@wrong("MultiHeadAttention.mask_repeated")
class HeadsFoldedHeadMajor(MultiHeadAttention):
    def forward(self, query, key, value, mask=None, need_weights=False):
        batch, q_len, d_model = query.shape
        k_len, h = key.size(1), self.n_heads

        def fold(x, length):  # (heads * batch, length, d_head), head-major
            return x.view(batch, length, h, -1).permute(2, 0, 1, 3).reshape(h * batch, length, -1)

        q, k, v = fold(self.w_q(query), q_len), fold(self.w_k(key), k_len), fold(self.w_v(value), k_len)
        scores = q @ k.transpose(1, 2) / math.sqrt(d_model // h)
        if mask is not None:
            m = mask.expand(batch, 1, q_len, k_len)[:, 0].repeat_interleave(h, dim=0)
            scores = scores.masked_fill(~m, float("-inf"))
        weights = scores.softmax(-1).nan_to_num(0.0)
        out = (weights @ v).view(h, batch, q_len, -1).permute(1, 2, 0, 3).reshape(batch, q_len, d_model)
        weights = weights.view(h, batch, q_len, k_len).transpose(0, 1)
        return self.w_o(out), (weights if need_weights else None)


@wrong("MultiHeadAttention.read_seq_first")
class SequenceFirst(MultiHeadAttention):  # nn.MultiheadAttention's (seq, batch, d_model)
    def forward(self, query, key, value, mask=None, need_weights=False):
        tgt_len, bsz, d_model = query.shape
        src_len, h = key.size(0), self.n_heads
        d_head = d_model // h
        q = self.w_q(query).reshape(tgt_len, bsz * h, d_head).transpose(0, 1)
        k = self.w_k(key).reshape(src_len, bsz * h, d_head).transpose(0, 1)
        v = self.w_v(value).reshape(src_len, bsz * h, d_head).transpose(0, 1)
        weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_head), dim=-1)
        out = (weights @ v).transpose(0, 1).reshape(tgt_len, bsz, d_model)
        weights = weights.view(bsz, h, tgt_len, src_len)
        return self.w_o(out), (weights if need_weights else None)
