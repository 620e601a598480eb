"""Wrong ways to write the causal mask (functions) and the decoder layer (classes), and the
diagnosis each must get. The classes keep the reference's __init__, as the exercise does."""

import time

import torch
from torch import nn

from tfcourse import decoder

from . import diagnosis

# causal_mask(size, device=None)


@diagnosis("Causal mask off by one: a position cannot see itself")
def strictly_lower(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(-1)


@diagnosis("Causal mask off by one: a position cannot see itself")
def not_upper_triangle(size, device=None):
    return ~torch.ones(size, size, dtype=torch.bool, device=device).triu()


@diagnosis("Causal mask off by one: a position cannot see itself")
def greater_than(size, device=None):
    positions = torch.arange(size, device=device)
    return positions[:, None] > positions[None, :]


@diagnosis("Causal mask off by one: a position sees the next one")
def one_diagonal_too_many(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(1)


@diagnosis("Causal mask off by one: a position sees the next one")
def next_position_allowed(size, device=None):
    positions = torch.arange(size, device=device)
    return positions[None, :] <= positions[:, None] + 1


@diagnosis("Causal mask polarity inverted")
def torch_polarity(size, device=None):
    return torch.triu(torch.ones(size, size, device=device), diagonal=1).bool()


@diagnosis("Causal mask transposed: positions see the future")
def upper_triangle(size, device=None):
    positions = torch.arange(size, device=device)
    return positions[:, None] <= positions[None, :]


@diagnosis("Causal mask is not boolean")
def float_ones(size, device=None):
    return torch.ones(size, size, device=device).tril()


@diagnosis("Causal mask is not boolean")
def additive_minus_inf(size, device=None):
    return nn.Transformer.generate_square_subsequent_mask(size, device=device)


@diagnosis("Causal mask not created on `device`")
def device_ignored(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril()


@diagnosis("Wrong mask: the mask has shape (1, 5, 5), expected (5, 5)")
def with_batch_axis(size, device=None):
    return torch.ones(1, size, size, dtype=torch.bool, device=device).tril()


@diagnosis("Wrong mask for size=5, and no common mistake matches")
def all_true(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device)


@diagnosis("Too slow")
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


@diagnosis("Queries and keys swapped in cross-attention")
class MemoryAsQueries(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(memory, x, x, src_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@diagnosis("Queries and keys swapped in cross-attention")
class KeysFromDecoder(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask=tgt_mask)[0])
        cross = lambda x: self.cross_attn(query=memory, key=x, value=memory, mask=src_mask)[0]  # noqa: E731
        return self.sublayers[2](self.sublayers[1](x, cross), self.feed_forward)


@diagnosis("Queries and keys swapped in cross-attention")
class SwappedAndUnmasked(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.sublayers[1](x, lambda y: self.cross_attn(memory, memory, y)[0])
        return self.sublayers[2](x, self.feed_forward)


@diagnosis("Encoder output not used")
class SelfAttentionTwice(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, x, x, tgt_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@diagnosis("Target mask used for cross-attention")
class TargetMaskInCross(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, tgt_mask, tgt_mask)


@diagnosis("Target mask used for cross-attention")
class MasksSwapped(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, src_mask, tgt_mask)


@diagnosis("Target mask used for cross-attention")
class OneMaskForAll(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        mask = tgt_mask if tgt_mask is not None else src_mask
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@diagnosis("Source padding mask forgotten in cross-attention")
class NoSourceMask(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, tgt_mask, None)


@diagnosis("Source padding mask forgotten in cross-attention")
class CrossWithoutMaskKeyword(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask=tgt_mask)[0])
        x = self.sublayers[1](x, lambda x: self.cross_attn(query=x, key=memory, value=memory)[0])
        return self.sublayers[2](x, self.feed_forward)


@diagnosis("Target mask not used in self-attention")
class NoMasksAtAll(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, None, None)


@diagnosis("Target mask not used in self-attention")
class SourceMaskEverywhere(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, src_mask, src_mask)


@diagnosis("Sublayers in the wrong order")
class CrossFirst(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.cross_attn(x, memory, memory, src_mask)[0])
        x = self.sublayers[1](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


@diagnosis("norm_first ignored")
class PostNormByHand(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        norms = [s.norm for s in self.sublayers]
        x = norms[0](x + self.self_attn(x, x, x, tgt_mask)[0])
        x = norms[1](x + self.cross_attn(x, memory, memory, src_mask)[0])
        return norms[2](x + self.feed_forward(x))


@diagnosis("Attention's (output, weights) used as a tensor")
class TupleNotUnpacked(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)


@diagnosis("Input modified in place")
class ResidualInPlace(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x.mul_(1.5)  # the caller's tensor
        return self.block(x, memory, tgt_mask, src_mask)


@diagnosis("Wrong output on")
class NoFeedForward(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        return self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, src_mask)[0])


@diagnosis("Wrong output: the output has shape (3, 5), expected (3, 5, 16)")
class MeanOverFeatures(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.block(x, memory, tgt_mask, src_mask).mean(-1)


@diagnosis("DecoderLayer's parameters differ from the reference's")
class RenamedParameters(_Layer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ffn = self.feed_forward
        del self.feed_forward

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        raise AssertionError("never reached")


@diagnosis("Raised ZeroDivisionError: division by zero")
class Raises(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return 1 / 0


@diagnosis("Too slow")
class EndlessLayer(_Layer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        while True:
            time.sleep(0.01)
