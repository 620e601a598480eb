"""Wrong ways to write layer normalization, the feed-forward network and the residual
sublayer, and the diagnosis each must get. Each is a subclass of the reference (same
__init__, so the same parameters) with a wrong forward."""

import math

import torch
from torch.nn import functional as F

from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.normalization import LayerNorm, SublayerConnection

from . import wrong

# ---------------------------------------------------------------------------------------
# LayerNorm


@wrong("LayerNorm.unbiased")
class UnbiasedVar(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True)  # torch's default: divides by n - 1
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@wrong("LayerNorm.unbiased")
class UnbiasedStd(LayerNorm):
    def forward(self, x):
        centered = x - x.mean(dim=-1, keepdim=True)
        std = (centered.pow(2).sum(-1, keepdim=True) / (x.size(-1) - 1) + self.eps).sqrt()
        return centered / std * self.weight + self.bias


@wrong("LayerNorm.eps_outside")
class EpsOutside(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


@wrong("LayerNorm.unbiased")  # two mistakes: the first to show is named first
class EpsOutsideAndUnbiased(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / (x.std(-1, keepdim=True) + self.eps) + self.bias


@wrong("LayerNorm.no_eps")
class NoEps(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / var.sqrt() + self.bias


@wrong("LayerNorm.wrong_axis")
class OverSequence(LayerNorm):
    def forward(self, x):
        mean = x.mean(1, keepdim=True)
        var = x.var(1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@wrong("LayerNorm.wrong_axis")
class OverBatch(LayerNorm):  # batch norm
    def forward(self, x):
        mean = x.mean(0, keepdim=True)
        var = x.var(0, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@wrong("LayerNorm.wrong_axis")
class OverLastTwo(LayerNorm):
    def forward(self, x):
        mean = x.mean((-2, -1), keepdim=True)
        var = x.var((-2, -1), keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@wrong("LayerNorm.wrong_axis")
class Axis2(LayerNorm):  # right for 3-D input only
    def forward(self, x):
        mean = x.mean(2, keepdim=True)
        var = x.var(2, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@wrong("LayerNorm.no_affine")
class NoGain(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) + self.bias


@wrong("LayerNorm.no_affine")
class NoAffine(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(x.var(-1, keepdim=True, correction=0) + self.eps)


@wrong("LayerNorm.no_affine")
class NoBias(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps)


@wrong("LayerNorm.builtin")
class Builtin(LayerNorm):
    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


@wrong("LayerNorm.builtin")
class BuiltinModule(LayerNorm):
    def forward(self, x):
        norm = torch.nn.LayerNorm(x.size(-1), eps=self.eps).to(x.dtype)
        return norm(x) * self.weight + self.bias


@wrong("LayerNorm.in_place")
class CenteredInPlace(LayerNorm):
    def forward(self, x):
        x -= x.mean(-1, keepdim=True)
        return self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) + self.bias


@wrong("LayerNorm.wrong_dtype")
class AlwaysFloat32(LayerNorm):
    def forward(self, x):
        x = x.float()
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight.float() * (x - mean) / torch.sqrt(var + self.eps) + self.bias.float()


# ---------------------------------------------------------------------------------------
# PositionWiseFeedForward


@wrong("PositionWiseFeedForward.activation_last")
class ActivationLast(PositionWiseFeedForward):
    def forward(self, x):
        return self.activation(self.linear2(self.dropout(self.linear1(x))))


@wrong("PositionWiseFeedForward.activation_last")
class ActivationTwice(PositionWiseFeedForward):
    def forward(self, x):
        return self.activation(self.linear2(self.activation(self.linear1(x))))


@wrong("PositionWiseFeedForward.activation_first")
class ActivationOnInputFunctional(PositionWiseFeedForward):
    def forward(self, x):
        w1, b1 = self.linear1.weight, self.linear1.bias
        hidden = F.linear(self.activation(x), w1, b1)
        return F.linear(self.dropout(hidden), self.linear2.weight, self.linear2.bias)


@wrong("PositionWiseFeedForward.activation_first")
class ActivationOnInputAndHidden(PositionWiseFeedForward):
    def forward(self, x):
        for layer in (self.linear1, self.linear2):
            x = layer(self.activation(x)) if layer is self.linear1 else layer(self.dropout(x))
            x = self.activation(x) if layer is self.linear1 else x
        return x


@wrong("PositionWiseFeedForward.no_activation")
class NoActivation(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(x)))


@wrong("PositionWiseFeedForward.activation_ignored")
class AlwaysRelu(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


@wrong("PositionWiseFeedForward.gelu_approximated")
class GeluTanh(PositionWiseFeedForward):
    def forward(self, x):
        h = self.linear1(x)
        if self.activation is F.gelu:  # GPT-2's GELU
            h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
        else:
            h = self.activation(h)
        return self.linear2(self.dropout(h))


@wrong("PositionWiseFeedForward.layers_misapplied")
class LinearsSwapped(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear1(self.activation(self.linear2(x)))


@wrong("PositionWiseFeedForward.no_match")
class Tanh(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(torch.tanh(self.linear1(x)))


# ---------------------------------------------------------------------------------------
# SublayerConnection


@wrong("SublayerConnection.no_residual")
class NoResidual(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return self.dropout(sublayer(self.norm(x)))
        return self.norm(self.dropout(sublayer(x)))


@wrong("SublayerConnection.no_residual")
class NoResidualNoNorm(SublayerConnection):
    def forward(self, x, sublayer):
        return self.dropout(sublayer(x))


@wrong("SublayerConnection.norm_misplaced")
class AlwaysPostNorm(SublayerConnection):  # norm_first ignored
    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


@wrong("SublayerConnection.norm_misplaced")
class AlwaysPreNorm(SublayerConnection):
    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


@wrong("SublayerConnection.norm_misplaced")
class Swapped(SublayerConnection):
    def forward(self, x, sublayer):
        if not self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


@wrong("SublayerConnection.norm_misplaced")
class NormOnTheResidual(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x) + self.dropout(sublayer(x))


@wrong("SublayerConnection.normalized_twice")
class PreNormNormalizedTwice(SublayerConnection):
    """Pre-norm that also normalizes the sum at the end."""

    def forward(self, x, sublayer):
        if self.norm_first:
            return self.norm(x + self.dropout(sublayer(self.norm(x))))
        return self.norm(x + self.dropout(sublayer(x)))


@wrong("SublayerConnection.normalized_twice")
class NormalizedTwiceInBothModes(SublayerConnection):  # norm_first ignored
    def forward(self, x, sublayer):
        h = self.norm(x)
        y = x + self.dropout(sublayer(h))
        return self.norm(y)


@wrong("SublayerConnection.residual_normalized")
class ResidualFromNormalized(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            x = self.norm(x)
            return x + self.dropout(sublayer(x))
        return self.norm(x + self.dropout(sublayer(x)))


@wrong("SublayerConnection.dropout_on_sum")
class DropoutAroundTheSum(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return self.dropout(x + sublayer(self.norm(x)))
        return self.norm(self.dropout(x + sublayer(x)))


@wrong("SublayerConnection.dropout_on_sum")
class ResidualDroppedToo(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return self.dropout(x) + self.dropout(sublayer(self.norm(x)))
        return self.norm(self.dropout(x) + self.dropout(sublayer(x)))


@wrong("SublayerConnection.dropout_missing")
class NoDropout(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + sublayer(self.norm(x))
        return self.norm(x + sublayer(x))


@wrong("SublayerConnection.in_place")
class AddedInPlace(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            x += self.dropout(sublayer(self.norm(x)))
            return x
        return self.norm(x + self.dropout(sublayer(x)))


@wrong("SublayerConnection.no_match")
class ScaledResidual(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)) / math.sqrt(2))


# ---------------------------------------------------------------------------------------
# Mistakes found by thinking like a learner


@wrong("LayerNorm.wrong_power")
class DividedByVariance(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / (var + self.eps) + self.bias


@wrong("LayerNorm.wrong_power")
class VarPlusEpsSquared(LayerNorm):
    """(var + eps) ** 2 where ** 0.5 was meant."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        std = (var + self.eps) ** 2
        return self.weight * (x - mean) / std + self.bias


@wrong("LayerNorm.wrong_power")
class DividedByRsqrt(LayerNorm):
    """torch.rsqrt, 1 / std, divided by instead of multiplied."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.rsqrt(var + self.eps) * self.weight + self.bias


@wrong("LayerNorm.not_centered")
class NotCentered(LayerNorm):
    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * x / torch.sqrt(var + self.eps) + self.bias


@wrong("LayerNorm.gain_bias_swapped")
class GainAndBiasSwapped(LayerNorm):
    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        x_hat = (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + self.eps)
        return self.bias * x_hat + self.weight


@wrong("LayerNorm.bias_before_gain")
class BiasBeforeGain(LayerNorm):
    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        x_hat = (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + self.eps)
        return (x_hat + self.bias) * self.weight


@wrong("LayerNorm.affine_before_norm")
class AffineBeforeNorm(LayerNorm):
    def forward(self, x):
        x = self.weight * x + self.bias  # undone by the normalization
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps)


@wrong("PositionWiseFeedForward.residual_inside")
class ResidualInside(PositionWiseFeedForward):
    def forward(self, x):
        return x + self.linear2(self.dropout(self.activation(self.linear1(x))))


@wrong("PositionWiseFeedForward.dropout_missing")
class FfnWithoutDropout(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(self.activation(self.linear1(x)))


@wrong("PositionWiseFeedForward.dropout_misplaced")
class DropoutOnTheOutput(PositionWiseFeedForward):
    def forward(self, x):
        return self.dropout(self.linear2(self.activation(self.linear1(x))))


@wrong("PositionWiseFeedForward.dropout_misplaced")
class DropoutBeforeTheActivation(PositionWiseFeedForward):
    """The same as the reference with ReLU; not with GELU."""

    def forward(self, x):
        return self.linear2(self.activation(self.dropout(self.linear1(x))))


@wrong("PositionWiseFeedForward.dropout_in_eval")
class FfnFunctionalDropout(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(F.dropout(self.activation(self.linear1(x)), self.dropout.p))


@wrong("SublayerConnection.no_norm")
class NormForgotten(SublayerConnection):
    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(x))


@wrong("SublayerConnection.dropout_on_input")
class DropoutBeforeTheSublayer(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + sublayer(self.dropout(self.norm(x)))
        return self.norm(x + sublayer(self.dropout(x)))


@wrong("SublayerConnection.dropout_in_eval")
class SublayerFunctionalDropout(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + F.dropout(sublayer(self.norm(x)), self.dropout.p)
        return self.norm(x + F.dropout(sublayer(x), self.dropout.p))


@wrong("LayerNorm.no_keepdim")
class NoKeepdim(LayerNorm):
    def forward(self, x):
        return self.weight * (x - x.mean(-1)) / torch.sqrt(x.var(-1, unbiased=False) + self.eps) + self.bias


@wrong("LayerNorm.eps_ignored")
class EpsHardCoded(LayerNorm):
    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + 1e-6) + self.bias


@wrong("LayerNorm.variance_not_centered")
class MeanOfSquares(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt((x**2).mean(-1, keepdim=True) + self.eps) + self.bias


@wrong("LayerNorm.l2_normalized")
class L2Normalized(LayerNorm):
    def forward(self, x):
        return self.weight * F.normalize(x, dim=-1, eps=self.eps) + self.bias


@wrong("LayerNorm.no_gradient")
class StatisticsFromDetached(LayerNorm):
    def forward(self, x):
        x = x.detach()  # "the statistics need no gradient"
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + self.eps) + self.bias


@wrong("PositionWiseFeedForward.bias_dropped")
class WeightsOnly(PositionWiseFeedForward):
    def forward(self, x):
        return self.dropout(self.activation(x @ self.linear1.weight.T)) @ self.linear2.weight.T


@wrong("PositionWiseFeedForward.layers_misapplied")
class PapersXW(PositionWiseFeedForward):
    def forward(self, x):
        h = self.activation(x @ self.linear1.weight + self.linear1.bias)
        return self.dropout(h) @ self.linear2.weight + self.linear2.bias


@wrong("PositionWiseFeedForward.python_max")
class PythonMax(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(max(0, self.linear1(x))))


@wrong("PositionWiseFeedForward.layers_misapplied")
class FirstLayerTwice(PositionWiseFeedForward):
    def forward(self, x):
        return self.linear1(self.dropout(self.activation(self.linear1(x))))


@wrong("SublayerConnection.norm_parameters_unused")
class FreshLayerNorm(SublayerConnection):
    def forward(self, x, sublayer):
        norm = torch.nn.LayerNorm(x.size(-1))
        if self.norm_first:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))


@wrong("PositionWiseFeedForward.activation_ignored")
class AlwaysGeluTanh(PositionWiseFeedForward):
    """GPT-2's tanh GELU written in, whatever activation the layer was built with."""

    def forward(self, x):
        h = self.linear1(x)
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
        return self.linear2(self.dropout(h))


@wrong("LayerNorm.cancellation")
class VarianceFromMoments(LayerNorm):  # Var[x] = E[x^2] - E[x]^2, one pass over x
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean ** 2
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@wrong("LayerNorm.cancellation")
class VarianceFromSums(LayerNorm):  # a streaming formula: running sums of x and x^2
    def forward(self, x):
        n = x.shape[-1]
        s1, s2 = x.sum(-1, keepdim=True), (x ** 2).sum(-1, keepdim=True)
        mu = s1 / n
        return (x - mu) * torch.rsqrt(s2 / n - mu * mu + self.eps) * self.weight + self.bias


@wrong("SublayerConnection.sandwich")
class SandwichNorm(SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:  # Sandwich-LN: the sublayer's output normalized too
            return x + self.dropout(self.norm(sublayer(self.norm(x))))
        return self.norm(x + self.dropout(sublayer(x)))
