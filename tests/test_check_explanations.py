"""What the checks say when no catalogued mistake matches: what the learner's result is, told
by the expected one (a constant factor or offset with its value, an elementwise function,
its values in another order, a monotone function: then the first line names that, not "no
common mistake matches"), a float where integers are expected with the likely `/` (in a
result, or as a size or index that torch refuses), a mask with an axis too many, and what
is new in the first case that fails (a feature, or two features seen apart, together)."""

import math

import pytest
import torch

from tfcourse.checking import Case, CheckFailure, Item, entry
from tfcourse.checking.explanation import resemblance


def first_line(item, target):
    with pytest.raises(CheckFailure) as raised:
        item.check(target)
    return str(raised.value).splitlines()[0]


def _table(max_len, d_model):
    angle = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


TABLE = entry.item("ex03_positional_encoding.sinusoidal_encoding")


def test_a_constant_factor_is_told_with_its_value():
    def noam_lr(step, d_model, warmup):  # a rate scaled by the wrong quantity
        return 44.7 * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    line = first_line(entry.item("ex07_training.noam_lr"), noam_lr)
    assert "your rates are 44.7 times the expected at every entry" in line, line
    assert line.startswith("Wrong rates on ") and "no common mistake matches" not in line, line


def test_a_factor_of_the_settings_alone_is_told_for_each_setting():
    # not one constant over all the cases (d_model and warmup differ among them), but one
    # over the steps of each (d_model, warmup): the scale is wrong, not the schedule's shape
    def noam_lr(step, d_model, warmup):
        if step < 1:
            raise ValueError("step counts from 1")
        return (d_model * warmup) ** 0.3 * min(step**-0.5, step * warmup**-1.5)

    line = first_line(entry.item("ex07_training.noam_lr"), noam_lr)
    assert line.startswith("Wrong rates on ") and "no common mistake matches" not in line, line
    assert ("your rates are the expected times a factor that depends on d_model and warmup "
            "alone, the same at every step (1.77e+03 for d_model=512, warmup=4000; 111 for "
            "d_model=64, warmup=100;") in line, line


def test_a_constant_offset_is_told_with_its_value():
    def mean_pool(h, keep):
        k = keep[..., None].to(h.dtype)
        return (h * k).sum(1) / k.sum(1).clamp(min=1) + 0.25

    line = first_line(entry.item("ex09_variants.mean_pool"), mean_pool)
    assert "your pooled vectors are the expected plus 0.25 at every entry" in line, line


def test_values_in_another_order_along_an_axis_are_told():
    line = first_line(TABLE, lambda n, d: _table(n, d).roll(2, 1))
    assert ("holds the right values in another order along the last axis: rolled by 2" in line), line
    assert "reversed" in resemblance(torch.arange(6.0).flip(0), torch.arange(6.0))


def test_an_elementwise_or_monotone_function_of_the_right_answer_is_told():
    assert "the exp of the expected" in resemblance(torch.linspace(-1, 1, 7).exp(), torch.linspace(-1, 1, 7))
    line = first_line(TABLE, lambda n, d: _table(n, d) ** 3)
    assert "your table is an increasing function of the expected, entry by entry" in line, line
    assert resemblance(torch.randn(20), torch.randn(20)) == ""  # unrelated: nothing told


def test_a_float_where_integers_are_expected_names_true_division():
    def beam_search_step(scores, log_probs, lengths, alpha=0.6):
        vocab = log_probs.size(-1)
        candidates = (scores[:, :, None] + log_probs).flatten(1)
        best = candidates.topk(scores.size(1)).indices
        return candidates.gather(1, best), best / vocab, best % vocab

    line = first_line(entry.item("ex08_decoding.beam_search_step"), beam_search_step)
    assert line.startswith("Wrong dtype: beam has dtype torch.float32, expected torch.int64: "
                           "values with a fractional part"), line
    assert "a true division `/` where `//` is meant" in line


def test_the_first_failing_case_says_what_is_new_in_it():
    item = Item("ex99_test", "double", lambda x: 2 * x,
                [Case((torch.randn(3, 4),), names=("x",)), Case((torch.randn(2, 3, 4, 5),), names=("x",))])

    def double(x):  # right on 2-D inputs only
        return 2 * x if x.dim() < 4 else 2 * x + x**3

    line = first_line(item, double)
    assert ("Your code is right on the 1 case before this one, and this is the first with 4-D "
            "inputs") in line, line


def test_large_scores_with_a_finite_fill_are_a_named_mistake():
    attention = entry.item("ex01_attention.scaled_dot_product_attention")

    def fill_minus_five_thousand(query, key, value, mask=None):  # no catalogued value
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, -5000.0)
        weights = torch.softmax(scores, -1).masked_fill(
            ~mask.any(-1, keepdim=True), 0.0) if mask is not None else torch.softmax(scores, -1)
        return weights @ value, weights

    assert first_line(attention, fill_minus_five_thousand).startswith(
        "Masked scores filled with a number real scores can go below:")


def test_a_float_used_as_a_size_names_true_division():
    def split_heads(x, n_heads):  # the paper's d_k = d_model / h, written literally
        b, s, d = x.shape
        return x.reshape(b, s, n_heads, d / n_heads).transpose(1, 2)

    line = first_line(entry.item("ex02_multi_head_attention.split_heads"), split_heads)
    assert line.startswith("Raised TypeError"), line
    assert "a float where a whole number is wanted" in line and "use `//`" in line, line


def test_a_mask_with_an_axis_too_many_is_told():
    given = entry.load_exercise(entry.exercises_dir() / "ex05_encoder.py")

    class MaskUnsqueezed(given.EncoderLayer):  # the Annotated Transformer's mask.unsqueeze(1)
        def forward(self, x, mask=None):
            mask = None if mask is None else mask.unsqueeze(1)
            x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask)[0])
            return self.sublayers[1](x, self.feed_forward)

    line = first_line(entry.item("ex05_encoder.EncoderLayer"), MaskUnsqueezed)
    assert "the mask has 5 axes and the scores 4: an axis too many" in line, line


def test_the_first_case_with_two_features_together_is_told():
    def mask(*shape):  # every row mixes True and False
        return (torch.arange(shape[-1]) % 2 == 0).expand(*shape)

    item = Item("ex99_test", "double", lambda x, m: 2 * x,
                [Case((torch.randn(3, 4), mask(3, 4)), names=("x", "m")),
                 Case((torch.randn(2, 3, 4, 5), torch.ones(2, 3, 4, 5, dtype=torch.bool)),
                      names=("x", "m")),
                 Case((torch.randn(2, 3, 4, 5), mask(2, 3, 4, 5)), names=("x", "m"))])

    def double(x, m):  # right unless the input is 4-D and masked
        if x.dim() == 4 and not m.all():
            raise RuntimeError("The size of tensor a (4) must match the size of tensor b (11) at "
                               "non-singleton dimension 3")
        return 2 * x

    line = first_line(item, double)
    assert ("Your code is right on the 2 cases before this one, and this is the first with "
            "4-D inputs and a mask together") in line, line
