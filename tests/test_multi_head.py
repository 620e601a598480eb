import pytest
import torch
from torch import nn

from tfcourse.masks import causal_mask, padding_mask
from tfcourse.multi_head import MultiHeadAttention, merge_heads, split_heads
from tfcourse.parity import load_torch_weights

D_MODEL, HEADS = 16, 4


def tokens_with_padding(batch, seq, pad_id=0):
    tokens = torch.randint(1, 9, (batch, seq))
    for b in range(batch):
        tokens[b, seq - b :] = pad_id  # row b has b pads at the end (row 0 none)
    return tokens


def test_split_heads_slices_features_per_head():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    for i in range(3):
        torch.testing.assert_close(heads[:, i], x[:, :, 4 * i : 4 * (i + 1)], rtol=0, atol=0)
    torch.testing.assert_close(merge_heads(heads), x, rtol=0, atol=0)


def test_split_heads_errors():
    with pytest.raises(ValueError, match=r"d_model=12 is not divisible by n_heads=5"):
        split_heads(torch.zeros(1, 2, 12), 5)
    with pytest.raises(ValueError, match=r"\(batch, seq, d_model\), got \(2, 12\)"):
        split_heads(torch.zeros(2, 12), 3)
    with pytest.raises(ValueError, match=r"\(batch, heads, seq, d_head\), got \(2, 3, 4\)"):
        merge_heads(torch.zeros(2, 3, 4))


CASES = [  # (q_len, k_len, mask)
    (5, 5, None),
    (5, 5, "padding"),
    (5, 5, "causal"),
    (5, 5, "padding+causal"),
    (3, 7, None),  # cross-attention
    (3, 7, "padding"),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("q_len", "k_len", "mask_kind"), CASES)
def test_equals_torch_multihead_attention(q_len, k_len, mask_kind, bias):
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D_MODEL, HEADS, bias=bias, batch_first=True).eval()
    ours = MultiHeadAttention(D_MODEL, HEADS, bias=bias).eval()
    load_torch_weights(ours, theirs)
    query = torch.randn(3, q_len, D_MODEL)
    key_value = query if q_len == k_len else torch.randn(3, k_len, D_MODEL)
    key = key_value if q_len == k_len else key_value + 0.5  # key != value in cross-attention
    mask, kwargs = None, {}
    if mask_kind and "padding" in mask_kind:
        mask = padding_mask(tokens_with_padding(3, k_len), pad_id=0)  # (batch, 1, 1, k_len)
        kwargs["key_padding_mask"] = ~mask[:, 0, 0, :]  # torch: True = padding, ignore
    if mask_kind and "causal" in mask_kind:
        causal = causal_mask(q_len)
        mask = causal if mask is None else mask & causal
        kwargs["attn_mask"] = ~causal  # torch: True = not allowed

    out, weights = ours(query, key, key_value, mask, need_weights=True)
    want, want_mean = theirs(query, key, key_value, **kwargs)
    _, want_weights = theirs(query, key, key_value, average_attn_weights=False, **kwargs)
    assert out.shape == (3, q_len, D_MODEL) and weights.shape == (3, HEADS, q_len, k_len)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(weights, want_weights)
    torch.testing.assert_close(weights.mean(dim=1), want_mean)
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_weights_only_when_asked():
    torch.manual_seed(0)
    x = torch.randn(2, 4, D_MODEL)
    out, weights = MultiHeadAttention(D_MODEL, HEADS)(x, x, x)
    assert out.shape == x.shape and weights is None


def test_dropout_applies_to_the_weights_that_make_the_output():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, HEADS, dropout=0.5)
    x = torch.randn(2, 6, D_MODEL)
    out, weights = mha(x, x, x, need_weights=True)
    assert (weights == 0).any()
    assert not torch.allclose(weights.sum(-1), torch.ones(2, HEADS, 6))
    v = split_heads(mha.w_v(x), HEADS)
    torch.testing.assert_close(out, mha.w_o(merge_heads(weights @ v)))

    mha.eval()  # no dropout: the same as a module built without it
    plain = MultiHeadAttention(D_MODEL, HEADS)
    plain.load_state_dict(mha.state_dict())
    torch.testing.assert_close(mha(x, x, x)[0], plain(x, x, x)[0], rtol=0, atol=0)


def test_gradcheck():
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 2).double()
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), pad_id=0)
    assert torch.autograd.gradcheck(lambda q, kv: mha(q, kv, kv, mask)[0], (q, kv))


def test_errors_name_the_argument_and_shapes():
    with pytest.raises(ValueError, match=r"d_model=10 is not divisible by n_heads=3"):
        MultiHeadAttention(10, 3)
    mha = MultiHeadAttention(8, 2)
    x = torch.zeros(2, 3, 8)
    with pytest.raises(ValueError, match=r"key must have shape .*d_model=8\), got \(2, 3, 6\)"):
        mha(x, torch.zeros(2, 3, 6), x)
    with pytest.raises(ValueError, match=r"query must have shape .* got \(3, 8\)"):
        mha(torch.zeros(3, 8), x, x)
    with pytest.raises(ValueError, match=r"batch size, got query \(4, 3, 8\) and key \(2, 3, 8\)"):
        mha(torch.zeros(4, 3, 8), x, x)
    with pytest.raises(ValueError, match=r"got key \(2, 3, 8\) and value \(2, 5, 8\)"):
        mha(x, x, torch.zeros(2, 5, 8))
