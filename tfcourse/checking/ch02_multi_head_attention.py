"""Exercise 02: multi-head attention (split_heads, merge_heads, MultiHeadAttention.forward),
their cases and their catalogue of mistakes."""

import dataclasses
import math
from itertools import permutations, product

import torch

from ..attention import scaled_dot_product_attention as attend
from ..masks import causal_mask
from ..multi_head import MultiHeadAttention, merge_heads, split_heads
from .ch01_attention import FULLY_MASKED
from .comparison import describe
from .errors import shape_error
from .mistakes import Mistake, laddered, member
from .pipeline import Case, Item

EXERCISE = "ex02_multi_head_attention"

# ---------------------------------------------------------------------------------------
# Wrong ways to split and merge heads


def _split_without_transpose(x, n_heads):
    """A single view to (batch, heads, seq, d_head): each head gets rows of several positions."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, n_heads, seq, d_model // n_heads)


def _split_heads_last(x, n_heads):
    """(batch, seq, heads, d_head): the transpose forgotten altogether."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads)


def _split_strided(x, n_heads):
    """Head i gets the features i, i + heads, i + 2 heads, ... instead of a contiguous slice."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def _split_features_first(x, n_heads):
    """(batch, heads, d_head, seq): the positions and the features of each head swapped."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads).permute(0, 2, 3, 1)


def _split_folded(x, n_heads):
    """(batch * heads, seq, d_head): the heads folded into the batch, as torch.nn does."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads).transpose(1, 2).reshape(
        batch * n_heads, seq, d_model // n_heads)


def _split_folded_by_view(x, n_heads):
    """(batch * heads, seq, d_head) by a single view, without the transpose: folded, and the
    positions mixed too."""
    batch, seq, d_model = x.shape
    return x.reshape(batch * n_heads, seq, d_model // n_heads)


def _split_folded_heads_major(x, n_heads):
    """(heads * batch, seq, d_head): folded head-major, row h * batch + b."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads).permute(2, 0, 1, 3).reshape(
        n_heads * batch, seq, d_model // n_heads)


