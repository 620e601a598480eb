"""Wrong ways to write the causal mask (functions) and the decoder layer (classes), and the
diagnosis each must get. The classes keep the reference's __init__, as the exercise does."""

import time

import torch
from torch import nn

from tfcourse import decoder

from . import wrong

# causal_mask(size, device=None)


@wrong("causal_mask.sees_nothing_of_itself")
def strictly_lower(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(-1)


@wrong("causal_mask.sees_nothing_of_itself")
def not_upper_triangle(size, device=None):
    return ~torch.ones(size, size, dtype=torch.bool, device=device).triu()


@wrong("causal_mask.sees_nothing_of_itself")
def greater_than(size, device=None):
    positions = torch.arange(size, device=device)
    return positions[:, None] > positions[None, :]


@wrong("causal_mask.sees_next")
def one_diagonal_too_many(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(1)


@wrong("causal_mask.sees_next")
def next_position_allowed(size, device=None):
    positions = torch.arange(size, device=device)
    return positions[None, :] <= positions[:, None] + 1


@wrong("causal_mask.polarity")
def torch_polarity(size, device=None):
    return torch.triu(torch.ones(size, size, device=device), diagonal=1).bool()


@wrong("causal_mask.transposed")
def upper_triangle(size, device=None):
    positions = torch.arange(size, device=device)
    return positions[:, None] <= positions[None, :]


@wrong("causal_mask.not_bool")
def float_ones(size, device=None):
    return torch.ones(size, size, device=device).tril()


@wrong("causal_mask.not_bool")
def additive_minus_inf(size, device=None):
    return nn.Transformer.generate_square_subsequent_mask(size, device=device)


@wrong("causal_mask.device_ignored")
def device_ignored(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril()


@wrong("causal_mask.wrong_shape")
def with_batch_axis(size, device=None):
    return torch.ones(1, size, size, dtype=torch.bool, device=device).tril()


@wrong("causal_mask.no_match")
def all_true(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device)


@wrong("causal_mask.too_slow")
def endless_mask(size, device=None):
    while True:
        time.sleep(0.01)


# DecoderLayer.forward(x, memory, src_mask=None, tgt_mask=None)


class _Layer(decoder.DecoderLayer):
    """The reference's __init__; each subclass below writes its own forward."""

    def block(self, x, memory, self_mask, cross_mask):
        """The three sublayers in order, with the given masks (for solutions wrong elsewhere)."""
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, self_mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, cross_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.cross_swapped")
class MemoryAsQueries(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(memory, x, x, src_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.cross_swapped")
class KeysFromDecoder(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask=tgt_mask)[0])
        cross = lambda x: self.cross_attn(query=memory, key=x, value=memory, mask=src_mask)[0]  # noqa: E731
        return self.sublayers[2](self.sublayers[1](x, cross), self.feed_forward)


@wrong("DecoderLayer.cross_swapped")
class SwappedAndUnmasked(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.sublayers[1](x, lambda y: self.cross_attn(memory, memory, y)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.cross_kv_mixed")
class KeysFromDecoderValuesFromMemory(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        def cross(h):
            return self.cross_attn(query=h, key=h, value=memory, mask=src_mask)[0]

        h = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, mask=tgt_mask)[0])
        return self.sublayers[2](self.sublayers[1](h, cross), self.feed_forward)


@wrong("DecoderLayer.cross_kv_mixed")
class ValuesFromDecoder(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        q_k_v = {"self": lambda t: (t, t, t), "cross": lambda t: (t, memory, t)}
        masks = {"self": tgt_mask, "cross": src_mask}
        for sub, kind in zip(self.sublayers, ("self", "cross")):
            attn = self.self_attn if kind == "self" else self.cross_attn
            x = sub(x, lambda t, a=attn, k=kind: a(*q_k_v[k](t), masks[k])[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.memory_unused")
class SelfAttentionTwice(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, x, x, tgt_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.tgt_mask_in_cross")
class TargetMaskInCross(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, tgt_mask, tgt_mask)


@wrong("DecoderLayer.tgt_mask_in_cross")
class MasksSwapped(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, src_mask, tgt_mask)


@wrong("DecoderLayer.tgt_mask_in_cross")
class OneMaskForAll(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        mask = tgt_mask if tgt_mask is not None else src_mask
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.no_src_mask")
class NoSourceMask(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, tgt_mask, None)


@wrong("DecoderLayer.no_src_mask")
class CrossWithoutMaskKeyword(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask=tgt_mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(query=x, key=memory, value=memory)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.no_tgt_mask")
class NoMasksAtAll(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, None, None)


@wrong("DecoderLayer.no_tgt_mask")
class SourceMaskEverywhere(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, src_mask, src_mask)


@wrong("DecoderLayer.order")
class CrossFirst(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.cross_attn(x, memory, memory, src_mask)[0])
        x = self.sublayers[1](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.norm_first_ignored")
class PostNormByHand(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        norms = [s.norm for s in self.sublayers]
        x = norms[0](x + self.self_attn(x, x, x, tgt_mask)[0])
        x = norms[1](x + self.cross_attn(x, memory, memory, src_mask)[0])
        return norms[2](x + self.feed_forward(x))


@wrong("DecoderLayer.tuple")
class TupleNotUnpacked(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.in_place")
class ResidualInPlace(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x.mul_(1.5)  # the caller's tensor
        return self.block(x, memory, tgt_mask, src_mask)


@wrong("DecoderLayer.sublayer_skipped")
class DecoderOnlyLayer(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        steps = {0: lambda t: self.self_attn(t, t, t, tgt_mask)[0], 2: self.feed_forward}
        for i, f in steps.items():
            x = self.sublayers[i](x, f)
        return x


@wrong("DecoderLayer.sublayer_skipped")
class CrossAttentionOnlyWithMemory(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda q: self.self_attn(q, q, q, tgt_mask)[0])
        if memory is not None and memory.size(1) > x.size(1):  # "only when the source is longer"
            x = self.sublayers[1](x, lambda q: self.cross_attn(q, memory, memory, src_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.no_residual")
class CrossWithoutResidual(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, tgt_mask)[0])
        cross = self.sublayers[1]
        if cross.norm_first:
            x = cross.dropout(self.cross_attn(cross.norm(x), memory, memory, src_mask)[0])
        else:
            x = cross.norm(cross.dropout(self.cross_attn(x, memory, memory, src_mask)[0]))
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.no_residual")
class NoResidualAnywhere(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        fs = (lambda t: self.self_attn(t, t, t, tgt_mask)[0],
              lambda t: self.cross_attn(t, memory, memory, src_mask)[0], self.feed_forward)
        for sub, f in zip(self.sublayers, fs):
            x = sub.dropout(f(sub.norm(x))) if sub.norm_first else sub.norm(sub.dropout(f(x)))
        return x


@wrong("DecoderLayer.no_feed_forward")
class NoFeedForward(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        return self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, src_mask)[0])


@wrong("DecoderLayer.wrong_shape")
class MeanOverFeatures(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, tgt_mask, src_mask).mean(-1)


@wrong("DecoderLayer.renamed")
class RenamedParameters(_Layer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ffn = self.feed_forward
        del self.feed_forward

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        raise AssertionError("never reached")


@wrong("DecoderLayer.raised")
class Raises(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return 1 / 0


@wrong("DecoderLayer.too_slow")
class EndlessLayer(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        while True:
            time.sleep(0.01)


# Mistakes found by thinking like a learner: one module in two roles, the lambda's argument.


@wrong("DecoderLayer.attention_module_reused")
class SelfAttentionModuleTwice(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.sublayers[1](x, lambda y: self.self_attn(y, memory, memory, src_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.sublayer_reused")
class FirstSublayerEverywhere(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.sublayers[0](x, lambda y: self.cross_attn(y, memory, memory, src_mask)[0])
        return self.sublayers[0](x, self.feed_forward)


@wrong("DecoderLayer.not_chained")
class EverySublayerOnTheInput(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        y = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask)[0])
        return self.sublayers[2](y, self.feed_forward)


@wrong("DecoderLayer.extra_residual")
class ResidualAroundEachSublayer(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = x + self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = x + self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask)[0])
        return x + self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.argument_ignored")
class LambdaUsesTheOuterX(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda _: self.self_attn(x, x, x, tgt_mask)[0])
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@wrong("DecoderLayer.by_hand")
class ResidualsByHand(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        norms = [s.norm for s in self.sublayers]
        if self.sublayers[0].norm_first:
            y = norms[0](x)
            x = x + self.self_attn(y, y, y, tgt_mask)[0]
            x = x + self.cross_attn(norms[1](x), memory, memory, src_mask)[0]
            return x + self.feed_forward(norms[2](x))
        x = norms[0](x + self.self_attn(x, x, x, tgt_mask)[0])
        x = norms[1](x + self.cross_attn(x, memory, memory, src_mask)[0])
        return norms[2](x + self.feed_forward(x))


@wrong("DecoderLayer.masks_combined")
class MasksCombined(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        mask = tgt_mask if src_mask is None or tgt_mask is None else tgt_mask & src_mask
        return self.block(x, memory, mask, mask)


@wrong("DecoderLayer.src_mask_transposed")
class SourceMaskTransposed(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, tgt_mask, None if src_mask is None else src_mask.transpose(-1, -2))


@wrong("DecoderLayer.memory_normalized")
class MemoryNormalized(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.sublayers[1].norm_first:
            memory = self.sublayers[1].norm(memory)
        return self.block(x, memory, tgt_mask, src_mask)


@wrong("DecoderLayer.memory_normalized")
class MemoryNormalizedAlways(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, self.sublayers[1].norm(memory), tgt_mask, src_mask)


@wrong("DecoderLayer.mask_read_inverted")
class SrcMaskAsKeyPadding(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        key_padding = None if src_mask is None else ~src_mask  # nn.TransformerDecoderLayer's
        return self.block(x, memory, tgt_mask, key_padding)


@wrong("causal_mask.off_by_one")
def causal_mask_without_the_last_position(size, device=None):
    return torch.ones(size - 1, size - 1, dtype=torch.bool, device=device).tril()
