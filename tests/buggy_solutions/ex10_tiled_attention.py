"""Wrong ways to write tiled attention with an online softmax, and the diagnosis each must get.
Each is written as a learner would write it, in several styles (a loop over `range`,
torch.split, a running sum started at 0); tests/test_efficiency.py proves that right ones in
other styles pass."""

import math

import torch
import torch.nn.functional as F

from . import wrong


@wrong("tiled_attention.builtin")
def builtin(query, key, value, mask=None, block_size=128):
    outputs = []
    for start in range(0, query.size(-2), block_size):  # tiles the queries, lets SDPA do the rest
        rows = slice(start, start + block_size)
        outputs.append(F.scaled_dot_product_attention(
            query[..., rows, :], key, value, None if mask is None else mask[..., rows, :]))
    return torch.cat(outputs, dim=-2)


@wrong("tiled_attention.whole_matrix")
def softmax_over_all_keys(query, key, value, mask=None, block_size=128):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = torch.zeros(*query.shape[:-1], value.size(-1), dtype=query.dtype)
    for start in range(0, key.size(-2), block_size):  # "tiled": only the last product
        out = out + weights[..., start:start + block_size] @ value[..., start:start + block_size, :]
    return out


@wrong("tiled_attention.whole_matrix")
def every_block_kept(query, key, value, mask=None, block_size=128):
    """Each block's scores kept in a list, to find the global max first (two passes)."""
    blocks = []
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], key.size(-2))
    for start in range(0, key.size(-2), block_size):
        s = query @ key[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + block_size], -math.inf)
        blocks.append(s)
    m = torch.stack([b.amax(-1) for b in blocks]).amax(0).unsqueeze(-1)
    m = m.masked_fill(m == -math.inf, 0)
    total = sum(torch.exp(b - m).sum(-1, keepdim=True) for b in blocks)
    out = sum(torch.exp(b - m) @ value[..., i * block_size:(i + 1) * block_size, :]
              for i, b in enumerate(blocks))
    return out / total.clamp_min(1e-30)


@wrong("tiled_attention.whole_matrix")
def all_scores_on_float64_copies(query, key, value, mask=None, block_size=128):
    """Copies of key and value in float64 (which the memory check leaves aside), then all
    the scores at once from them (which it must not)."""
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    out = torch.zeros(*q.shape[:-1], v.size(-1), dtype=torch.float64)
    for start in range(0, k.size(-2), block_size):
        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)[..., start:start + block_size]
        out = out + w @ v[..., start:start + block_size, :]
    return out.to(query.dtype)


def _loop(query, key, value, mask, block_size, scale=None, rescale=lambda r, total, o: (r * total, r * o),
          fill=-math.inf, stop=None, running=True, start=-math.inf, expand=True, end=0,
          upside_down=False):
    """A learner's loop with one knob per mistake below (right where not given): running
    "first" keeps the first block's maximum; end is added to each block's slice end;
    upside_down rescales by e^(m' - m) (1 while m is -inf)."""
    d_k = query.size(-1)
    scale = math.sqrt(d_k) if scale is None else scale
    m = torch.full(query.shape[:-1] + (1,), start, dtype=query.dtype)
    total = torch.zeros_like(m)
    o = torch.zeros(query.shape[:-1] + (value.size(-1),), dtype=query.dtype)
    n = key.size(-2)
    if mask is not None and expand:
        mask = mask.expand(*mask.shape[:-1], n)
    for j in range(0, n if stop is None else stop(n, block_size), block_size):
        block = slice(j, j + block_size + end)
        s = query @ key[..., block, :].transpose(-2, -1) / scale
        if mask is not None:
            s = s.masked_fill(~mask[..., block], fill)
        m_new = s.max(dim=-1, keepdim=True).values
        if running == "first":
            m_new = m_new if j == 0 else m
        elif running:
            m_new = torch.maximum(m, m_new)
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe)
        r = torch.exp(safe - torch.where(torch.isinf(m), safe, m)) if upside_down else torch.exp(m - safe)
        total, o = rescale(r, total, o)
        total = total + p.sum(-1, keepdim=True)
        o = o + p @ value[..., block, :]
        m = m_new
    return o / torch.where(total == 0, torch.ones_like(total), total)


@wrong("tiled_attention.no_scaling")
def no_scaling(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, scale=1.0)


