import math

import pytest
import torch

from tfcourse.positional import LearnedPositionalEncoding, PositionalEncoding, sinusoidal_encoding


def paper_pe(pos, j, d_model):
    """The paper's formula for one entry, with plain floats."""
    i = j // 2
    angle = pos / 10000 ** (2 * i / d_model)
    return math.sin(angle) if j % 2 == 0 else math.cos(angle)


def test_values_match_the_paper_formula():
    pe = sinusoidal_encoding(5000, 512)
    assert pe.shape == (5000, 512) and pe.dtype == torch.get_default_dtype()
    for pos in (0, 1, 2, 17, 100, 4999):
        for j in (0, 1, 2, 3, 10, 11, 254, 255, 510, 511):
            assert pe[pos, j].item() == pytest.approx(paper_pe(pos, j, 512), abs=1e-6), (pos, j)
    small = sinusoidal_encoding(7, 6)  # every entry of a small table
    want = torch.tensor([[paper_pe(p, j, 6) for j in range(6)] for p in range(7)])
    torch.testing.assert_close(small, want)


def test_relative_offset_is_a_fixed_rotation():
    """PE(pos + k) = M_k PE(pos) for every pos, M_k block-diagonal 2x2 rotations by k w_i."""
    d_model, max_len = 16, 64
    pe = sinusoidal_encoding(max_len, d_model).double()
    for k in (1, 3, 10):
        blocks = []
        for i in range(d_model // 2):
            b = k / 10000 ** (2 * i / d_model)  # [sin(a+b), cos(a+b)] from [sin a, cos a]
            blocks.append(torch.tensor([[math.cos(b), math.sin(b)], [-math.sin(b), math.cos(b)]]))
        m_k = torch.block_diag(*blocks).double()
        torch.testing.assert_close(pe[:-k] @ m_k.T, pe[k:], atol=1e-6, rtol=0)


def test_odd_d_model_is_an_error():
    with pytest.raises(ValueError, match=r"d_model must be even .* d_model=7"):
        sinusoidal_encoding(10, 7)


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEncoding])
def test_forward_adds_positions_from_start(cls):
    torch.manual_seed(0)
    module = cls(8, max_len=20).eval()
    table = module.pe if cls is PositionalEncoding else module.embedding.weight
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(module(x), x + table[:5])
    torch.testing.assert_close(module(x, start=15), x + table[15:20])
    # incremental decoding: one position at a time == all at once
    steps = torch.cat([module(x[:, t : t + 1], start=t) for t in range(5)], dim=1)
    torch.testing.assert_close(steps, module(x))


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEncoding])
def test_forward_errors(cls):
    module = cls(8, max_len=20)
    message = r"start=16 \+ seq=5 = 21 positions do not fit in max_len=20"
    with pytest.raises(ValueError, match=message):
        module(torch.zeros(1, 5, 8), start=16)
    with pytest.raises(ValueError, match=r"\(batch, seq, d_model=8\), got \(1, 5, 6\)"):
        module(torch.zeros(1, 5, 6))


def test_dropout_and_buffer():
    torch.manual_seed(0)
    module = PositionalEncoding(8, max_len=20, dropout=0.5)
    x = torch.randn(2, 5, 8)
    out = module(x)
    kept = out != 0
    torch.testing.assert_close(out[kept], 2 * (x + module.pe[:5])[kept])
    assert "pe" not in module.state_dict()  # non-persistent: recomputed, not saved
    assert module.pe in list(module.buffers())
