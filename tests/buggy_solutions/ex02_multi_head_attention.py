"""Wrong ways to write exercise 02 (split_heads, merge_heads, MultiHeadAttention.forward),
and the diagnosis each must get. Functions named split_* / merge_* are checked as
split_heads / merge_heads; classes as MultiHeadAttention."""

import math
import time

import torch
from torch import nn

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.multi_head import MultiHeadAttention, merge_heads, split_heads

from . import diagnosis

# ---------------------------------------------------------------------------------------
# split_heads


@diagnosis("Heads split by view without the transpose")
def split_view_straight_to_heads(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, n_heads, seq, d_model // n_heads)


@diagnosis("Heads split by view without the transpose")
def split_reshape_minus_one(x, n_heads):
    return x.reshape(x.size(0), n_heads, -1, x.size(-1) // n_heads)


@diagnosis("Heads split by view without the transpose")
def split_transpose_forgotten(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, n_heads, d_model // n_heads)


@diagnosis("Head features taken with a stride")
def split_strided(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, -1, n_heads).permute(0, 3, 1, 2)


@diagnosis("Input modified in place")
def split_in_place(x, n_heads):
    x.mul_(1.0).add_(0.0)
    x[0, 0, 0] = 0.0
    return split_heads(x, n_heads)


@diagnosis("Wrong result of split_heads: the result is None")
def split_forgot_return(x, n_heads):
    split_heads(x, n_heads)


# ---------------------------------------------------------------------------------------
# merge_heads


@diagnosis("Heads merged in the wrong order")
def merge_view_without_transpose(x):
    batch, heads, seq, d_head = x.shape
    return x.view(batch, seq, heads * d_head)


@diagnosis("Heads merged in the wrong order")
def merge_heads_interleaved(x):
    return x.permute(0, 2, 3, 1).flatten(2)


@diagnosis("Heads merged in the wrong order")
def merge_last_axes_swapped(x):
    return x.transpose(-1, -2).reshape(x.size(0), x.size(2), -1)


@diagnosis("Raised RuntimeError: view size is not compatible")
def merge_view_after_transpose(x):
    batch, heads, seq, d_head = x.shape
    return x.transpose(1, 2).view(batch, seq, heads * d_head)


@diagnosis("Wrong result of merge_heads: the result has shape (2, 3, 20), expected (2, 5, 12)")
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


@diagnosis("Heads split by view without the transpose")
class SplitByView(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        b, h = query.size(0), self.n_heads
        q = self.w_q(query).view(b, h, -1, self.d_head)
        k = self.w_k(key).view(b, h, -1, self.d_head)
        v = self.w_v(value).view(b, h, -1, self.d_head)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Head features taken with a stride")
class SplitStrided(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        def split(x):
            return x.unflatten(-1, (self.d_head, self.n_heads)).permute(0, 3, 1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Heads merged in the wrong order")
class MergeWithoutTranspose(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        out = out.contiguous().view(query.shape)  # (batch, heads, q_len, d_head) -> (batch, q_len, d_model)
        return self.w_o(out), weights if need_weights else None


@diagnosis("Heads merged in the wrong order")
class MergeHeadsMajor(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        out = torch.stack(out.unbind(1), dim=-1).flatten(2)  # features interleaved across heads
        return self.w_o(out), weights if need_weights else None


@diagnosis("Output projection missing")
class NoOutputProjection(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return merge_heads(out), weights if need_weights else None


@diagnosis("Scaled by sqrt(d_model) instead of sqrt(d_head)")
class ScaledByDModel(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        out, weights = _attend(q, k, v, mask, math.sqrt(self.n_heads * self.d_head))
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Scaled by sqrt(d_model) instead of sqrt(d_head)")
class WidthTakenFromTheInput(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        d_k = query.size(-1)  # the input's width: d_model, not d_head
        q, k, v = self.heads(query, key, value)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / d_k**0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, -1).nan_to_num(0.0)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@diagnosis("Mask not broadcast over heads")
class MaskUnsqueezed(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        if mask is not None:
            mask = mask.unsqueeze(1)  # "same mask for all heads", but it already broadcasts
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Mask not broadcast over heads")
class MaskUnsqueezedInline(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        out, weights = _attend(q, k, v, None if mask is None else mask[:, None], math.sqrt(self.d_head))
        out = out.transpose(1, 2).reshape(query.size(0), query.size(1), -1)
        return self.w_o(out), weights if need_weights else None


@diagnosis("Mask not broadcast over heads")
class MaskUnsqueezedUnlessFourDimensional(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        if mask is not None and mask.dim() < 4:
            mask = mask.unsqueeze(1)  # taken for (batch, k_len) or (batch, q_len, k_len)
        q, k, v = self.heads(query, key, value)
        out, weights = _attend(q, k, v, mask, math.sqrt(self.d_head))
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Mask not broadcast over heads")
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


@diagnosis("Works only when key and value are as long as the query")
class LengthsFromTheQuery(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        batch, seq, _ = query.shape
        q, k, v = (p(x).view(batch, seq, self.n_heads, self.d_head).transpose(1, 2)
                   for p, x in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Query, key and value mixed up")
class KeysAndValuesFromTheQuery(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, query, query), mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Query, key and value mixed up")
class KeyAndValueProjectionsSwapped(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        h = self.n_heads
        q = split_heads(self.w_q(query), h)
        k = split_heads(self.w_v(key), h)
        v = split_heads(self.w_k(value), h)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Mask polarity inverted")
class MaskInverted(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        mask = None if mask is None else mask.logical_not()  # torch.nn's polarity
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Mask ignored")
class MaskIgnored(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value))
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("Weights averaged over heads")
class WeightsAveraged(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights.mean(dim=1) if need_weights else None


@diagnosis("Fully masked query row not handled")
class FullyMaskedGivesNaN(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


@diagnosis("Weights not returned")
class WeightsNeverReturned(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, _ = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), None


@diagnosis("Weights returned when not asked for")
class WeightsAlwaysReturned(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights


@diagnosis("Parameters renamed")
class FusedInputProjection(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.in_proj(query).chunk(3, dim=-1)
        return self.w_o(q), None


@diagnosis("Input modified in place")
class QueryScaledInPlace(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        query /= 1.0  # looks harmless, still writes into the caller's tensor
        query[:, 0] = 0.0
        out, weights = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out)), weights if need_weights else None


@diagnosis("MultiHeadAttention should return a tuple (output, weights), got Tensor")
class ReturnsOnlyTheOutput(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        out, _ = scaled_dot_product_attention(*self.heads(query, key, value), mask)
        return self.w_o(merge_heads(out))


@diagnosis("Raised ZeroDivisionError: division by zero")
class RaisesInInit(_Buggy):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__(d_model, n_heads, dropout, bias)
        self.d_head = 1 / 0


@diagnosis("Too slow")
class EndlessLoop(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        while True:
            time.sleep(0.01)


@diagnosis("Scores not scaled")
class NotScaled(_Buggy):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.heads(query, key, value)
        out, weights = _attend(q, k, v, mask, scale=1.0)
        return self.w_o(merge_heads(out)), weights if need_weights else None
