"""Chapter 10: local (sliding-window) attention, the strided sparse pattern and low-rank
attention, against chapter 01's attention with the mask or projection written out."""

import math

import pytest
import torch

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.checking.ch10_tiled_attention import WINDOW
from tfcourse.efficiency import ForwardMemory
from tfcourse.long_attention import (
    local_attention,
    low_rank_attention,
    segment_means,
    sliding_window_mask,
    strided_mask,
)


def qkv(*lead, n=13, d_k=8, d_v=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*lead, n, d, generator=g, dtype=torch.float64) for d in (d_k, d_k, d_v))


def brute_force(size, allowed):
    return torch.tensor([[allowed(i, j) for j in range(size)] for i in range(size)])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [0, 1, 3, 20])
def test_sliding_window_mask_is_the_band(window, causal):
    want = brute_force(9, lambda i, j: abs(i - j) <= window and (j <= i or not causal))
    assert torch.equal(sliding_window_mask(9, window, causal), want)


def test_strided_mask_is_the_window_and_every_stride_th_key():
    want = brute_force(11, lambda i, j: (abs(i - j) <= 1 or (i - j) % 4 == 0) and j <= i)
    assert torch.equal(strided_mask(11, 1, 4, causal=True), want)
    assert torch.equal(strided_mask(11, 1, 4), want | want.T)


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)])
@pytest.mark.parametrize("n", [1, 2, 7, 13, 32])
@pytest.mark.parametrize("window", [0, 1, 3, 6, 40])
@pytest.mark.parametrize("causal", [False, True])
def test_local_attention_equals_attention_with_the_window_mask(lead, n, window, causal):
    q, k, v = qkv(*lead, n=n)
    want, _ = scaled_dot_product_attention(q, k, v, sliding_window_mask(n, window, causal))
    torch.testing.assert_close(local_attention(q, k, v, window, causal), want)


def test_local_attention_gradients_equal_the_masked_reference():
    q, k, v = (t.requires_grad_() for t in qkv(2, n=10))
    assert torch.autograd.gradcheck(lambda q, k, v: local_attention(q, k, v, 2, causal=True), (q, k, v))


def test_local_attention_memory_grows_as_n_times_the_window():
    peaks = {}
    for n in (1024, 4096):
        x = torch.randn(1, 1, n, 16)
        with torch.no_grad(), ForwardMemory() as memory:
            local_attention(x, x, x, window=32)
        peaks[n] = memory.peak
    assert 3.5 < peaks[4096] / peaks[1024] < 4.5  # linear: 4 times the length, 4 times the bytes
    assert peaks[4096] < 0.1 * 4096**2 * 4  # a tenth of the n x n scores alone


def test_local_attention_errors_name_the_problem():
    q, k, v = qkv(n=6)
    with pytest.raises(ValueError, match="window must be an integer >= 0"):
        local_attention(q, k, v, -1)
    with pytest.raises(ValueError, match="same n"):
        local_attention(q, k[:4], v[:4], 2)


def test_segment_means_averages_consecutive_segments():
    e = segment_means(7, 3)
    torch.testing.assert_close(e.sum(dim=1), torch.ones(3))
    assert torch.equal(e > 0, torch.tensor([[1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0, 0],
                                            [0, 0, 0, 0, 0, 1, 1]], dtype=torch.bool))
    assert torch.equal(segment_means(5, 5), torch.eye(5))
    with pytest.raises(ValueError, match="rank must be at most n=4"):
        segment_means(4, 5)


def test_low_rank_attention_is_attention_on_the_projected_keys_and_values():
    q, k, v = qkv(2, n=12)
    e = torch.randn(4, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want, _ = scaled_dot_product_attention(q, e @ k, e @ v)
    torch.testing.assert_close(low_rank_attention(q, k, v, e), want)
    # the identity projection: exact attention
    torch.testing.assert_close(low_rank_attention(q, k, v, segment_means(12, 12)),
                               scaled_dot_product_attention(q, k, v)[0])
    # uniform attention (queries 0): the mean of the values, whatever the segments
    torch.testing.assert_close(low_rank_attention(0 * q, k, v, segment_means(12, 3)),
                               v.mean(dim=-2, keepdim=True).expand(2, 12, 5))
    with pytest.raises(ValueError, match=r"projection must be \(rank, k_len=12\)"):
        low_rank_attention(q, k, v, e[:, :5])
    assert math.isfinite(low_rank_attention(q.float(), k.float(), v.float(), e).sum().item())


# ------------------------------------- exercise 10's sliding_window_mask check, right solutions


def diagonals(size, window, causal=False):
    ones = torch.ones(size, size, dtype=torch.bool)
    return ones.tril() & ones.triu(-window) if causal else ones.tril(window) & ones.triu(-window)


def loops(size, window, causal=False):
    mask = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        for j in range(max(0, i - window), min(size, i + window + 1) if not causal else i + 1):
            mask[i, j] = True
    return mask


def between(size, window, causal=False):
    i = torch.arange(size).unsqueeze(1)
    j = torch.arange(size).unsqueeze(0)
    return (j >= i - window) & (j <= (i if causal else i + window))


@pytest.mark.parametrize("solution", [diagonals, loops, between])
def test_exercise_check_passes_right_masks_in_other_styles(solution):
    WINDOW.check(solution)