def _split_count_and_width_swapped(x, n_heads):
    """(batch, d_head, seq, heads): the last axis cut as (d_head, heads), then transposed."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, d_model // n_heads, n_heads).transpose(1, 2)


def _split_transpose_first(x, n_heads):
    """The positions and features transposed first, then one view: both mixed."""
    batch, seq, d_model = x.shape
    return x.transpose(1, 2).reshape(batch, n_heads, seq, d_model // n_heads)


def _split_heads_batch_major(x, n_heads):
    """(batch * heads, seq, d_head), flattened batch-major (row b * heads + h), read back as
    (heads, batch, seq, d_head): heads get the features of other sequences (torch's seq-first
    (seq, batch * heads, d_head) detour, unflattened in the wrong order)."""
    batch, seq, d_model = x.shape
    folded = x.transpose(0, 1).reshape(seq, batch * n_heads, d_model // n_heads).transpose(0, 1)
    return folded.reshape(n_heads, batch, seq, d_model // n_heads).transpose(0, 1)


def _merge_without_transpose(x):
    """(batch, heads, seq, d_head) viewed straight to (batch, seq, d_model): positions mixed."""
    batch, heads, seq, d_head = x.shape
    return x.reshape(batch, seq, heads * d_head)


def _merge_feature_major(x):
    """The last two axes swapped before the reshape: features and positions mixed."""
    batch, heads, seq, d_head = x.shape
    return x.transpose(2, 3).reshape(batch, seq, heads * d_head)


def _merge_strided(x):
    """Heads interleaved feature by feature instead of concatenated."""
    batch, heads, seq, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, seq, heads * d_head)


def _merge_concatenated(dim):
    """The heads concatenated along axis `dim` of each head's (batch, seq, d_head), not the
    features: torch.cat([x[:, h] for h in heads], dim)."""
    return lambda x: torch.cat(x.unbind(1), dim=dim)


def _merge_heads_last(x):
    """(batch, seq, heads, d_head), split without any transpose, flattened back: right for
    that layout, but attention ran over the heads axis as if it were the positions."""
    return x.flatten(2)


def _merge_by_view(x):
    """view after the transpose: raises, the transposed tensor is not contiguous."""
    batch, heads, seq, d_head = x.shape
    return x.transpose(1, 2).view(batch, seq, heads * d_head)


SPLIT_WITHOUT_TRANSPOSE = Mistake(
    "split_without_transpose", "Heads split by view without the transpose",
    "view (batch, seq, d_model) as (batch, seq, heads, d_head) first, then swap axes 1 and 2. "
    "A single view to (batch, heads, seq, d_head) fills each head with pieces of several "
    "positions: positions get mixed.",
    (_split_without_transpose, _split_heads_last),
)
SPLIT_UNFLATTENED_HEADS_FIRST = Mistake(
    "batch_heads_unflattened", "Batch and heads unflattened in the wrong order",
    "heads folded into the batch, (batch * heads, ...), are batch-major: row b * heads + h is "
    "sequence b's head h (whether they came from (batch, seq, ...) or, as in torch's own "
    "multi-head attention, from the seq-first (seq, batch * heads, d_head)). Reading that axis "
    "back as (heads, batch) gives heads the features of other sequences: unflatten an axis in "
    "the order it was flattened, or keep the batch first and never fold it.",
    (_split_heads_batch_major,),
)
SPLIT_STRIDED = Mistake(
    "split_strided", "Head features taken with a stride",
    "head i must get the contiguous features i * d_head ... (i + 1) * d_head - 1: cut the last "
    "axis as (heads, d_head), not (d_head, heads).",
    (_split_strided,),
)
SPLIT_AXES = Mistake(
    "split_axes", "Heads split onto the wrong axes",
    "the result is (batch, heads, seq, d_head): after the view to (batch, seq, heads, d_head), "
    "swap axes 1 and 2 only (transpose(1, 2)); the features stay last.",
    (_split_features_first,),
)
SPLIT_FOLDED = Mistake(
    "split_folded", "Heads folded into the batch",
    "return (batch, heads, seq, d_head), 4-D: torch.nn.MultiheadAttention folds the heads into "
    "the batch axis, (batch * heads, seq, d_head); this course keeps them on an axis of their own.",
    (_split_folded, _split_folded_by_view, _split_folded_heads_major),
)
SPLIT_SWAPPED = Mistake(
    "split_count_width_swapped", "Number of heads and head width swapped",
    "cut d_model as (n_heads, d_head): view(batch, seq, n_heads, d_head), or -1 in place of "
    "d_head; then transpose(1, 2).",
    (_split_count_and_width_swapped,),
)
SPLIT_TRANSPOSE_FIRST = Mistake(
    "transpose_before_view", "Transposed before the view",
    "view (batch, seq, d_model) as (batch, seq, heads, d_head) FIRST, then transpose(1, 2): "
    "transposed first, the features come before the positions and the view mixes them.",
    (_split_transpose_first,),
)
MERGE_ORDER = Mistake(
    "merge_order", "Heads merged in the wrong order",
    "first bring (batch, heads, seq, d_head) back to (batch, seq, heads, d_head) (swap axes 1 "
    "and 2), then reshape to (batch, seq, d_model): each position concatenates its own heads, "
    "head 0 first.",
    (_merge_without_transpose, _merge_feature_major, _merge_strided),
)
MERGE_CONCATENATED = Mistake(
    "concatenated_wrong_axis", "Heads concatenated along the {axis} axis",
    "Concat(head_1, ..., head_h) puts each position's heads side by side, along the "
    "features: (batch, seq, heads * d_head). Concatenated along the {axis} axis, the heads "
    "come one after another as extra {rows}.",
    (member(_merge_concatenated(1), axis="sequence", rows="positions"),
     member(_merge_concatenated(0), axis="batch", rows="sequences")),
)
MERGE_BY_VIEW = Mistake(
    "view_after_transpose", "view after a transpose",
    "after transpose(1, 2) the numbers are no longer laid out in memory in the new order, so "
    "`view` refuses: use `reshape` (or `.contiguous().view(...)`).",
    (_merge_by_view,),
)


# ---------------------------------------------------------------------------------------
# Wrong ways to write MultiHeadAttention.forward


def _linear(layer, x, how):
    """A projection as the learner wrote it: the layer, or by hand with its weight."""
    if how == "layer":
        return layer(x)
    bias = layer.bias if layer.bias is not None and how == "untransposed" else 0
    return x @ layer.weight + bias if how.startswith("untransposed") else x @ layer.weight.T


def _forward(mha, query, key, value, mask=None, need_weights=True, *, split=split_heads,
             merge=merge_heads, roles="qkv", out_role="o", inputs=None, scale=None,
             adapt_mask=None, fill=None, empty_rows=True, project=True, average=False,
             linear="layer", heads=None, weights_when=None, dim=-1, drop=0.0, added=False,
             o_on_values=False, after=False):
    """The reference's forward, with the variations that mistakes make.

    roles: which projection (w_q, w_k or w_v) is applied to the query, key and value;
    inputs: which tensors ("q", "k", "v") go in as query, key and value; scale: d -> what the
    scores are divided by (d_head by default); heads: the number of heads split into; added:
    the mask added as (~mask) * fill; o_on_values: w_o applied to the projected values (and
    not after the merge); after: the masked weights zeroed after the softmax (not renormalized)."""
    projection = {"q": mha.w_q, "k": mha.w_k, "v": mha.w_v, "o": mha.w_o}
    given = {"q": query, "k": key, "v": value}
    xs = (query, key, value) if inputs is None else tuple(given[i] for i in inputs)
    n_heads = mha.n_heads if heads is None else heads
    d_head = query.size(-1) // n_heads
    q, k, v = (_linear(projection[r], x, linear) for r, x in zip(roles, xs))
    if o_on_values:
        v, project = projection["o"](v), False
    q, k, v = (split(x, n_heads) for x in (q, k, v))
    if mask is not None and adapt_mask is not None:
        mask = adapt_mask(mask, q)
    if (scale is None and fill is None and empty_rows and dim == -1 and not drop and not added
            and not after):
        out, weights = attend(q, k, v, mask)
    else:
        d = scale(d_head, mha) if scale is not None else d_head
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (batch, heads, q_len, k_len)
        if mask is not None and added:
            scores = scores + (~mask).to(scores.dtype) * fill
        elif mask is not None and not after:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min if fill is None else fill)
        weights = torch.softmax(scores, dim=dim)
        if mask is not None and after:
            weights = weights.masked_fill(~mask, 0.0)
        if mask is not None and empty_rows:
            weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        if drop:  # F.dropout(weights, p): on whatever the mode
            weights = torch.nn.functional.dropout(weights, drop)
        out = weights @ v
    out = merge(out)  # (batch, q_len, d_model)
    if project:
        out = _linear(projection[out_role], out, linear)
    weights = weights.mean(1) if average else weights
    wanted = need_weights if weights_when is None else weights_when
    return out, (weights if wanted else None)


def _variant(**changes):
    return lambda mha, q, k, v, mask=None, need_weights=True: _forward(
        mha, q, k, v, mask, need_weights, **changes)


def _mask_repeated(mask, q):
    """The mask flattened to (batch * heads, ...) with repeat: batch b, head h gets the mask
    of batch (b * heads + h) % batch."""
    batch, heads, q_len, _ = q.shape
    per_batch = mask.expand(batch, 1, q_len, mask.size(-1))[:, 0]  # (batch, q_len, k_len)
    return per_batch.repeat(heads, 1, 1).view(batch, heads, q_len, -1)


def _mask_interleaved(mask, q):
    """The mask repeated batch-major (repeat_interleave: m0, m0, m1, m1) for scores folded
    head-major (row h * batch + b is head h of sequence b): batch b, head h gets the mask of
    batch (h * batch + b) // heads."""
    batch, heads, q_len, _ = q.shape
    per_batch = mask.expand(batch, 1, q_len, mask.size(-1))[:, 0]  # (batch, q_len, k_len)
    rows = per_batch.repeat_interleave(heads, 0)  # (batch * heads, q_len, k_len), batch-major
    return rows.view(heads, batch, q_len, -1).transpose(0, 1)


