import pytest
import torch
from torch import nn

from tfcourse.normalization import LayerNorm, SublayerConnection


def test_equals_torch_layer_norm_values_and_grads():
    torch.manual_seed(0)
    ours, theirs = LayerNorm(8), nn.LayerNorm(8)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours.load_state_dict(theirs.state_dict())  # same parameter names
    x = (3 * torch.randn(2, 5, 8) + 1).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    out, want = ours(x), theirs(x2)
    torch.testing.assert_close(out, want)
    grad = torch.randn_like(out)
    out.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad)


def test_biased_variance_and_eps_inside_the_sqrt():
    x = torch.tensor([[1.0, 2.0, 3.0, 6.0]])  # mean 3, biased variance 3.5
    want = (x - 3) / (3.5 + 0.5) ** 0.5
    torch.testing.assert_close(LayerNorm(4, eps=0.5)(x), want)


def test_gradcheck():
    torch.manual_seed(0)
    norm = LayerNorm(5).double()
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(norm, (x,))


def test_shape_error():
    with pytest.raises(ValueError, match=r"\(\.\.\., d_model=8\), got \(2, 4\)"):
        LayerNorm(8)(torch.zeros(2, 4))


def sublayer(x):
    return 2 * x + 1


def test_post_norm_is_norm_of_the_sum():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    block = SublayerConnection(4)
    torch.testing.assert_close(block(x, sublayer), block.norm(x + sublayer(x)))
    assert not block.norm_first


def test_pre_norm_normalizes_the_sublayer_input_only():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    block = SublayerConnection(4, norm_first=True)
    torch.testing.assert_close(block(x, sublayer), x + sublayer(block.norm(x)))


@pytest.mark.parametrize("norm_first", [False, True])
def test_dropout_on_the_sublayer_output(norm_first):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    block = SublayerConnection(4, dropout=0.5, norm_first=norm_first)
    torch.manual_seed(1)
    out = block(x, sublayer)
    torch.manual_seed(1)
    if norm_first:
        want = x + nn.functional.dropout(sublayer(block.norm(x)), 0.5)
    else:
        want = block.norm(x + nn.functional.dropout(sublayer(x), 0.5))
    torch.testing.assert_close(out, want)
