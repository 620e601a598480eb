"""Wrong ways to write exercise 12 (RMSNorm, SwiGLU, rotate, rotary_attention), and the
diagnosis each must get; then RIGHT: correct solutions in other styles than the reference's,
which every check must pass (tests/test_right_solutions.py)."""

import math

import torch
import torch.nn.functional as F

from tfcourse.checking.entry import exercises_dir, load_exercise
from tfcourse.positional import RotaryEmbedding

from . import wrong

given = load_exercise(exercises_dir() / "ex12_modern_block.py")

# -------------------------------------------------------------------------------- RMSNorm


def _norm(forward):
    return type(forward.__name__, (given.RMSNorm,), {"forward": forward})


@wrong("RMSNorm.builtin")
@_norm
def rms_builtin(self, x):
    return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)


@wrong("RMSNorm.mean_subtracted")
@_norm
def rms_centered(self, x):
    x = x - x.mean(-1, keepdim=True)
    return self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


@wrong("RMSNorm.mean_subtracted")
@_norm
def rms_as_layer_norm(self, x):
    return F.layer_norm(x, x.shape[-1:], eps=self.eps) * self.weight


@wrong("RMSNorm.std_not_rms")
@_norm
def rms_by_variance(self, x):
    return self.weight * x / torch.sqrt(x.var(-1, keepdim=True) + self.eps)


@wrong("RMSNorm.std_not_rms")
@_norm
def rms_by_std(self, x):
    return self.weight * x / (x.std(dim=-1, keepdim=True, correction=0) + self.eps)


@wrong("RMSNorm.eps_outside")
@_norm
def rms_eps_outside(self, x):
    return self.weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)


@wrong("RMSNorm.no_eps")
@_norm
def rms_no_eps(self, x):
    return self.weight * x * x.pow(2).mean(-1, keepdim=True).rsqrt()


@wrong("RMSNorm.eps_ignored")
@_norm
def rms_own_eps(self, x):
    return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@wrong("RMSNorm.wrong_power")
@_norm
def rms_no_root(self, x):
    return self.weight * x / (x.pow(2).mean(-1, keepdim=True) + self.eps)


@wrong("RMSNorm.wrong_power")
@_norm
def rms_divided_by_rsqrt(self, x):
    return self.weight * x / torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


@wrong("RMSNorm.l2_norm")
@_norm
def rms_l2(self, x):
    return self.weight * x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + self.eps)


@wrong("RMSNorm.wrong_axis")
@_norm
def rms_axis(self, x):
    return self.weight * x / torch.sqrt(x.pow(2).mean(-2, keepdim=True) + self.eps)


@wrong("RMSNorm.not_cast_back")
@_norm
def rms_left_in_float32(self, x):
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    return self.weight * (h * torch.rsqrt(h.square().mean(-1, keepdim=True) + self.eps))


@wrong("RMSNorm.std_not_rms")
@_norm
def rms_by_root_of_std(self, x):
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    spread = torch.std(h, dim=-1, keepdim=True)
    return self.weight * (h / (spread + self.eps).sqrt()).to(x.dtype)


@wrong("RMSNorm.wrong_power")
@_norm
def rms_rooted_twice(self, x):
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    rms = h.pow(2).mean(-1, keepdim=True).sqrt()
    return self.weight * (h / torch.sqrt(rms + self.eps)).to(x.dtype)


@wrong("RMSNorm.no_gain")
@_norm
def rms_no_gain(self, x):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


@wrong("RMSNorm.no_gradient")
@_norm
def rms_detached(self, x):
    rms = x.detach().pow(2).mean(-1, keepdim=True).add(self.eps).sqrt()
    return self.weight * x.detach() / rms


@wrong("RMSNorm.keepdim")
@_norm
def rms_without_keepdim(self, x):
    return self.weight * x * torch.rsqrt(x.pow(2).mean(-1) + self.eps)


@wrong("RMSNorm.gain_plus_one")
@_norm
def rms_gemma_gain(self, x):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    return x * (1.0 + self.weight)  # Gemma's stored gain is weight - 1


@wrong("RMSNorm.no_upcast")
@_norm
def rms_in_the_inputs_dtype(self, x):
    return self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


@wrong("RMSNorm.unbiased_count")
@_norm
def rms_over_d_minus_one(self, x):
    h = x.float()
    h = h / torch.sqrt(h.pow(2).sum(-1, keepdim=True) / (x.size(-1) - 1) + self.eps)
    return self.weight * h.to(x.dtype)