def _split_by_query_length(query):
    """split_heads that takes the sequence length from the query (a self-attention habit)."""
    batch, seq, _ = query.shape

    def split(x, n_heads):
        return x.view(batch, seq, n_heads, x.size(-1) // n_heads).transpose(1, 2)

    return split


def _with_query_length(mha, query, key, value, mask=None, need_weights=True):
    return _forward(mha, query, key, value, mask, need_weights,
                    split=_split_by_query_length(query))


def _one_head(scale, squeeze):
    """Attention over all d_model features at once; its weights (batch, q_len, k_len) when
    `squeeze`, else (batch, 1, q_len, k_len)."""

    def compute(mha, q, k, v, mask=None, need_weights=True):
        out, weights = _forward(mha, q, k, v, mask, need_weights, heads=1, scale=scale)
        return out, (weights[:, 0] if squeeze and weights is not None else weights)

    return compute


def _roles_repeated():
    """Every assignment of projections to (query, key, value) that uses one of them twice."""
    return tuple("".join(r) for r in product("qkv", repeat=3) if len(set(r)) < 3)


def _without_mask(case, error):
    """The same case without its mask (for an error on a masked case)."""
    query, key, value, mask = case.args
    if mask is None or not shape_error(error):
        return None
    return dataclasses.replace(case, args=(query, key, value, None))


def _equal_lengths(case, error):
    """The same case with key and value cut to the query's length, and no mask."""
    query, key, value, mask = case.args
    if key.size(1) <= query.size(1) or not shape_error(error):
        return None
    q_len = query.size(1)
    return dataclasses.replace(case, args=(query, key[:, :q_len], value[:, :q_len], None))


MASK_REPEATED = Mistake(
    "mask_repeated", "Mask repeated over the heads in the wrong order",
    "scores folded to (batch * heads, ...) batch-major (row b * heads + h is sequence b, head "
    "h) need each sequence's mask heads times in a row (m0, m0, m1, m1: repeat_interleave); "
    "folded head-major (row h * batch + b, as nn.MultiheadAttention's view(..., bsz * "
    "num_heads, ...) after a transpose gives) they need the masks tiled (m0, m1, m0, m1: "
    "repeat). The other order gives heads another sequence's padding. Or make no copy at all: "
    "the (batch, 1, 1, k_len) mask broadcasts over the heads axis as it is.",
    tuple(_variant(adapt_mask=adapt, fill=fill) for adapt in (_mask_repeated, _mask_interleaved)
          for fill in (None, float("-inf"), -1e9)),
)
MASK_HEADS = Mistake(
    "mask_heads", "Mask not broadcast over heads",
    "the mask, e.g. (batch, 1, 1, k_len) or (q_len, k_len), already broadcasts to the scores' "
    "(batch, heads, q_len, k_len); the heads axis is axis 1. Inserting an axis elsewhere, or "
    "repeating the mask for (batch * heads), pairs masks with the wrong heads or sequences.",
    tuple(_variant(adapt_mask=adapt, fill=fill)
          for adapt in (lambda m, q: m.unsqueeze(1),
                        lambda m, q: m.unsqueeze(1) if m.dim() < 4 else m,
                        lambda m, q: m.unsqueeze(1) if m.dim() < 3 else m)
          for fill in (None, float("-inf"), -1e9)),
    probe=_without_mask,
)
KEY_LENGTH = Mistake(
    "key_length", "Works only when key and value are as long as the query",
    "in cross-attention k_len differs from q_len: split key and value with their own length "
    "(or -1 in view), not the query's.",
    (_with_query_length,),
    probe=_equal_lengths,
)
WEIGHTS_NOT_ASKED = Mistake(
    "weights_not_asked", "Weights returned when not asked for",
    "with need_weights=False (the default) return (output, None), as the reference does.",
    (_variant(weights_when=True),),
)
MISTAKES = (
    SPLIT_WITHOUT_TRANSPOSE.computing(_variant(split=_split_without_transpose)),
    Mistake(
        "split_merge_without_transpose", "Heads split and merged by view, without the transposes",
        "{how}. Split: view as (batch, seq, heads, d_head), then swap axes 1 and 2; merge: swap "
        "them back first, then reshape.",
        (member(_variant(split=_split_without_transpose, merge=_merge_without_transpose),
                how="a single view of (batch, seq, d_model) to (batch, heads, seq, d_head) fills "
                "each head with pieces of several positions, and the view back to (batch, seq, "
                "d_model) undoes it, so the round trip looks right: but each head attended over "
                "rows that are not positions"),
         member(_variant(split=_split_heads_last, merge=_merge_heads_last),
                how="left as (batch, seq, heads, d_head), the heads sit where attention expects "
                "the positions: each position's heads attended to one another, and no position "
                "to another")),
    ),
    SPLIT_STRIDED.computing(_variant(split=_split_strided)),
    SPLIT_SWAPPED.computing(_variant(split=_split_count_and_width_swapped)),
    SPLIT_TRANSPOSE_FIRST.computing(_variant(split=_split_transpose_first)),
    MERGE_ORDER.computing(_variant(merge=_merge_without_transpose), _variant(merge=_merge_strided),
                          _variant(merge=_merge_feature_major)),
    MERGE_BY_VIEW.computing(_variant(merge=_merge_by_view)),
    Mistake(
        "no_output_projection", "Output projection missing",
        "MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O: after merging the heads, apply "
        "self.w_o, which mixes what the heads found.",
        (_variant(project=False),),
    ),
    Mistake(
        "output_projection_on_values", "Output projection applied to the values",
        "W^O comes last: it mixes the heads' merged outputs, Concat(head_1, ..., head_h) W^O. "
        "The values get W^V only; apply self.w_o once, after merge_heads.",
        (_variant(o_on_values=True),),
    ),
    Mistake(
        "projection_reused", "One projection used for two roles",
        "w_q, w_k, w_v and w_o are four different projections, one per role: queries "
        "w_q(query), keys w_k(key), values w_v(value), and w_o after the merge. A copy-pasted "
        "line probably still names the first one.",
        tuple(_variant(roles=r) for r in _roles_repeated())
        + tuple(_variant(out_role=o) for o in "qkv"),
    ),
    Mistake(
        "qkv_mixed_up", "Query, key and value mixed up",
        "queries are w_q(query), keys w_k(key), values w_v(value). In cross-attention these "
        "are three different tensors: keys and values do not come from the query.",
        tuple(_variant(roles="".join(r)) for r in permutations("qkv") if r != tuple("qkv"))
        + tuple(_variant(inputs="".join(i)) for i in product("qkv", repeat=3) if i != tuple("qkv")),
    ),
    Mistake(
        "weight_untransposed", "Linear layer written as x @ weight",
        "nn.Linear stores its weight as (out_features, in_features) and computes x @ weight.T + "
        "bias. Call the layer, self.w_q(x), rather than write the paper's X W^Q with its weight.",
        (_variant(linear="untransposed"), _variant(linear="untransposed_no_bias")),
    ),
    Mistake(
        "bias_dropped", "Projection biases left out",
        "each projection is a whole nn.Linear, x @ weight.T + bias (the paper's equations leave "
        "the biases out, its model has them): call the layers, self.w_q(x), ..., self.w_o(x).",
        (_variant(linear="transposed_no_bias"),),
    ),
    Mistake(
        "softmax_wrong_axis", "Softmax over the wrong axis",
        "each query's weights are a softmax over the keys: the last axis of the scores "
        "(batch, heads, q_len, k_len), dim=-1.",
        tuple(_variant(dim=d, fill=float("-inf")) for d in (1, -2, 0, 2)),
    ),
    Mistake(
        "scaled_by_d_model", "Scaled by sqrt(d_model) instead of sqrt(d_head)",
        "each head compares queries and keys of d_head = d_model / n_heads features, so its "
        "scores are divided by sqrt(d_head). The input's width, query.size(-1), is d_model: "
        "take the width after the split.",
        (_variant(scale=lambda d, mha: d * mha.n_heads),),
    ),
    Mistake(
        "scaled_by_d_head", "Scaled by d_head instead of sqrt(d_head)",
        "divide the scores by sqrt(d_head), once. (Dividing the queries by sqrt(d_head) and then "
        "calling attention, which scales again, divides by d_head.)",
        (_variant(scale=lambda d, mha: d * d), _variant(scale=lambda d, mha: (d * mha.n_heads) ** 2)),
    ),
    Mistake(
        "no_scaling", "Scores not scaled",
        "divide each head's Q K^T by sqrt(d_head), as in chapter 01.",
        (_variant(scale=lambda d, mha: 1.0),),
    ),
    Mistake(
        "heads_not_split", "Heads not split",
        "project, then split d_model into n_heads heads of d_head features, each attending on "
        "its own: weights (batch, heads, q_len, k_len). One attention over all d_model features "
        "is a single head.",
        tuple(_one_head(scale, squeeze) for scale in (None, lambda d, mha: mha.d_head)
              for squeeze in (False, True)),
    ),
    Mistake(
        "mask_inverted", "Mask polarity inverted",
        "True means 'may attend' here, as in F.scaled_dot_product_attention (torch.nn."
        "MultiheadAttention takes the opposite): pass the mask on without inverting it.",
        (_variant(adapt_mask=lambda m, q: ~m), _variant(adapt_mask=lambda m, q: ~m, fill=-1e9,
                                                        empty_rows=False)),
    ),
    Mistake(
        "mask_after_softmax", "Mask applied after the softmax",
        "zeroing the masked weights after the softmax (torch.where(mask, weights, 0), a JAX "
        "habit) leaves rows that no longer sum to 1: the masked keys still took their share of "
        "the normalizer. Mask the scores before the softmax, or pass the mask on to the attention.",
        (_variant(after=True),),
    ),
    Mistake(
        "mask_ignored", "Mask ignored",
        "your output is the same as with no mask: pass `mask` on to the attention.",
        (lambda mha, q, k, v, m=None, need_weights=True: _forward(mha, q, k, v, None, need_weights),),
    ),
    MASK_REPEATED,
    MASK_HEADS,
    Mistake(
        "dropout_in_eval", "Dropout applied in eval mode",
        "F.dropout(weights, p) drops in every mode (its `training` is True by default): use "
        "self.dropout, which drops only in training mode (the checks run in eval mode).",
        tuple(_variant(drop=p) for p in (0.1, 0.2, 0.5, 0.3)),
    ),
    Mistake(
        "weights_averaged", "Weights averaged over heads",
        "return the weights of every head, (batch, heads, q_len, k_len), not their mean "
        "(torch.nn.MultiheadAttention averages by default; the reference does not).",
        (_variant(average=True),),
    ),
    Mistake(
        "weights_not_returned", "Weights not returned",
        "with need_weights=True return (output, weights), the weights of every head "
        "(batch, heads, q_len, k_len).",
        (_variant(weights_when=False),),
    ),
    WEIGHTS_NOT_ASKED,
    FULLY_MASKED.computing(
        _variant(fill=float("-inf"), empty_rows=False),
        _variant(fill=-1e9, empty_rows=False),
        _variant(empty_rows=False),
    ),
    KEY_LENGTH,
    Mistake(
        "fill_not_low_enough", "Masked scores filled with a number real scores can go below",
        "a masked key must lose against every allowed key, however large the scores: on scores "
        "of the order of 10^6 your fill value is no longer the lowest, and masked keys take "
        "the weight. Fill with float('-inf') (or torch.finfo(scores.dtype).min).",
        tuple(_variant(fill=fill) for fill in (-1e4, -1e3, -1e2, -1e5, -65504.0, -3e4, -5e4))
        + tuple(_variant(fill=fill, added=True) for fill in (-1e4, -1e3, -1e5, -65504.0)),
    ),
)


# ---------------------------------------------------------------------------------------
# Cases


def _lengths_mask(lengths, k_len):
    """(batch, 1, 1, k_len): keys beyond each sequence's length are padding."""
    return (torch.arange(k_len) < torch.tensor(lengths)[:, None])[:, None, None, :]


def _mha_case(seed, d_model, n_heads, batch, q_len, k_len=None, mask=None, bias=True,
              need_weights=True, magnitude=1.0):
    """`magnitude`: the inputs scaled by it (the scores by about its square)."""
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, q_len, d_model, generator=g) * magnitude
    if k_len is None:  # self-attention: key and value are the query
        key = value = query
    else:
        key = torch.randn(batch, k_len, d_model, generator=g) * magnitude
        value = torch.randn(batch, k_len, d_model, generator=g)
    label = describe(query=query, key=key, value=value, mask=mask)
    if magnitude != 1.0:
        label += f" (inputs as large as {float(query.abs().max()):.0f}, so the scores are huge)"
    label += f" (d_model={d_model}, n_heads={n_heads}" + (")" if need_weights else ", need_weights=False)")
    return Case((query, key, value, mask), {"need_weights": need_weights}, label=label,
                names=("query", "key", "value", "mask"), init=(d_model, n_heads),
                init_kwargs={} if bias else {"bias": False}, seed=seed)


