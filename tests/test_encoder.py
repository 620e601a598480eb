import math

import pytest
import torch
from torch import nn

from tfcourse.encoder import Embeddings, Encoder, EncoderLayer
from tfcourse.masks import padding_mask
from tfcourse.parity import load_torch_weights, run_torch

D_MODEL, HEADS, D_FF = 16, 4, 32
VARIANTS = [(False, "relu"), (True, "relu"), (False, "gelu"), (True, "gelu")]


def padded_batch():
    """x (3, 6, d_model) and its mask: rows have 6, 4 and 1 real positions."""
    lengths = torch.tensor([6, 4, 1])
    tokens = (torch.arange(6) < lengths[:, None]).long()  # 1 = real, 0 = pad
    return torch.randn(3, 6, D_MODEL), padding_mask(tokens, pad_id=0)


@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
def test_layer_equals_torch(norm_first, activation):
    torch.manual_seed(0)
    kw = dict(dropout=0.1, activation=activation, norm_first=norm_first)
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, **kw).eval()
    ours = EncoderLayer(D_MODEL, HEADS, D_FF, **kw).eval()
    load_torch_weights(ours, theirs)
    x, mask = padded_batch()
    with torch.no_grad():
        want = run_torch(theirs, x, src_key_padding_mask=~mask[:, 0, 0, :])
        torch.testing.assert_close(ours(x, mask), want)
        torch.testing.assert_close(ours(x), run_torch(theirs, x))


@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
def test_stack_equals_torch(norm_first, activation):
    torch.manual_seed(0)
    kw = dict(dropout=0.1, activation=activation, norm_first=norm_first)
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, **kw)
    final_norm = nn.LayerNorm(D_MODEL) if norm_first else None  # pre-norm needs one
    theirs = nn.TransformerEncoder(layer, 3, final_norm, enable_nested_tensor=False).eval()
    ours = Encoder(D_MODEL, HEADS, D_FF, 3, **kw).eval()
    load_torch_weights(ours, theirs)
    assert isinstance(ours.norm, nn.Identity) != norm_first
    x, mask = padded_batch()
    with torch.no_grad():
        want = run_torch(theirs, x, src_key_padding_mask=~mask[:, 0, 0, :])
        torch.testing.assert_close(ours(x, mask), want)


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_does_not_change_real_positions(norm_first):
    torch.manual_seed(0)
    encoder = Encoder(D_MODEL, HEADS, D_FF, 2, norm_first=norm_first).eval()
    x, mask = padded_batch()
    out = encoder(x, mask)
    for b, length in enumerate((6, 4, 1)):
        alone = encoder(x[b : b + 1, :length])  # the same sequence, no padding at all
        torch.testing.assert_close(out[b, :length], alone[0])
    noisy = x.masked_fill(~mask[:, 0, 0, :, None], 1e3)  # whatever the padding holds
    real = mask[:, 0, 0, :]
    torch.testing.assert_close(encoder(noisy, mask)[real], out[real])


def test_without_positions_the_encoder_is_permutation_equivariant():
    torch.manual_seed(0)
    encoder = Encoder(D_MODEL, HEADS, D_FF, 2).eval()
    x = torch.randn(2, 7, D_MODEL)
    perm = torch.randperm(7)
    torch.testing.assert_close(encoder(x[:, perm]), encoder(x)[:, perm])


def test_dropout_only_in_training():
    torch.manual_seed(0)
    encoder = Encoder(D_MODEL, HEADS, D_FF, 2, dropout=0.3)
    x = torch.randn(2, 5, D_MODEL)
    assert not torch.allclose(encoder(x), encoder(x))
    encoder.eval()
    torch.testing.assert_close(encoder(x), encoder(x), rtol=0, atol=0)


def test_embeddings_scale_by_sqrt_d_model():
    torch.manual_seed(0)
    embed = Embeddings(10, D_MODEL)
    tokens = torch.tensor([[1, 2, 9], [0, 0, 3]])
    want = embed.embedding.weight[tokens] * math.sqrt(D_MODEL)
    torch.testing.assert_close(embed(tokens), want)


def test_embeddings_errors():
    embed = Embeddings(10, D_MODEL)
    with pytest.raises(ValueError, match=r"ids in \[0, vocab_size=10\), got values from 0 to 10"):
        embed(torch.tensor([[0, 10]]))
    with pytest.raises(TypeError, match=r"integer tensor of ids, got torch.float32"):
        embed(torch.zeros(1, 3))
