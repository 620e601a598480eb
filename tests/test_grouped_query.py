"""Chapter 10: grouped-query attention equals multi-head attention when every query head has
its own key/value head, shares key/value heads otherwise, and caches n_kv_heads heads."""

import pytest
import torch

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.grouped_query import GroupedQueryAttention, kv_cache_bytes_per_token
from tfcourse.masks import causal_mask, target_mask
from tfcourse.multi_head import KVCache, MultiHeadAttention, merge_heads, split_heads


def test_groups_equal_heads_is_multi_head_attention_with_copied_weights():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4)
    gqa = GroupedQueryAttention(32, 4, n_kv_heads=4)
    gqa.load_state_dict(mha.state_dict())  # the same names and shapes: w_q, w_k, w_v, w_o
    x = torch.randn(3, 7, 32, requires_grad=True)
    tokens = torch.tensor([[5] * 7, [5] * 4 + [0] * 3, [5] * 2 + [0] * 5])
    mask = target_mask(tokens, 0)
    want = mha(x, x, x, mask)[0]
    got = gqa(x, x, x, mask)
    torch.testing.assert_close(got, want)
    grads = [torch.autograd.grad(out.square().sum(), [x, *m.parameters()])
             for out, m in ((want, mha), (got, gqa))]
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a)


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_each_group_of_query_heads_shares_one_key_value_head(n_kv_heads):
    torch.manual_seed(1)
    gqa = GroupedQueryAttention(32, 4, n_kv_heads)
    x = torch.randn(2, 5, 32)
    q = split_heads(gqa.w_q(x), 4)
    k, v = split_heads(gqa.w_k(x), n_kv_heads), split_heads(gqa.w_v(x), n_kv_heads)
    group = 4 // n_kv_heads
    heads = [scaled_dot_product_attention(q[:, [i]], k[:, [i // group]], v[:, [i // group]])[0]
             for i in range(4)]
    torch.testing.assert_close(gqa(x, x, x), gqa.w_o(merge_heads(torch.cat(heads, dim=1))))
    assert gqa.w_k.weight.shape == (n_kv_heads * 8, 32)


def test_the_cache_keeps_n_kv_heads_and_decoding_with_it_equals_the_whole_sequence():
    torch.manual_seed(2)
    gqa = GroupedQueryAttention(32, 8, n_kv_heads=2)
    x = torch.randn(2, 6, 32)
    whole = gqa(x, x, x, causal_mask(6))
    cache = KVCache()
    steps = [gqa(x[:, [t]], x[:, [t]], x[:, [t]], cache=cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole)
    assert cache.key.shape == (2, 2, 6, 4)
    cached = cache.key.nbytes + cache.value.nbytes
    assert cached == 2 * 6 * kv_cache_bytes_per_token(1, 2, 4, bytes_per_number=4)  # batch x tokens


def test_kv_cache_bytes_per_token():
    assert kv_cache_bytes_per_token(6, 8, 64, bytes_per_number=4) == 24 * 1024  # the paper's base
    assert kv_cache_bytes_per_token(80, 64, 128) == 8 * kv_cache_bytes_per_token(80, 8, 128)


def test_bad_head_counts_are_errors_naming_them():
    with pytest.raises(ValueError, match="n_heads=4 is not divisible by n_kv_heads=3"):
        GroupedQueryAttention(32, 4, 3)
    with pytest.raises(ValueError, match="n_kv_heads must be an integer >= 1, got 0"):
        GroupedQueryAttention(32, 4, 0)


def test_bad_inputs_are_errors_naming_the_argument_and_shape():
    gqa = GroupedQueryAttention(32, 4, 2)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match=r"key must have shape \(batch, seq, d_model=32\), got \(2, 5, 16\)"):
        gqa(x, torch.randn(2, 5, 16), x)
    with pytest.raises(TypeError, match="query is torch.float64"):
        gqa(x.double(), x, x)