# Unmasked cases first (self, then cross), then masks whose rows mix True and False:
# padding (batch, 1, 1, k_len); causal (q_len, k_len) with q_len == heads, so that a mask
# unsqueezed on axis 1 still broadcasts (to the wrong heads); padding & causal; a sequence
# made only of padding; last, need_weights=False.
MHA_CASES = [
    _mha_case(0, d_model=12, n_heads=3, batch=2, q_len=5),
    _mha_case(1, d_model=8, n_heads=2, batch=3, q_len=4, bias=False),
    _mha_case(2, d_model=12, n_heads=3, batch=2, q_len=3, k_len=6),
    _mha_case(3, d_model=12, n_heads=3, batch=2, q_len=5, mask=_lengths_mask([5, 3], 5)),
    _mha_case(4, d_model=16, n_heads=4, batch=2, q_len=4, mask=causal_mask(4)),
    _mha_case(5, d_model=8, n_heads=2, batch=3, q_len=3, k_len=6, mask=_lengths_mask([6, 4, 2], 6)),
    _mha_case(6, d_model=12, n_heads=3, batch=2, q_len=5, mask=_lengths_mask([5, 2], 5) & causal_mask(5)),
    _mha_case(7, d_model=8, n_heads=2, batch=2, q_len=3, k_len=4, mask=_lengths_mask([0, 3], 4)),
    _mha_case(0, d_model=12, n_heads=3, batch=2, q_len=5, need_weights=False),
    # scores of the order of 10^6: a finite fill above -10^6 no longer masks
    _mha_case(8, d_model=8, n_heads=2, batch=2, q_len=5, k_len=6, mask=_lengths_mask([2, 5], 6),
              magnitude=1000.0),
]


