"""Wrong ways to write layer normalization, the feed-forward network and the residual
sublayer, and the diagnosis each must get. Each is a subclass of the reference (same
__init__, so the same parameters) with a wrong forward."""

import math

import torch
from torch.nn import functional as F

from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.normalization import LayerNorm, SublayerConnection

from . import diagnosis

# ---------------------------------------------------------------------------------------
# LayerNorm


@diagnosis("Unbiased variance")
class UnbiasedVar(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True)  # torch's default: divides by n - 1
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@diagnosis("Unbiased variance")
class UnbiasedStd(LayerNorm):
    def forward(self, x):
        centered = x - x.mean(dim=-1, keepdim=True)
        std = (centered.pow(2).sum(-1, keepdim=True) / (x.size(-1) - 1) + self.eps).sqrt()
        return centered / std * self.weight + self.bias


@diagnosis("Epsilon outside the square root")
class EpsOutside(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


@diagnosis("Unbiased variance")  # two mistakes: the first to show is named first
class EpsOutsideAndUnbiased(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / (x.std(-1, keepdim=True) + self.eps) + self.bias


@diagnosis("Epsilon missing")
class NoEps(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / var.sqrt() + self.bias


@diagnosis("Normalized over the wrong axis")
class OverSequence(LayerNorm):
    def forward(self, x):
        mean = x.mean(1, keepdim=True)
        var = x.var(1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@diagnosis("Normalized over the wrong axis")
class OverBatch(LayerNorm):  # batch norm
    def forward(self, x):
        mean = x.mean(0, keepdim=True)
        var = x.var(0, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@diagnosis("Normalized over the wrong axis")
class OverLastTwo(LayerNorm):
    def forward(self, x):
        mean = x.mean((-2, -1), keepdim=True)
        var = x.var((-2, -1), keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@diagnosis("Normalized over the wrong axis")
class Axis2(LayerNorm):  # right for 3-D input only
    def forward(self, x):
        mean = x.mean(2, keepdim=True)
        var = x.var(2, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@diagnosis("Gain or bias missing")
class NoGain(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) + self.bias


@diagnosis("Gain or bias missing")
class NoAffine(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(x.var(-1, keepdim=True, correction=0) + self.eps)


@diagnosis("Gain or bias missing")
class NoBias(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps)


@diagnosis("Built-in layer norm called")
class Builtin(LayerNorm):
    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


@diagnosis("Built-in layer norm called")
class BuiltinModule(LayerNorm):
    def forward(self, x):
        norm = torch.nn.LayerNorm(x.size(-1), eps=self.eps).to(x.dtype)
        return norm(x) * self.weight + self.bias


@diagnosis("Input modified in place")
class CenteredInPlace(LayerNorm):
    def forward(self, x):
        x -= x.mean(-1, keepdim=True)
        return self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) + self.bias


@diagnosis("Wrong output: the output has dtype torch.float32")
class AlwaysFloat32(LayerNorm):
    def forward(self, x):
        x = x.float()
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight.float() * (x - mean) / torch.sqrt(var + self.eps) + self.bias.float()


# ---------------------------------------------------------------------------------------
# PositionWiseFeedForward


@diagnosis("Activation after the second linear layer")
class ActivationLast(PositionWiseFeedForward):
    def forward(self, x):
        return self.activation(self.linear2(self.dropout(self.linear1(x))))


@diagnosis("Activation after the second linear layer")
class ActivationTwice(PositionWiseFeedForward):
    def forward(self, x):
        return self.activation(self.linear2(self.activation(self.linear1(x))))


@diagnosis("Activation missing")
class NoActivation(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(x)))


@diagnosis("`activation` ignored")
class AlwaysRelu(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


@diagnosis("Raised RuntimeError")
class LinearsSwapped(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear1(self.activation(self.linear2(x)))


@diagnosis("Wrong output on x (2, 5, 6), d_model=6, d_ff=10, activation='relu', and no common")
class Tanh(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(torch.tanh(self.linear1(x)))


# ---------------------------------------------------------------------------------------
# SublayerConnection


@diagnosis("Residual missing")
class NoResidual(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return self.dropout(sublayer(self.norm(x)))
        return self.norm(self.dropout(sublayer(x)))


@diagnosis("Residual missing")
class NoResidualNoNorm(SublayerConnection):
    def forward(self, x, sublayer):
        return self.dropout(sublayer(x))


@diagnosis("Norm on the wrong side of the residual")
class AlwaysPostNorm(SublayerConnection):  # norm_first ignored
    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


@diagnosis("Norm on the wrong side of the residual")
class AlwaysPreNorm(SublayerConnection):
    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


@diagnosis("Norm on the wrong side of the residual")
class Swapped(SublayerConnection):
    def forward(self, x, sublayer):
        if not self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


@diagnosis("Norm on the wrong side of the residual")
class NormOnTheResidual(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x) + self.dropout(sublayer(x))


@diagnosis("Residual taken from the normalized input")
class ResidualFromNormalized(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            x = self.norm(x)
            return x + self.dropout(sublayer(x))
        return self.norm(x + self.dropout(sublayer(x)))


@diagnosis("Dropout applied to the residual too")
class DropoutAroundTheSum(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return self.dropout(x + sublayer(self.norm(x)))
        return self.norm(self.dropout(x + sublayer(x)))


@diagnosis("Dropout not applied")
class NoDropout(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + sublayer(self.norm(x))
        return self.norm(x + sublayer(x))


@diagnosis("Input modified in place")
class AddedInPlace(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            x += self.dropout(sublayer(self.norm(x)))
            return x
        return self.norm(x + self.dropout(sublayer(x)))


@diagnosis("Wrong output on x (2, 5, 8), norm_first=False, and no common mistake matches")
class ScaledResidual(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)) / math.sqrt(2))
