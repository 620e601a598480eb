import pytest
import torch

from tfcourse.feed_forward import PositionWiseFeedForward


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_equals_the_formula(activation):
    torch.manual_seed(0)
    ffn = PositionWiseFeedForward(6, 10, activation=activation)
    x = torch.randn(2, 3, 6)
    hidden = x @ ffn.linear1.weight.T + ffn.linear1.bias  # (2, 3, d_ff)
    if activation == "relu":
        hidden = torch.maximum(hidden, torch.zeros(()))  # max(0, x W1 + b1)
    else:
        hidden = 0.5 * hidden * (1 + torch.erf(hidden / 2**0.5))  # exact GELU
    want = hidden @ ffn.linear2.weight.T + ffn.linear2.bias
    torch.testing.assert_close(ffn(x), want)
    assert ffn.linear1.weight.shape == (10, 6) and ffn.linear2.weight.shape == (6, 10)


def test_each_position_independently():
    torch.manual_seed(0)
    ffn = PositionWiseFeedForward(6, 10)
    x = torch.randn(2, 5, 6)
    for t in range(5):
        torch.testing.assert_close(ffn(x)[:, t], ffn(x[:, t]))


def test_dropout_after_the_activation():
    # GELU, since ReLU and dropout commute: relu(dropout(h)) == dropout(relu(h))
    torch.manual_seed(0)
    ffn = PositionWiseFeedForward(6, 50, dropout=0.5, activation="gelu")
    x = torch.randn(4, 6)
    gelu = torch.nn.functional.gelu
    torch.manual_seed(1)
    out = ffn(x)
    torch.manual_seed(1)
    dropped = torch.nn.functional.dropout(gelu(ffn.linear1(x)), 0.5)
    torch.testing.assert_close(out, ffn.linear2(dropped))
    ffn.eval()
    torch.testing.assert_close(ffn(x), ffn.linear2(gelu(ffn.linear1(x))))


def test_errors():
    with pytest.raises(ValueError, match=r"one of \['relu', 'gelu', 'silu'\], got 'tanh'"):
        PositionWiseFeedForward(4, 8, activation="tanh")
    with pytest.raises(ValueError, match=r"\(\.\.\., d_model=4\), got \(2, 5\)"):
        PositionWiseFeedForward(4, 8)(torch.zeros(2, 5))