@wrong("RMSNorm.float32_compute")
@_norm
def rms_always_float32(self, x):
    h = x.to(torch.float32)  # LlamaRMSNorm's upcast, float64 included
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
    return self.weight * h.to(x.dtype)


@wrong("RMSNorm.statistic_squared")
@_norm
def rms_mean_abs_squared(self, x):
    h = x.float()
    h = h / (h.abs().mean(-1, keepdim=True) ** 2 + self.eps).sqrt()
    return self.weight * h.to(x.dtype)


@wrong("RMSNorm.statistic_squared")
@_norm
def rms_square_of_mean(self, x):
    h = x.float()
    h = h * torch.rsqrt(h.mean(-1, keepdim=True).square() + self.eps)
    return self.weight * h.to(x.dtype)


# --------------------------------------------------------------------------------- SwiGLU


def _ffn(forward):
    return type(forward.__name__, (given.SwiGLU,), {"forward": forward})


@wrong("SwiGLU.one_projection_twice")
@_ffn
def swiglu_gate_only(self, x):
    g = self.gate(x)
    return self.down(self.dropout(self.activation(g) * g))


@wrong("SwiGLU.one_projection_split")
@_ffn
def swiglu_fused_halves(self, x):
    a, b = torch.split(self.up(x), self.up.out_features // 2, dim=-1)
    return self.down(self.dropout(self.activation(a) * b))


@wrong("SwiGLU.weight_layout")
@_ffn
def swiglu_kernels(self, x):
    hidden = self.activation(torch.matmul(x, self.gate.weight)) * torch.matmul(x, self.up.weight)
    return self.down(self.dropout(hidden))


@wrong("SwiGLU.gate_up_swapped")
@_ffn
def swiglu_swapped(self, x):
    return self.down(self.dropout(self.activation(self.up(x)) * self.gate(x)))


@wrong("SwiGLU.wrong_activation")
@_ffn
def swiglu_gelu(self, x):
    return self.down(self.dropout(F.gelu(self.gate(x)) * self.up(x)))


@wrong("SwiGLU.wrong_activation")
@_ffn
def swiglu_sigmoid(self, x):  # GLU's sigmoid gate
    return self.down(self.dropout(torch.sigmoid(self.gate(x)) * self.up(x)))


@wrong("SwiGLU.activation_misplaced")
@_ffn
def swiglu_on_product(self, x):
    return self.down(self.dropout(self.activation(self.gate(x) * self.up(x))))


@wrong("SwiGLU.no_gating")
@_ffn
def swiglu_no_up(self, x):
    return self.down(self.dropout(self.activation(self.gate(x))))


@wrong("SwiGLU.added")
@_ffn
def swiglu_added(self, x):
    return self.down(self.dropout(self.activation(self.gate(x)) + self.up(x)))


@wrong("SwiGLU.dropout_missing")
@_ffn
def swiglu_no_dropout(self, x):
    return self.down(self.activation(self.gate(x)) * self.up(x))


@wrong("SwiGLU.dropout_after_down")
@_ffn
def swiglu_dropout_last(self, x):
    return self.dropout(self.down(self.activation(self.gate(x)) * self.up(x)))


@wrong("SwiGLU.no_down")
@_ffn
def swiglu_without_down(self, x):
    return self.dropout(F.silu(self.gate(x)) * self.up(x)) if self.activation is F.silu else \
        self.dropout(self.activation(self.gate(x)) * self.up(x))


@wrong("SwiGLU.activation_variant")
@_ffn
def swiglu_gelu_as_tanh(self, x):
    act = (lambda z: F.gelu(z, approximate="tanh")) if self.activation is F.gelu else self.activation
    return self.down(self.dropout(act(self.gate(x)) * self.up(x)))


@wrong("SwiGLU.activation_variant")
@_ffn
def swiglu_relu_squared(self, x):
    act = (lambda z: F.relu(z).square()) if self.activation is F.relu else self.activation
    return self.down(self.dropout(act(self.gate(x)) * self.up(x)))


@wrong("SwiGLU.residual_inside")
@_ffn
def swiglu_with_residual(self, x):
    return x + self.down(self.dropout(self.activation(self.gate(x)) * self.up(x)))


@wrong("SwiGLU.dropout_on_input")
@_ffn
def swiglu_dropped_input(self, x):
    x = self.dropout(x)
    return self.down(self.activation(self.gate(x)) * self.up(x))

# --------------------------------------------------------------------------------- rotate


def _angles(x, start, base, dtype=torch.float64, exponent=None):
    d = x.size(-1)
    i = torch.arange(0, d, 2, dtype=dtype)
    theta = base ** (-(exponent(i, d) if exponent else i / d))
    m = torch.arange(start, start + x.size(-2), dtype=dtype)
    angle = torch.outer(m, theta)
    return angle.cos().to(x.dtype), angle.sin().to(x.dtype)


def _turn(x, cos, sin, pairs):
    if pairs == "halves":
        a, b = x.chunk(2, -1)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


@wrong("rotate.pairs_mixed_up")
def rotate_always_halves(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    return _turn(x, cos, sin, "halves")


@wrong("rotate.pairs_mixed_up")
def rotate_conventions_reversed(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    return _turn(x, cos, sin, "adjacent" if pairs == "halves" else "halves")


@wrong("rotate.not_offset")
def rotate_from_zero(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, 0, base)
    return _turn(x, cos, sin, pairs)


@wrong("rotate.base_ignored")
def rotate_base_fixed(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, 10000.0)
    return _turn(x, cos, sin, pairs)


@wrong("rotate.wrong_exponent")
def rotate_exponent_halved(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base, exponent=lambda i, d: i / (2 * d))  # i over 0, 2, 4, ...
    return _turn(x, cos, sin, pairs)


@wrong("rotate.wrong_exponent")
def rotate_positive_exponent(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base, exponent=lambda i, d: -i / d)
    return _turn(x, cos, sin, pairs)


@wrong("rotate.low_precision")
def rotate_in_x_dtype(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base, dtype=x.dtype)
    return _turn(x, cos, sin, pairs)


@wrong("rotate.wrong_direction")
def rotate_half_signs_flipped(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    return _turn(x, cos, -sin, pairs)


@wrong("rotate.cos_sin_swapped")
def rotate_cos_sin_swapped(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    return _turn(x, sin, cos, pairs)


@wrong("rotate.angles_laid_out_for_other_pairs")
def rotate_hf_with_interleaved_angles(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    if pairs == "halves":  # transformers' rotate_half, with Meta's order of the angles
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        a, b = x.chunk(2, -1)
        return x * cos + torch.cat((-b, a), -1) * sin
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return x * cos + torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2) * sin


@wrong("rotate.read_and_written_otherwise")
def rotate_adjacent_read_as_halves(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    if pairs == "halves":
        return _turn(x, cos, sin, pairs)
    a, b = x.unflatten(-1, (2, x.size(-1) // 2)).unbind(-2)  # '... (j d) -> ... j d': halves
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


@wrong("rotate.low_precision")
def rotate_positions_in_x_dtype(x, start=0, base=10000.0, pairs="halves"):
    d = x.size(-1)
    theta = base ** -(torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.arange(start, start + x.size(-2), dtype=x.dtype).double()  # type_as(x)
    angle = torch.outer(m, theta)
    return _turn(x, angle.cos().to(x.dtype), angle.sin().to(x.dtype), pairs)


@wrong("rotate.no_gradient")
def rotate_rebuilt_from_values(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    return torch.tensor(_turn(x, cos, sin, pairs).tolist(), dtype=x.dtype)


@wrong("rotate.parts_swapped")
def rotate_parts_swapped(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    a, b = x.chunk(2, -1)
    return torch.cat((a * sin + b * cos, a * cos - b * sin), -1) if pairs == "halves" else \
        _turn(x, cos, sin, pairs)


@wrong("rotate.read_and_written_otherwise")
def rotate_adjacent_written_as_halves(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    if pairs == "halves":
        return _turn(x, cos, sin, pairs)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)


@wrong("rotate.positions_on_heads")
def rotate_meta_broadcast(x, start=0, base=10000.0, pairs="halves"):
    d = x.size(-1)
    theta = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    at = -3 if x.dim() > 2 else -2  # freqs_cis.view(seq, 1, d / 2): x as (batch, seq, heads, d)
    angle = torch.outer(torch.arange(start, start + x.size(at), dtype=torch.float64), theta)
    if x.dim() > 2:
        angle = angle[:, None, :]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    return _turn(x, cos, sin, pairs)


@wrong("rotate.wrong_direction")
def rotate_adjacent_backwards(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    return _turn(x, cos, sin if pairs == "halves" else -sin, pairs)

@wrong("rotate.float32_tables")
def rotate_float32_tables(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = (t.float() for t in _angles(x.double(), start, base))  # Meta's float32 freqs_cis
    return _turn(x, cos, sin, pairs)

# ----------------------------------------------------------------------- rotary_attention


def _attend(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal is not None:
        scores = scores.masked_fill(~causal, float("-inf"))
    return scores.softmax(-1) @ v


def _cat(past, new):
    return new if past is None else torch.cat((past, new), -2)


def _start(past_k):
    return 0 if past_k is None else past_k.size(-2)


@wrong("rotate.table_sliced_at_start")
def rotate_table_of_x_positions(x, start=0, base=10000.0, pairs="halves"):
    n, d = x.size(-2), x.size(-1)
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)[start:start + n]
    c, s = torch.cat((freqs, freqs), -1).cos().to(x.dtype), torch.cat((freqs, freqs), -1).sin().to(x.dtype)
    if pairs == "halves":
        turned = torch.cat((-x[..., d // 2:], x[..., :d // 2]), -1)
        return c * x + s * turned
    c, s = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack((a * c - b * s, a * s + b * c), -1).flatten(-2)


@wrong("rotary_attention.square_mask")
def attention_square_mask(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    n = q.size(-2)
    causal = torch.tril(torch.ones(64, 64, dtype=torch.bool))[:n, :n]  # a buffer made for no cache
    scores = torch.where(causal, q @ k.mT / math.sqrt(q.size(-1)), float("-inf"))
    return torch.softmax(scores, -1) @ v


@wrong("rotate.off_by_one")
def rotate_from_position_one(x, start=0, base=10000.0, pairs="halves"):
    return RotaryEmbedding(x.size(-1), base, pairs)(x, start + 1)  # "positions count from 1"


@wrong("rotary_attention.one_side_not_offset")
def attention_keys_from_zero(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k)  # the keys' start forgotten
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.base_ignored")
def attention_default_base(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1)), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


_TABLES = {}


@wrong("rotate.state_kept")
def rotate_tables_cached_by_shape(x, start=0, base=10000.0, pairs="halves"):
    key = tuple(x.shape[-2:])  # mlx's RoPE cache once forgot part of its key: here start and base
    if key not in _TABLES:
        _TABLES[key] = _angles(x, start, base)
    cos, sin = _TABLES[key]
    return _turn(x, cos.to(x.dtype), sin.to(x.dtype), pairs)


@wrong("rotary_attention.positions_from_total")
def attention_from_the_last_position(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    at = start + q.size(-2) - 1 if past_k is not None else 0  # one token's rule: len(cache) + seq - 1
    q, k = rope(q, at), rope(k, at)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.positions_after_new")
def attention_from_the_next_offset(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    at = start + q.size(-2) if past_k is not None else 0  # the offset advanced first
    q, k = rope(q, at), rope(k, at)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.cache_length_from_heads")
def attention_start_from_axis_1(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), 0 if past_k is None else past_k.size(1)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(_start(past_k)))


@wrong("rotary_attention.values_rotated")
def attention_values_rotated(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k, v = (rope(t, start) for t in (q, k, v))
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.not_offset")
def attention_rotated_from_zero(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q), rope(k)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.cache_rotated_again")
def attention_cache_rotated_again(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    k, v = _cat(past_k, k), _cat(past_v, v)
    q, k = rope(q, start), rope(k)  # every key rotated at its position, the cached ones again
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.mask_not_offset")
def attention_mask_from_the_corner(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril())


@wrong("rotary_attention.no_causal_mask")
def attention_unmasked(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    return F.scaled_dot_product_attention(q, _cat(past_k, k), _cat(past_v, v))


@wrong("rotary_attention.one_side_rotated")
def attention_queries_only(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q = rope(q, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.no_gradient")
def attention_detached(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start).detach(), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.no_causal_mask")
def attention_unmasked_with_a_cache(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    if past_k is None:  # "with a cache one token comes at a time"
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, _cat(past_k, k), _cat(past_v, v))


@wrong("rotary_attention.other_pairs")
def attention_meta_pairs(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base, pairs="adjacent"), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.not_offset")
def attention_start_left_at_zero(q, k, v, past_k=None, past_v=None, base=10000.0):
    start, rope = 0, RotaryEmbedding(q.size(-1), base)  # the cache's length forgotten
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.positions_off_by_one")
def attention_one_position_early(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    at = max(start - 1, 0)  # "the last cached position"
    q, k = rope(q, at), rope(k, at)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.partial_rotary")
def attention_neox_half_rotary(q, k, v, past_k=None, past_v=None, base=10000.0):
    d, start = q.size(-1), _start(past_k)
    rope = RotaryEmbedding(d // 2, base)  # rotary_pct = 0.5
    q = torch.cat([rope(q[..., : d // 2], start), q[..., d // 2:]], dim=-1)
    k = torch.cat([rope(k[..., : d // 2], start), k[..., d // 2:]], dim=-1)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.past_ignored")
def attention_new_keys_only(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@wrong("rotary_attention.cache_after")
def attention_cache_appended(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    if past_k is not None:
        k, v = torch.cat([k, past_k], dim=2), torch.cat([v, past_v], dim=2)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.mask_off_by_one")
def attention_strictly_earlier(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    allowed = torch.arange(k.size(-2)) < torch.arange(start, start + q.size(-2))[:, None]
    return _attend(q, k, v, allowed).nan_to_num(0.0)


@wrong("rotary_attention.softmax_wrong_axis")
def attention_normalized_over_queries(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    future = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).triu(start + 1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=2) @ v


@wrong("rotary_attention.mask_inverted")
def attention_hiding_the_allowed(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    hidden = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).triu(start + 1)  # True = hidden
    return F.scaled_dot_product_attention(q, k, v, attn_mask=hidden)  # reads True as allowed


@wrong("rotary_attention.wrong_scale")
def attention_unscaled(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    allowed = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=1.0)


def _rotated(q, k, v, past_k, base):
    rope, start = RotaryEmbedding(q.size(-1), base), _start(past_k)
    return rope(q, start), rope(k, start), start


@wrong("rotary_attention.cache_half_concatenated")
def attention_values_not_cached(q, k, v, past_k=None, past_v=None, base=10000.0):
    q, k, start = _rotated(q, k, v, past_k, base)
    k = _cat(past_k, k)  # past_v forgotten
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.cache_wrong_axis")
def attention_cache_on_features(q, k, v, past_k=None, past_v=None, base=10000.0):
    q, k, start = _rotated(q, k, v, past_k, base)
    if past_k is not None:
        k, v = torch.cat([past_k, k], dim=3), torch.cat([past_v, v], dim=3)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.cache_returned")
def attention_with_present(q, k, v, past_k=None, past_v=None, base=10000.0):
    q, k, start = _rotated(q, k, v, past_k, base)
    k, v = _cat(past_k, k), _cat(past_v, v)
    out = _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))
    return out, (k, v)  # "present", as Hugging Face's layers return it


def _chapter01_style(scores_to_output):
    """rotary_attention whose attention, after the rotation and the cache, is `scores_to_output`
    (q, k, v, allowed) written one of chapter 01's wrong ways."""
    def rotary(q, k, v, past_k=None, past_v=None, base=10000.0):
        q, k, start = _rotated(q, k, v, past_k, base)
        k, v = _cat(past_k, k), _cat(past_v, v)
        return scores_to_output(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))
    return rotary


def _softmaxed(scores, allowed):
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


attention_masked_to_zero = wrong("rotary_attention.masked_to_zero")(_chapter01_style(
    lambda q, k, v, allowed: torch.softmax(
        torch.where(allowed, q @ k.mT / math.sqrt(q.size(-1)), 0.0), -1) @ v))
attention_mask_after_softmax = wrong("rotary_attention.mask_after_softmax")(_chapter01_style(
    lambda q, k, v, allowed: (torch.softmax(q @ k.mT / math.sqrt(q.size(-1)), -1) * allowed) @ v))
attention_scaled_after_softmax = wrong("rotary_attention.scaled_after_softmax")(_chapter01_style(
    lambda q, k, v, allowed: _softmaxed(q @ k.mT, allowed) / q.size(-1) ** 0.5 @ v))
attention_multiplied = wrong("rotary_attention.multiplied")(_chapter01_style(
    lambda q, k, v, allowed: _softmaxed(q @ k.mT * math.sqrt(q.size(-1)), allowed) @ v))
attention_scaled_by_length = wrong("rotary_attention.scaled_by_wrong_size")(_chapter01_style(
    lambda q, k, v, allowed: _softmaxed(q @ k.mT / math.sqrt(k.size(-2)), allowed) @ v))
attention_no_softmax = wrong("rotary_attention.no_softmax")(_chapter01_style(
    lambda q, k, v, allowed: (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(~allowed, 0.0) @ v))
attention_log_softmax = wrong("rotary_attention.log_softmax")(_chapter01_style(
    lambda q, k, v, allowed: torch.log_softmax(
        (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(~allowed, float("-inf")), -1) @ v))
attention_keys_not_transposed = wrong("rotary_attention.key_not_transposed")(_chapter01_style(
    lambda q, k, v, allowed: _softmaxed(torch.matmul(q, k) / math.sqrt(q.size(-1)), allowed) @ v))
attention_mixes_keys = wrong("rotary_attention.keys_combined")(_chapter01_style(
    lambda q, k, v, allowed: _softmaxed(q @ k.mT / math.sqrt(q.size(-1)), allowed) @ k))
attention_mask_added = wrong("rotary_attention.mask_added")(_chapter01_style(
    lambda q, k, v, allowed: torch.softmax(q @ k.mT / math.sqrt(q.size(-1)) + allowed, -1) @ v))
attention_keys_times_queries = wrong("rotary_attention.query_key_swapped")(_chapter01_style(
    lambda q, k, v, allowed: _softmaxed(k @ q.mT / math.sqrt(q.size(-1)), allowed) @ v))


def _rope(x, positions, base, exponents=None):
    """x rotated (halves) at `positions`, theta_i = base ** -(exponents / d)."""
    d = x.size(-1)
    exponents = torch.arange(0, d, 2, dtype=torch.float64) if exponents is None else exponents
    freqs = torch.outer(positions.double(), base ** -(exponents / d))
    c, s = torch.cat((freqs, freqs), -1).cos().to(x.dtype), torch.cat((freqs, freqs), -1).sin().to(x.dtype)
    return x * c + torch.cat((-x[..., d // 2:], x[..., :d // 2]), -1) * s


@wrong("rotate.positions_to_seq")
def rotate_arange_to_seq(x, start=0, base=10000.0, pairs="halves"):
    if pairs != "halves":
        return RotaryEmbedding(x.size(-1), base, pairs)(x, start)
    return _rope(x, torch.arange(start, x.size(-2)), base)  # a slice's bounds


@wrong("rotate.seq_from_axis_2")
def rotate_seq_from_shape_2(x, start=0, base=10000.0, pairs="halves"):
    if pairs != "halves":
        return RotaryEmbedding(x.size(-1), base, pairs)(x, start)
    return _rope(x, torch.arange(start, start + x.shape[2]), base)  # (batch, heads, seq, d) assumed


@wrong("rotate.wrong_exponent")
def rotate_odd_exponents(x, start=0, base=10000.0, pairs="halves"):
    if pairs != "halves":
        return RotaryEmbedding(x.size(-1), base, pairs)(x, start)
    odd = torch.arange(1, x.size(-1), 2, dtype=torch.float64)
    return _rope(x, torch.arange(start, start + x.size(-2)), base, odd)


@wrong("RMSNorm.gain_before_norm")
@_norm
def rms_gain_first(self, x):
    h = (self.weight * x).float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


@wrong("SwiGLU.down_each_branch")
@_ffn
def swiglu_projected_twice(self, x):
    return self.down(self.dropout(self.activation(self.gate(x)))) * self.down(self.up(x))


@wrong("rotary_attention.weights_returned")
def attention_with_its_weights(q, k, v, past_k=None, past_v=None, base=10000.0):
    q, k, start = _rotated(q, k, v, past_k, base)
    k, v = _cat(past_k, k), _cat(past_v, v)
    scores = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(
        ~torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start), float("-inf"))
    weights = scores.softmax(-1)
    return weights @ v, weights


@wrong("RMSNorm.wrong_count")
@_norm
def rms_over_the_batch(self, x):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).sum(-1, keepdim=True) / x.shape[0] + self.eps)
    return self.weight * h.to(x.dtype)


@wrong("RMSNorm.statistic_not_squared")
@_norm
def rms_root_of_mean_abs(self, x):
    h = x.float()
    return self.weight * (h / torch.sqrt(h.abs().mean(-1, keepdim=True) + self.eps)).to(x.dtype)


@wrong("SwiGLU.no_activation")
@_ffn
def swiglu_bilinear(self, x):
    return self.down(self.dropout(self.gate(x) * self.up(x)))


@wrong("SwiGLU.activation_twice")
@_ffn
def swiglu_gate_activated_twice(self, x):
    g = self.activation(self.gate(x))  # a gate layer that already held its SiLU
    return self.down(self.dropout(self.activation(g) * self.up(x)))


@wrong("SwiGLU.activation_after_down")
@_ffn
def swiglu_activation_last(self, x):
    return self.activation(self.down(self.dropout(self.gate(x) * self.up(x))))


@wrong("SwiGLU.down_one_branch")
@_ffn
def swiglu_down_on_gate(self, x):
    gated = self.down(self.dropout(self.activation(self.gate(x))))
    return gated * self.up(x)


@wrong("SwiGLU.dropout_always_on")
@_ffn
def swiglu_functional_dropout(self, x):
    h = self.activation(self.gate(x)) * self.up(x)
    return self.down(F.dropout(h, self.dropout.p))


@wrong("rotate.sizes_unpacked_swapped")
def rotate_sizes_swapped(x, start=0, base=10000.0, pairs="halves"):
    d, seq = x.shape[-2:]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.outer(torch.arange(start, start + seq, dtype=torch.float64), theta)
    return _turn(x, angle.cos().to(x.dtype), angle.sin().to(x.dtype), pairs)


@wrong("rotate.formula_typo")
def rotate_second_line_mistyped(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    a, b = (x.chunk(2, -1)) if pairs == "halves" else (x[..., ::2], x[..., 1::2])
    first, second = a * cos - b * sin, a * cos + b * sin
    if pairs == "halves":
        return torch.cat((first, second), -1)
    return torch.stack((first, second), -1).flatten(-2)


@wrong("rotate.pair_read_swapped")
def rotate_pairs_backwards(x, start=0, base=10000.0, pairs="halves"):
    cos, sin = _angles(x, start, base)
    if pairs == "halves":
        return _turn(x, cos, sin, pairs)
    a, b = x[..., 1::2], x[..., ::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


@wrong("rotate.partial_rotary")
def rotate_half_the_features(x, start=0, base=10000.0, pairs="halves"):
    r = x.size(-1) // 2  # rotary_pct = 0.5
    cos, sin = _angles(x[..., :r], start, base)
    return torch.cat((_turn(x[..., :r], cos, sin, pairs), x[..., r:]), -1)


@wrong("rotate.start_added_to_angle")
def rotate_start_on_angle(x, start=0, base=10000.0, pairs="halves"):
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.outer(torch.arange(x.size(-2), dtype=torch.float64), theta) + start
    return _turn(x, angle.cos().to(x.dtype), angle.sin().to(x.dtype), pairs)


@wrong("rotary_attention.cache_mixed_up")
def attention_values_from_past_keys(q, k, v, past_k=None, past_v=None, base=10000.0):
    q, k, start = _rotated(q, k, v, past_k, base)
    k, v = _cat(past_k, k), _cat(past_k, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.offset_twice")
def attention_mask_offset_twice(q, k, v, past_k=None, past_v=None, base=10000.0):
    q, k, start = _rotated(q, k, v, past_k, base)
    k, v = _cat(past_k, k), _cat(past_v, v)
    rows = torch.arange(start, start + q.size(-2))[:, None] + start
    return _attend(q, k, v, torch.arange(k.size(-2))[None, :] <= rows)


@wrong("rotary_attention.rope_sized_otherwise")
def attention_rope_of_seq(q, k, v, past_k=None, past_v=None, base=10000.0):
    rope, start = RotaryEmbedding(q.size(-2), base), _start(past_k)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start))


@wrong("rotary_attention.mask_inverted")
def attention_additive_mask_inverted(q, k, v, past_k=None, past_v=None, base=10000.0):
    q, k, start = _rotated(q, k, v, past_k, base)
    k, v = _cat(past_k, k), _cat(past_v, v)
    allowed = torch.ones(q.size(-2), k.size(-2)).tril(start)
    return torch.softmax(q @ k.mT / math.sqrt(q.size(-1)) + allowed * -1e9, -1) @ v


@wrong("rotary_attention.positions_off_by_one")
def attention_start_minus_one(q, k, v, past_k=None, past_v=None, base=10000.0):
    start = 0 if past_k is None else past_k.size(-2) - 1
    rope = RotaryEmbedding(q.size(-1), base)
    q, k = rope(q, start), rope(k, start)
    k, v = _cat(past_k, k), _cat(past_v, v)
    return _attend(q, k, v, torch.ones(q.size(-2), start + q.size(-2), dtype=torch.bool).tril(start))


@wrong("RMSNorm.gain_added")
@_norm
def rms_gain_as_a_shift(self, x):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) + self.weight


@wrong("SwiGLU.concatenated")
@_ffn
def swiglu_branches_joined(self, x):
    h = torch.cat([self.activation(self.gate(x)), self.up(x)], dim=-1)
    return self.down(self.dropout(h))


@wrong("rotary_attention.inf_times_zero")
def attention_mask_times_inf(q, k, v, past_k=None, past_v=None, base=10000.0):
    q, k, start = _rotated(q, k, v, past_k, base)
    k, v = _cat(past_k, k), _cat(past_v, v)
    future = 1 - torch.ones(q.size(-2), k.size(-2)).tril(start)
    return torch.softmax(q @ k.mT / math.sqrt(q.size(-1)) + future * float("-inf"), -1) @ v


# ---------------------------------------------------------------------------------- RIGHT


@_norm
def rms_float32_as_transformers(self, x):
    h = x.float() if x.dtype != torch.float64 else x
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
    return self.weight * h.to(x.dtype)


@_norm
def rms_by_norm(self, x):
    h = x.double() if x.dtype == torch.float64 else x.float()
    rms = torch.linalg.vector_norm(h, dim=-1, keepdim=True) / math.sqrt(x.size(-1))
    return (h / torch.sqrt(rms**2 + self.eps)).to(x.dtype) * self.weight


@_ffn
def swiglu_silu_written_out(self, x):
    g = self.gate(x)
    act = g * torch.sigmoid(g) if self.activation is F.silu else self.activation(g)
    return self.down(self.dropout(act * self.up(x)))


def rotate_complex(x, start=0, base=10000.0, pairs="halves"):
    """Meta's way: each pair a complex number, multiplied by e^(i m theta)."""
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.arange(start, start + x.size(-2), dtype=torch.float64)
    turn = torch.polar(torch.ones(len(m), d // 2, dtype=torch.float64), torch.outer(m, theta))
    if pairs == "halves":
        a, b = x.double().chunk(2, -1)
        z = torch.complex(a, b) * turn
        return torch.cat((z.real, z.imag), -1).to(x.dtype)
    z = torch.view_as_complex(x.double().unflatten(-1, (d // 2, 2)).contiguous()) * turn
    return torch.view_as_real(z).flatten(-2).to(x.dtype)


def rotate_half_as_transformers(x, start=0, base=10000.0, pairs="halves"):
    d = x.size(-1)
    wide = torch.promote_types(x.dtype, torch.float32)  # float32, float64 for a float64 x
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).to(wide) / d))
    freqs = torch.outer(torch.arange(start, start + x.size(-2)).to(wide), inv_freq)
    if pairs == "halves":
        emb = torch.cat((freqs, freqs), -1)
        a, b = x.chunk(2, -1)
        rotated = torch.cat((-b, a), -1)
    else:
        emb = freqs.repeat_interleave(2, -1)
        rotated = torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
    return x * emb.cos().to(x.dtype) + rotated * emb.sin().to(x.dtype)


def attention_with_sdpa(q, k, v, past_k=None, past_v=None, base=10000.0):
    start = _start(past_k)
    rope = RotaryEmbedding(q.size(-1), base)
    k, v = _cat(past_k, rope(k, start)), _cat(past_v, v)
    mask = torch.arange(k.size(-2)) <= torch.arange(start, start + q.size(-2))[:, None]
    return F.scaled_dot_product_attention(rope(q, start), k, v, attn_mask=mask)


RIGHT = {"RMSNorm": [rms_float32_as_transformers, rms_by_norm],
         "SwiGLU": [swiglu_silu_written_out],
         "rotate": [rotate_complex, rotate_half_as_transformers],
         "rotary_attention": [attention_with_sdpa]}
