import pytest
import torch
from torch import nn

from tfcourse.decoder import Decoder, DecoderLayer
from tfcourse.masks import causal_mask, padding_mask
from tfcourse.parity import load_torch_weights, run_torch

D_MODEL, HEADS, D_FF = 16, 4, 32
VARIANTS = [(False, "relu"), (True, "relu"), (False, "gelu"), (True, "gelu")]


def lengths_mask(lengths, seq):
    return padding_mask((torch.arange(seq) < torch.tensor(lengths)[:, None]).long(), pad_id=0)


def inputs():
    """Target (3, 5) and memory (3, 7) with padding; our masks and torch's keyword masks."""
    x, memory = torch.randn(3, 5, D_MODEL), torch.randn(3, 7, D_MODEL)
    src_mask, tgt_pad = lengths_mask([7, 3, 5], 7), lengths_mask([5, 5, 2], 5)
    tgt_mask = tgt_pad & causal_mask(5)  # (3, 1, 5, 5)
    torch_masks = dict(
        tgt_mask=~causal_mask(5),  # torch: True = not allowed
        tgt_key_padding_mask=~tgt_pad[:, 0, 0, :],
        memory_key_padding_mask=~src_mask[:, 0, 0, :],
    )
    return x, memory, src_mask, tgt_mask, torch_masks


@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
def test_layer_equals_torch(norm_first, activation):
    torch.manual_seed(0)
    kw = dict(dropout=0.1, activation=activation, norm_first=norm_first)
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, **kw).eval()
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, **kw).eval()
    load_torch_weights(ours, theirs)
    x, memory, src_mask, tgt_mask, torch_masks = inputs()
    with torch.no_grad():
        want = run_torch(theirs, x, memory, **torch_masks)
        torch.testing.assert_close(ours(x, memory, src_mask, tgt_mask), want)


@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
def test_stack_equals_torch(norm_first, activation):
    torch.manual_seed(0)
    kw = dict(dropout=0.1, activation=activation, norm_first=norm_first)
    layer = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, **kw)
    theirs = nn.TransformerDecoder(layer, 3, nn.LayerNorm(D_MODEL) if norm_first else None)
    ours = Decoder(D_MODEL, HEADS, D_FF, 3, **kw)
    load_torch_weights(ours, theirs)
    x, memory, src_mask, tgt_mask, torch_masks = inputs()
    with torch.no_grad():
        want = run_torch(theirs.eval(), x, memory, **torch_masks)
        torch.testing.assert_close(ours.eval()(x, memory, src_mask, tgt_mask), want)


@pytest.mark.parametrize("norm_first", [False, True])
def test_no_position_sees_the_future(norm_first):
    torch.manual_seed(0)
    decoder = Decoder(D_MODEL, HEADS, D_FF, 2, norm_first=norm_first).eval()
    x, memory = torch.randn(2, 6, D_MODEL), torch.randn(2, 4, D_MODEL)
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, 3, D_MODEL)  # new future from position 3 on
    causal = causal_mask(6)
    out, out_changed = decoder(x, memory, None, causal), decoder(changed, memory, None, causal)
    torch.testing.assert_close(out_changed[:, :3], out[:, :3])
    assert not torch.allclose(out_changed[:, 3:], out[:, 3:])
    # the control: without the causal mask the past does see the change
    assert not torch.allclose(decoder(changed, memory)[:, :3], decoder(x, memory)[:, :3])


def test_cross_attention_reads_real_memory_only():
    torch.manual_seed(0)
    decoder = Decoder(D_MODEL, HEADS, D_FF, 2).eval()
    x, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 7, D_MODEL)
    src_mask, tgt_mask = lengths_mask([7, 4], 7), causal_mask(5)
    out = decoder(x, memory, src_mask, tgt_mask)
    padded = memory.clone()
    padded[1, 4:] = 1e3  # padding of row 1: ignored
    torch.testing.assert_close(decoder(x, padded, src_mask, tgt_mask), out)
    torch.testing.assert_close(decoder(x[1:], memory[1:, :4], None, tgt_mask)[0], out[1])
    real = memory.clone()
    real[1, 2] += 1.0  # a real memory position: every target position sees it
    moved = decoder(x, real, src_mask, tgt_mask)
    assert not torch.isclose(moved[1], out[1]).all(dim=-1).any()
    torch.testing.assert_close(moved[0], out[0])
