import pytest
import torch

from tfcourse.masks import causal_mask, padding_mask, target_mask


def test_padding_mask():
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 1, 4) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, False, True, True]]


def test_causal_mask_sees_itself_and_the_past_only():
    mask = causal_mask(4)
    assert mask.tolist() == [[j <= i for j in range(4)] for i in range(4)]


def test_target_mask_is_causal_and_padding():
    tokens = torch.tensor([[5, 6, 0]])
    assert target_mask(tokens, 0)[0, 0].tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, False],
    ]


def test_padding_mask_rejects_other_shapes():
    with pytest.raises(ValueError, match=r"tokens must have shape \(batch, seq\), got \(4,\)"):
        padding_mask(torch.tensor([1, 2, 3, 0]), 0)