@wrong("tiled_attention.wrong_scale")
def scaled_by_d_k(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, scale=query.shape[-1])


@wrong("tiled_attention.last_block_dropped")
def whole_blocks_only(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, stop=lambda n, b: n // b * b)


@wrong("tiled_attention.last_block_dropped")
def n_blocks_floor(query, key, value, mask=None, block_size=128):
    scale = 1 / math.sqrt(query.size(-1))
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = torch.zeros_like(query[..., :1]) * value[..., :1, :].sum(-2, keepdim=True)
    for b in range(key.size(-2) // block_size):  # forgets the remainder
        keys = slice(b * block_size, (b + 1) * block_size)
        ks, vs = key[..., keys, :], value[..., keys, :]
        s = torch.matmul(query, ks.transpose(-1, -2)) * scale
        if mask is not None:
            s = s.masked_fill(~mask[..., keys], -math.inf)
        new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.nan_to_num(new, neginf=0.0)
        p = (s - shift).exp()
        total = (m - shift).exp() * total + p.sum(-1, keepdim=True)
        o = (m - shift).exp() * o + p @ vs
        m = new
    return o / total.masked_fill(total == 0, 1)


@wrong("tiled_attention.no_rescale")
def not_rescaled(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, rescale=lambda r, total, o: (total, o))


@wrong("tiled_attention.no_rescale")
def output_not_rescaled(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, rescale=lambda r, total, o: (r * total, o))


@wrong("tiled_attention.rescaled_twice")
def rescaled_twice(query, key, value, mask=None, block_size=128):
    def twice(r, total, o):
        total, o = r * total, r * o
        return r * total, r * o  # "and rescale the old part"

    return _loop(query, key, value, mask, block_size, rescale=twice)


@wrong("tiled_attention.max_not_updated")
def max_not_updated(query, key, value, mask=None, block_size=128):
    scale = query.size(-1) ** -0.5
    m = torch.full(query.shape[:-1] + (1,), -math.inf, dtype=query.dtype)
    total = torch.zeros_like(m)
    o = 0
    for keys, values, j in zip(key.split(block_size, -2), value.split(block_size, -2),
                               range(0, key.size(-2), block_size)):
        s = query @ keys.transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.max(m, s.amax(-1, keepdim=True))
        safe = m_new.nan_to_num(neginf=0.0)
        alpha = torch.exp(m - safe)
        p = torch.exp(s - safe)
        total = alpha * total + p.sum(-1, keepdim=True)
        o = alpha * o + p @ values
        # (forgot: m = m_new)
    return o / total.masked_fill(total == 0, 1.0)


@wrong("tiled_attention.normalised_per_block")
def softmax_per_block(query, key, value, mask=None, block_size=128):
    out = 0
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        out = out + torch.softmax(s, dim=-1).nan_to_num(0.0) @ value[..., j:j + block_size, :]
    return out


@wrong("tiled_attention.normalised_per_block")
def per_block_softmax_rescaled_averaged(query, key, value, mask=None, block_size=128):
    k_len = key.size(-2)  # a real wrong solution's
    scale = 1 / math.sqrt(query.size(-1))
    lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    m = query.new_full((*lead, query.size(-2), 1), -math.inf)
    o = query.new_zeros((*lead, query.size(-2), value.size(-1)))
    for start in range(0, k_len, block_size):
        blk = slice(start, start + block_size)
        s = query @ key[..., blk, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~mask.expand(*mask.shape[:-1], k_len)[..., blk], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe)
        bl = p.sum(-1, keepdim=True)
        o = torch.exp(m - safe) * o + (p / bl.clamp(min=1e-30)) @ value[..., blk, :]
        m = m_new
    return o / max(1, math.ceil(k_len / block_size))


@wrong("tiled_attention.normalised_per_block")
def per_block_softmax_rescaled_summed(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.masked_fill(m_new.isinf(), 0)
        weights = torch.softmax(s, dim=-1).nan_to_num(0.0)
        o = torch.exp(m - shift) * o + weights @ value[..., j:j + block_size, :]
        m = m_new
    return o


@wrong("tiled_attention.normalised_per_block")
def divided_inside_the_loop(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.masked_fill(m_new.isinf(), 0)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ value[..., j:j + block_size, :]
        o = o / total.masked_fill(total == 0, 1)  # normalise as we go
        m = m_new
    return o


@wrong("tiled_attention.not_divided")
def not_divided_loop(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.masked_fill(m_new.isinf(), 0)
        o = torch.exp(m - shift) * o + torch.exp(s - shift) @ value[..., j:j + block_size, :]
        m = m_new
    return o


@wrong("tiled_attention.mask_inverted")
def mask_inverted(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, None if mask is None else ~mask, block_size)


@wrong("tiled_attention.mask_ignored")
def mask_ignored(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, None, block_size)


@wrong("tiled_attention.mask_of_first_block")
def mask_of_the_first_block(query, key, value, mask=None, block_size=128):
    n = key.size(-2)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], n)
    m = query.new_full((*query.shape[:-1], 1), -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros((*query.shape[:-1], value.size(-1)))
    for j in range(0, n, block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., :s.size(-1)], -math.inf)  # the first block's columns
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = m_new.masked_fill(m_new == -math.inf, 0.0)
        p, r = torch.exp(s - safe), torch.exp(m - safe)
        total = r * total + p.sum(-1, keepdim=True)
        o = r * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total.masked_fill(total == 0, 1.0)


@wrong("tiled_attention.masked_to_zero")
def masked_to_zero(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, fill=0.0)


@wrong("tiled_attention.masked_in_sum")
def masked_in_sum(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        total = torch.exp(m - m_new) * total + p.sum(-1, keepdim=True)
        if mask is not None:
            p = p * mask[..., j:j + block_size]  # mask applied to the values' weights only
        o = torch.exp(m - m_new) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total


@wrong("tiled_attention.fully_masked_block_nan")
def no_guard(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        total = torch.exp(m - m_new) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - m_new) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total


@wrong("tiled_attention.empty_row")
def finite_fill(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, fill=-1e9)


@wrong("tiled_attention.empty_row")
def zero_over_zero(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.where(m_new == -math.inf, 0.0, m_new)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total


@wrong("tiled_attention.max_not_subtracted")
def no_max(query, key, value, mask=None, block_size=128):
    total, o = 0, 0
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        p = s.exp()  # no max needed: e^-inf = 0 already
        total = total + p.sum(-1, keepdim=True)
        o = o + p @ value[..., j:j + block_size, :]
    return o / torch.where(total == 0, 1.0, total)


@wrong("tiled_attention.block_max_only")
def block_max_only(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = s.amax(-1, keepdim=True)  # this block's max
        shift = m_new.masked_fill(m_new == -math.inf, 0)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total.masked_fill(total == 0, 1)


@wrong("tiled_attention.masked_max")
def mask_after_exp(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        if mask is not None:
            p = p * mask[..., j:j + block_size]  # no -inf, so no NaN
        total = torch.exp(m - m_new) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - m_new) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total.clamp(min=torch.finfo(total.dtype).tiny)


@wrong("tiled_attention.masked_max")
def max_before_mask(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        p = torch.exp(s - m_new)
        total = torch.exp(m - m_new) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - m_new) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return torch.where(total > 0, o / total, 0.0)


@wrong("tiled_attention.in_place")
def accumulates_into_query(query, key, value, mask=None, block_size=128):
    query /= math.sqrt(query.size(-1))  # scale once, up front
    return _loop(query, key, value, mask, block_size, scale=1.0)


@wrong("tiled_attention.no_gradient")
def under_no_grad(query, key, value, mask=None, block_size=128):
    with torch.no_grad():  # "tiling saves memory: no autograd graph either"
        return _loop(query, key, value, mask, block_size)


@wrong("tiled_attention.keepdim")
def no_keepdim(query, key, value, mask=None, block_size=128):
    m = torch.full(query.shape[:-1] + (1,), -math.inf, dtype=query.dtype)
    total, o = torch.zeros_like(m), 0
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.max(dim=-1).values)
        shift = m_new.nan_to_num(neginf=0.0)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total.masked_fill(total == 0, 1.0)


@wrong("tiled_attention.block_slice_end")
def block_slice_end(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total, o = torch.zeros_like(m), 0
    for start in range(0, key.size(-2), block_size):
        k_b, v_b = key[..., start:block_size, :], value[..., start:block_size, :]
        s = query @ k_b.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., start:block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.nan_to_num(neginf=0.0)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ v_b
        m = m_new
    return o / total.masked_fill(total == 0, 1.0)


@wrong("tiled_attention.nan_from_start")
def factor_upside_down(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size,
                 rescale=lambda r, total, o: (total / r, o / r))  # e^(m' - m)


@wrong("tiled_attention.old_max_in_exp")
def exps_with_the_old_max(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total, o = torch.zeros_like(m), 0
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        p = torch.exp(s - m.nan_to_num(neginf=0.0))  # before m is updated
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        r = torch.exp(m - m_new.nan_to_num(neginf=0.0))
        total = r * total + p.sum(-1, keepdim=True)
        o = r * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total.masked_fill(total == 0, 1.0)


@wrong("tiled_attention.value_block")
def first_values_every_time(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total, o = torch.zeros_like(m), 0
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.nan_to_num(neginf=0.0)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ value[..., :block_size, :]
        m = m_new
    return o / total.masked_fill(total == 0, 1.0)


@wrong("tiled_attention.key_axes")
def key_transposed_1_2(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total, o = torch.zeros_like(m), 0
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(1, 2) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.nan_to_num(neginf=0.0)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total.masked_fill(total == 0, 1.0)


@wrong("tiled_attention.output_like_query")
def output_like_query(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total, o = torch.zeros_like(m), torch.zeros_like(query)
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.nan_to_num(neginf=0.0)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total.masked_fill(total == 0, 1.0)


@wrong("tiled_attention.max_not_subtracted")
def no_max_nan_to_num(query, key, value, mask=None, block_size=128):
    total, o = 0, 0
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].mT / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], float("-inf"))
        e = s.exp()
        total = total + e.sum(-1, keepdim=True)
        o = o + e @ value[..., j:j + block_size, :]
    return (o / total).nan_to_num(0.0)  # 0 / 0 for a query that sees no key


@wrong("tiled_attention.max_not_subtracted")
def running_max_kept_but_zero_subtracted(query, key, value, mask=None, block_size=128):
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].mT / math.sqrt(query.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.zeros_like(m_new)  # 0 subtracted, the rescaling e^(m - 0) kept
        p, c = torch.exp(s - safe), torch.exp(m - safe)
        total = c * total + p.sum(-1, keepdim=True)
        o = c * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / torch.where(total == 0, 1.0, total)


# ---------------------------------------------------------------------------------------
# sliding_window_mask(size, window, causal=False)


@wrong("sliding_window_mask.window_too_narrow")
def strict_distance(size, window, causal=False):
    i = torch.arange(size)
    mask = (i[:, None] - i[None, :]).abs() < window
    return mask & (i[None, :] <= i[:, None]) if causal else mask


@wrong("sliding_window_mask.window_too_narrow")
def triangles_of_window_minus_one(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    lower = ones.tril() & ~ones.tril(-window)  # "window keys, itself included"
    return lower if causal else lower | lower.T


@wrong("sliding_window_mask.window_too_wide")
def one_more_diagonal(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    mask = ones.tril(window + 1) & ones.triu(-window - 1)
    return mask.tril() if causal else mask


@wrong("sliding_window_mask.side_off_by_one")
def strict_on_the_right(size, window, causal=False):
    i = torch.arange(size)
    ahead = i[None, :] - i[:, None]  # key minus query
    mask = (ahead >= -window) & (ahead < window)
    return mask & (ahead <= 0) if causal else mask


@wrong("sliding_window_mask.side_off_by_one")
def one_more_diagonal_below(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    mask = ones.tril(window) & ones.triu(-window - 1)
    return mask.tril() if causal else mask


@wrong("sliding_window_mask.mask_polarity")
def blocked_is_true(size, window, causal=False):
    i = torch.arange(size)
    distance = i[:, None] - i[None, :]
    blocked = distance.abs() > window
    return blocked | (distance < 0) if causal else blocked


@wrong("sliding_window_mask.causal_ignored")
def band_only(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    return ones.tril(window) & ones.triu(-window)


@wrong("sliding_window_mask.wrong_side")
def upper_band(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    band = ones.tril(window) & ones.triu(-window)
    return band.triu() if causal else band


@wrong("sliding_window_mask.wrong_side")
def keys_ahead(size, window, causal=False):
    i = torch.arange(size)
    ahead = i[None, :] - i[:, None]  # key minus query
    if causal:
        return (ahead >= 0) & (ahead <= window)
    return ahead.abs() <= window


@wrong("sliding_window_mask.causal_or_window")
def causal_or_band(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    band = ones.tril(window) & ones.triu(-window)
    return band | ones.tril() if causal else band


@wrong("sliding_window_mask.window_dropped")
def causal_mask_alone(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    if causal:
        return ones.tril()
    return ones.tril(window) & ones.triu(-window)


@wrong("sliding_window_mask.not_bool")
def float_band(size, window, causal=False):
    i = torch.arange(size)
    distance = i[:, None] - i[None, :]
    ok = (distance.abs() <= window).float()
    return ok * (distance >= 0).float() if causal else ok


@wrong("tiled_attention.block_max_only")
def each_block_its_own_max_no_rescale(query, key, value, mask=None, block_size=128):
    """Each block's exps relative to its own max, summed as they are: a block-local statistic
    where the running maximum is meant."""
    return _loop(query, key, value, mask, block_size, rescale=lambda r, total, o: (total, o),
                 running=False)


@wrong("tiled_attention.finite_start")
def running_max_from_zero(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, start=0.0)


@wrong("tiled_attention.finite_start")
def sentinel_minus_ten_thousand(query, key, value, mask=None, block_size=128):
    """FlashAttention-style finite sentinel: m starts at -1e4 (and masked scores get -1e4,
    their exps zeroed by the mask)."""
    scale = math.sqrt(query.size(-1))
    m = torch.full(query.shape[:-1] + (1,), -1e4, dtype=query.dtype)
    total = torch.zeros_like(m)
    o = torch.zeros(query.shape[:-1] + (value.size(-1),), dtype=query.dtype)
    for j in range(0, key.size(-2), block_size):
        s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / scale
        if mask is not None:
            s = s.masked_fill(~mask[..., j:j + block_size], -1e4)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        if mask is not None:
            p = p * mask[..., j:j + block_size]
        r = torch.exp(m - m_new)
        total, o = r * total + p.sum(-1, keepdim=True), r * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / total.clamp(min=1e-30)


@wrong("sliding_window_mask.one_sided")
def band_on_one_side(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    band = ones.tril(window) & ones.triu(0)  # the sign of one offset lost
    return ones.tril() & ones.triu(-window) if causal else band


@wrong("tiled_attention.mask_not_broadcast")
def mask_sliced_as_given(query, key, value, mask=None, block_size=128):
    """The mask sliced by block as it comes: a (batch, q_len, 1) mask is empty from block 2."""
    return _loop(query, key, value, mask, block_size, expand=False)


@wrong("tiled_attention.mask_not_broadcast")
def mask_block_by_where(query, key, value, mask=None, block_size=128):
    """torch.where with the block's slice of the mask as it comes (a shape error, told otherwise)."""
    m = torch.full(query.shape[:-1] + (1,), -math.inf, dtype=query.dtype)
    total = torch.zeros_like(m)
    o = query.new_zeros(*query.shape[:-1], value.size(-1))
    for j in range(0, key.size(-2), block_size):
        s = torch.einsum("...qd,...kd->...qk", query, key[..., j:j + block_size, :])
        s = s / math.sqrt(query.size(-1))
        if mask is not None:
            s = torch.where(mask[..., j:j + block_size], s, torch.full_like(s, -math.inf))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - shift)
        total = torch.exp(m - shift) * total + p.sum(-1, keepdim=True)
        o = torch.exp(m - shift) * o + p @ value[..., j:j + block_size, :]
        m = m_new
    return o / torch.where(total == 0, torch.ones_like(total), total)


@wrong("sliding_window_mask.one_bound")
def tril_alone(size, window, causal=False):
    """tril(window) bounds the later keys only: every earlier key stays allowed."""
    band = torch.ones(size, size, dtype=torch.bool).tril(window)
    return band.tril() if causal else band


@wrong("sliding_window_mask.one_bound")
def lower_bound_only(size, window, causal=False):
    i = torch.arange(size)
    band = i[None, :] >= i[:, None] - window  # (size, size): j >= i - window, no upper bound
    return band & (i[None, :] <= i[:, None]) if causal else band


@wrong("sliding_window_mask.offsets_swapped")
def band_diagonals_swapped(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    band = ones.triu(diagonal=window) & ones.tril(diagonal=-window)
    return band & ones.tril() if causal else band


@wrong("sliding_window_mask.offsets_swapped")
def offsets_compared_the_wrong_way(size, window, causal=False):
    i = torch.arange(size)
    offset = i[None, :] - i[:, None]  # j - i
    band = (offset >= window) & (offset <= -window)
    return band & (offset <= 0) if causal else band


@wrong("sliding_window_mask.window_past_size")
def diagonals_one_by_one(size, window, causal=False):
    """The band built one diagonal at a time: torch.ones(size - |k|) fails for |k| > size."""
    band = torch.zeros(size, size, dtype=torch.bool)
    for k in range(0 if causal else -window, window + 1):
        band |= torch.diag(torch.ones(size - abs(k), dtype=torch.bool), -k)
    return band


@wrong("sliding_window_mask.window_past_size")
def diagonals_summed(size, window, causal=False):
    """The diagonals summed in one expression: the same failure past the sequence's length."""
    low = 0 if causal else -window
    return sum(torch.diag(torch.ones(size - abs(k)), k) for k in range(low, window + 1)).t() > 0


@wrong("tiled_attention.block_own_max")
def tiled_block_softmax_own_max(query, key, value, mask=None, block_size=128):
    k_len = key.size(-2)
    scale = 1 / math.sqrt(query.size(-1))
    m = torch.full(query.shape[:-1] + (1,), -math.inf)
    total = torch.zeros_like(m)
    o = torch.zeros(query.shape[:-1] + (value.size(-1),))
    for start in range(0, k_len, block_size):
        s = query @ key[..., start:start + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~mask.expand(*mask.shape[:-1], k_len)[..., start:start + block_size],
                              -math.inf)
        block_max = s.amax(-1, keepdim=True)
        p = torch.exp(s - torch.nan_to_num(block_max, neginf=0.0))  # the block's own softmax
        m_new = torch.maximum(m, block_max)
        alpha = torch.exp(m - torch.nan_to_num(m_new, neginf=0.0))
        total = alpha * total + p.sum(-1, keepdim=True)
        o = alpha * o + p @ value[..., start:start + block_size, :]
        m = m_new
    return o / torch.where(total == 0, torch.ones_like(total), total)


@wrong("sliding_window_mask.window_too_narrow")
def window_mistral_convention(size, window, causal=False):
    # Mistral's sliding_window: a token sees the `window` positions up to itself, i - j < window
    i = torch.arange(size).unsqueeze(1)
    j = torch.arange(size).unsqueeze(0)
    allowed = (i - j).abs() < window
    return allowed & (j <= i) if causal else allowed



@wrong("tiled_attention.rescale_inverted")
def rescaled_upwards(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, upside_down=True)


@wrong("tiled_attention.block_one_short")
def inclusive_end(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, end=-1)


@wrong("tiled_attention.max_frozen")
def max_of_the_first_block(query, key, value, mask=None, block_size=128):
    return _loop(query, key, value, mask, block_size, running="first")


@wrong("sliding_window_mask.total_width")
def longformer_attention_window(size, window, causal=False):
    one_sided = window // 2  # Longformer's attention_window is the total width
    i = torch.arange(size)
    allowed = (i[:, None] - i[None, :]).abs() <= one_sided
    return allowed & (i[:, None] >= i[None, :]) if causal else allowed


@wrong("sliding_window_mask.zero_means_none")
def window_zero_is_full_attention(size, window, causal=False):
    allowed = torch.ones(size, size, dtype=torch.bool)
    if window:  # sliding_window=0 / None: no window
        allowed = allowed.triu(-window).tril(window)
    return allowed.tril() if causal else allowed


@wrong("sliding_window_mask.causal_excludes_self")
def causal_strictly_before(size, window, causal=False):
    d = torch.arange(size)[:, None] - torch.arange(size)
    allowed = d.abs() <= window
    return allowed & (d > 0) if causal else allowed


@wrong("sliding_window_mask.narrow_positions")
def int8_positions(size, window, causal=False):
    i = torch.arange(size, dtype=torch.int32).to(torch.int8)  # "masks are small"
    offset = i[:, None] - i[None, :]
    allowed = offset.abs() <= window
    return allowed & (offset >= 0) if causal else allowed


@wrong("sliding_window_mask.narrow_positions")
def uint8_positions(size, window, causal=False):
    i = torch.arange(size, dtype=torch.uint8)  # i - j wraps below 0 and past 255
    allowed = (i[:, None] - i[None, :]) <= window
    return allowed & (i[None, :] <= i[:, None]) if causal else allowed
