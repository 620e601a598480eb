"""tfcourse.parity: the weight mapping to and from torch.nn, at every level, both ways."""

import pytest
import torch
from torch import nn

from tfcourse.decoder import Decoder
from tfcourse.encoder import Encoder
from tfcourse.masks import causal_mask
from tfcourse.multi_head import MultiHeadAttention
from tfcourse.parity import (
    copy_weights_to_torch,
    from_torch_state_dict,
    load_torch_weights,
    run_torch,
    to_torch_state_dict,
)

D, HEADS, D_FF, LAYERS = 16, 2, 24, 2


def pairs(norm_first):
    """(tfcourse module, torch.nn module, how to call both on x (2, 5, D) and memory (2, 4, D))"""
    torch_layer = dict(d_model=D, nhead=HEADS, dim_feedforward=D_FF, dropout=0.0,
                       batch_first=True, norm_first=norm_first)
    final = nn.LayerNorm(D) if norm_first else None  # tfcourse's stacks: a final norm with pre-norm
    future = ~causal_mask(5)  # torch: True = blocked
    return [
        (MultiHeadAttention(D, HEADS), nn.MultiheadAttention(D, HEADS, batch_first=True),
         lambda m, x, mem: m(x, mem, mem)[0]),
        (Encoder(D, HEADS, D_FF, LAYERS, 0.0, norm_first),
         nn.TransformerEncoder(nn.TransformerEncoderLayer(**torch_layer), LAYERS, norm=final,
                               enable_nested_tensor=False),
         lambda m, x, mem: m(x)),
        (Decoder(D, HEADS, D_FF, LAYERS, 0.0, norm_first),
         nn.TransformerDecoder(nn.TransformerDecoderLayer(**torch_layer), LAYERS, norm=final),
         lambda m, x, mem: m(x, mem, tgt_mask=causal_mask(5)) if isinstance(m, Decoder)
         else m(x, mem, tgt_mask=future)),
    ]


@pytest.mark.parametrize("norm_first", [False, True])
def test_both_directions_compute_the_same(norm_first):
    torch.manual_seed(0)
    x, memory = torch.randn(2, 5, D), torch.randn(2, 4, D)
    for ours, theirs, call in pairs(norm_first):
        ours.eval(), theirs.eval()
        load_torch_weights(ours, theirs)  # torch.nn -> tfcourse
        with torch.no_grad():
            torch.testing.assert_close(call(ours, x, memory), run_torch(call, theirs, x, memory))
        for p in ours.parameters():  # new weights, then tfcourse -> torch.nn
            nn.init.normal_(p)
        copy_weights_to_torch(ours, theirs)
        with torch.no_grad():
            torch.testing.assert_close(call(ours, x, memory), run_torch(call, theirs, x, memory))


def test_the_two_mappings_are_inverse():
    theirs = nn.TransformerDecoderLayer(D, HEADS, D_FF, batch_first=True).state_dict()
    ours = from_torch_state_dict(theirs)
    assert "self_attn.w_q.weight" in ours and "cross_attn.w_o.bias" in ours
    assert "sublayers.2.norm.weight" in ours and "feed_forward.linear1.weight" in ours
    back = to_torch_state_dict(ours)
    assert set(back) == set(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(back[name], tensor), name


def test_a_missing_tensor_is_an_error():
    ours, theirs = MultiHeadAttention(D, HEADS, bias=False), nn.MultiheadAttention(D, HEADS)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        load_torch_weights(ours, theirs)