def _randn(seed, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _split_case(x, n_heads, seed):
    return Case((x, n_heads), names=("x", None), label=describe(x=x, n_heads=n_heads), seed=seed)


SPLIT_CASES = [
    _split_case(_randn(10, 2, 5, 12), 3, 10),
    _split_case(_randn(11, 1, 7, 8), 4, 11),
    _split_case(_randn(12, 3, 4, 6, dtype=torch.float64), 2, 12),
]
MERGE_CASES = [Case((x,), names=("x",), seed=seed) for seed, x in (
    (20, _randn(20, 2, 3, 5, 4)), (21, _randn(21, 1, 4, 7, 2)),
    (22, _randn(22, 3, 2, 4, 3, dtype=torch.float64)))]

# The second hint (check(..., hint=2)) and the section that teaches the step, by mistake.
_NB = "02_multi_head_attention"
_SPLIT = (_NB, "Split: `(batch, seq, d_model)` → `(batch, heads, seq, d_head)`")
_ATTEND = (_NB, "Attend in every head at once")
_MERGE = (_NB, "Merge, then project")
_MASKS = (_NB, "Masks, and their polarity")
_ROLES = (_NB, "4. Self-attention and cross-attention")
_LADDER = {
    "split_without_transpose": (_SPLIT, "run split_heads on torch.arange(12.).view(1, 3, 4) with 2 "
                                "heads and print head 0: it should hold the first two features "
                                "of each of the 3 positions, nothing else."),
    "batch_heads_unflattened": (_SPLIT, "on x = torch.arange(8.).view(2, 1, 4) (two sequences, one "
                                "position) with 2 heads, print split_heads(x, 2)[0]: sequence "
                                "0's heads must hold only 0 ... 3."),
    "split_merge_without_transpose": (_SPLIT, "split torch.arange(12.).view(1, 3, 4) into 2 heads "
                                      "as your forward does, and print the shape and [:, 0]: "
                                      "(batch, heads, seq, d_head), head 0 holding the first two "
                                      "features of each of the 3 positions, one row per "
                                      "position."),
    "concatenated_wrong_axis": (_MERGE, "print your result's shape next to (batch, seq, heads * "
                                "d_head): which axis grew, and which one should have?"),
    "split_strided": (_SPLIT, "on torch.arange(8.).view(1, 1, 8) with 2 heads, head 0 should be "
                      "[0, 1, 2, 3]: print yours."),
    "split_axes": (_SPLIT, "print the shape after each step: (batch, seq, heads, d_head), then "
                   "(batch, heads, seq, d_head). Which two axes trade places, and only those?"),
    "split_folded": (_SPLIT, "print your result's shape: it must have 4 axes, batch first, "
                     "heads second."),
    "split_count_width_swapped": (_SPLIT, "with d_model=12 and 3 heads, each head has 4 "
                                  "features: print the size of your axis 1 and your last axis."),
    "transpose_before_view": (_SPLIT, "print x.transpose(1, 2).shape for a (1, 3, 4) x: the "
                              "positions are no longer next to their features, so a view "
                              "after it cuts the wrong numbers."),
    "merge_order": (_MERGE, "run merge_heads(split_heads(x, 2)) on torch.arange(12.).view(1, 3, "
                    "4) and compare with x: the round trip must give x back."),
    "view_after_transpose": (_MERGE, "print t.is_contiguous() after the transpose: view needs "
                             "True; reshape copies when it must."),
    "no_output_projection": (_MERGE, "count the nn.Linear layers your forward calls: __init__ "
                             "made four."),
    "output_projection_on_values": (_MERGE, "list the layers in the order your forward calls "
                                    "them: which one comes after merge_heads?"),
    "projection_reused": (None, "print which of self.w_q, self.w_k, self.w_v, self.w_o each line "
                          "of your forward calls: each must appear exactly once."),
    "qkv_mixed_up": (_ROLES, "run a cross-attention case (key longer than query) and print the "
                     "shapes of q, k and v after the projections: k and v must have key's "
                     "length."),
    "weight_untransposed": (None, "print self.w_q.weight.shape: (out_features, in_features). "
                            "What does the layer itself compute with it?"),
    "bias_dropped": (None, "print self.w_q.bias: your projections must use it too."),
    "softmax_wrong_axis": (_ATTEND, "print weights.sum(-1): every (batch, head, query) row must "
                           "sum to 1."),
    "scaled_by_d_model": (_ATTEND, "print the number you take the square root of, next to "
                          "self.d_head: the dot products of one head sum over d_head features."),
    "scaled_by_d_head": (_ATTEND, "count how many times your scores get divided: your own "
                         "division, and the attention function's."),
    "no_scaling": (_ATTEND, "print scores.std() in one head: chapter 01's scale brings it "
                   "back to about 1."),
    "heads_not_split": (_SPLIT, "print the shape of the weights you return: a head axis of "
                        "size n_heads must be there."),
    "mask_inverted": (_MASKS, "print mask[0] and weights[0, 0]: the weights must be 0 where the "
                      "mask is False."),
    "mask_after_softmax": (_MASKS, "print weights.sum(-1) for a padded sequence: every row that "
                           "may attend somewhere should sum to 1."),
    "mask_ignored": (_MASKS, "print your weights for a padded sequence: the padding keys must "
                     "get weight 0."),
    "mask_repeated": (_MASKS, "make a batch of 2 whose masks differ, run your mask code on it, "
                      "and print which sequence's mask each (sequence, head) gets."),
    "mask_heads": (_MASKS, "print mask.shape next to scores.shape (batch, heads, q_len, k_len), "
                   "aligned from the right: every axis must be equal or 1."),
    "dropout_in_eval": ((_NB, "Dropout on the attention weights: in the code, not in the paper"),
                        "call your module twice in eval mode on the same input: the outputs "
                        "must be equal."),
    "weights_averaged": (None, "print the shape of the weights you return: the heads axis "
                         "must still be there."),
    "weights_not_returned": (None, "print what your forward returns with need_weights=True: a "
                             "pair, whose second part is a tensor."),
    "weights_not_asked": (None, "print what your forward returns with need_weights=False."),
    "fully_masked": (_MASKS, "give one sequence a mask with no True and print its output: "
                     "NaN, or the average of the values, where 0 is wanted?"),
    "key_length": (_ROLES, "print the shapes of k and v after your split on a case where key "
                   "is longer than query: whose length did you use?"),
    "fill_not_low_enough": (_MASKS, "on the case above print scores.min() and your fill value: "
                            "the fill must lose against every score there is."),
}


SPLIT = Item(
    EXERCISE, "split_heads", split_heads, SPLIT_CASES,
    laddered((SPLIT_WITHOUT_TRANSPOSE, SPLIT_STRIDED, SPLIT_AXES, SPLIT_FOLDED, SPLIT_SWAPPED,
              SPLIT_TRANSPOSE_FIRST, SPLIT_UNFLATTENED_HEADS_FIRST), _LADDER),
    formula="split_heads(x, n)[:, i] must equal x[:, :, i * d_head : (i + 1) * d_head].",
    section=("02_multi_head_attention", "Split: `(batch, seq, d_model)` → `(batch, heads, seq, d_head)`"),
    axes=("batch", "heads", "seq", "d_head"),
)
MERGE = Item(
    EXERCISE, "merge_heads", merge_heads, MERGE_CASES,
    laddered((MERGE_ORDER, MERGE_BY_VIEW, MERGE_CONCATENATED), _LADDER),
    formula="merge_heads(split_heads(x, n)) must give x back.",
    section=("02_multi_head_attention", "Merge, then project"),
    axes=("batch", "seq", "d_model"),
)
MHA = Item(
    EXERCISE, "MultiHeadAttention", MultiHeadAttention, MHA_CASES, laddered(MISTAKES, _LADDER),
    what="the result",
    parts=("output", "weights"), formula="Compare each step with Concat(head_1, ..., head_h) W^O.",
    twins=(_variant(),),
    section=("02_multi_head_attention", "3. Build it, one step at a time"),
    axes=("batch", "seq", "d_model"),
)

ITEMS = (SPLIT, MERGE, MHA)
