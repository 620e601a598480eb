import math

import pytest
import torch
import torch.nn.functional as F

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.masks import causal_mask


def qkv(*batch, q_len=5, k_len=7, d_k=8, d_v=6, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*batch, q_len, d_k, generator=g, dtype=dtype),
        torch.randn(*batch, k_len, d_k, generator=g, dtype=dtype),
        torch.randn(*batch, k_len, d_v, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("batch", [(2,), (2, 3), ()])
def test_equals_torch_sdpa_without_mask(batch):
    q, k, v = qkv(*batch)
    output, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v))
    assert weights.shape == (*batch, 5, 7)


@pytest.mark.parametrize(
    "mask",
    [
        causal_mask(7)[:5],  # (q_len, k_len)
        torch.tensor([[True] * 4 + [False] * 3, [True] * 7])[:, None, None, :],  # padding
        torch.rand(2, 3, 5, 7, generator=torch.Generator().manual_seed(1)) > 0.5,  # some rows empty
    ],
    ids=["causal", "padding", "random"],
)
def test_equals_torch_sdpa_with_mask(mask):
    q, k, v = qkv(2, 3)
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (weights[~mask.expand_as(weights)] == 0).all()


def test_formula_by_hand():
    q, k, v = qkv(q_len=1, k_len=2, d_k=4, d_v=1, dtype=torch.float64)
    s = [(q[0] @ k[j]).item() / 2.0 for j in range(2)]  # sqrt(d_k) = 2
    w = [math.exp(x) / sum(math.exp(y) for y in s) for x in s]
    output, weights = scaled_dot_product_attention(q, k, v)
    assert weights[0].tolist() == pytest.approx(w)
    assert output.item() == pytest.approx(w[0] * v[0, 0].item() + w[1] * v[1, 0].item())


def test_rows_sum_to_one_and_masked_keys_get_nothing():
    q, k, v = qkv(2, 3)
    mask = causal_mask(7)[:5]
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    assert weights.masked_select(~mask).abs().max() == 0


def test_fully_masked_row_is_zero_with_finite_gradients():
    q, k, v = (t.requires_grad_() for t in qkv(2, dtype=torch.float64))
    mask = torch.tensor([[False] * 7, [True] * 3 + [False] * 4])[:, None, :]
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert (output[0] == 0).all() and (weights[0] == 0).all()
    output.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_gradcheck():
    q, k, v = (t.requires_grad_() for t in qkv(2, q_len=3, k_len=4, d_k=3, d_v=2, dtype=torch.float64))
    mask = causal_mask(4)[:3]
    assert torch.autograd.gradcheck(lambda *a: scaled_dot_product_attention(*a, mask), (q, k, v))


def test_inputs_not_modified():
    q, k, v = qkv(2)
    copies = [t.clone() for t in (q, k, v)]
    scaled_dot_product_attention(q, k, v, causal_mask(7)[:5])
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), copies))


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((torch.randn(2, 5, 8), torch.randn(2, 7, 6), torch.randn(2, 7, 6)), ValueError,
         r"query and key must have the same last dimension d_k, got query \(2, 5, 8\) and key \(2, 7, 6\)"),
        ((torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 6, 4)), ValueError,
         r"key and value must have the same length k_len .* key \(2, 7, 8\) and value \(2, 6, 4\)"),
        ((torch.randn(2, 5, 8), torch.randn(3, 7, 8), torch.randn(3, 7, 4)), ValueError,
         r"batch\) dimensions .* do not broadcast"),
        ((*qkv(2, d_v=4), torch.ones(2, 5, 6, dtype=torch.bool)),
         ValueError, r"mask of shape \(2, 5, 6\) does not broadcast .* \(2, 5, 7\)"),
        ((*qkv(2, d_v=4), torch.ones(2, 1, 1, 7, dtype=torch.bool)),
         ValueError, r"mask of shape \(2, 1, 1, 7\) does not broadcast"),
        ((*qkv(2, d_v=4), torch.ones(5, 7)),
         TypeError, r"mask must be a bool tensor \(True = may attend\), got torch.float32"),
        ((torch.ones(2, 5, 8, dtype=torch.long), torch.randn(2, 7, 8), torch.randn(2, 7, 4)),
         TypeError, r"query must be a floating-point tensor, got torch.int64"),
        ((torch.randn(8), torch.randn(2, 7, 8), torch.randn(2, 7, 4)),
         ValueError, r"query must have shape \(\.\.\., seq_len, features\), got \(8,\)"),
    ],
    ids=["d_k", "k_len", "batch", "mask-shape", "mask-rank", "mask-dtype", "int-query", "1-D"],
)
def test_bad_input_is_named(args, error, message):
    with pytest.raises(error, match=message):
        scaled_dot_product_attention(*args)
