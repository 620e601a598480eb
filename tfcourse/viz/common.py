"""Helpers that every picture shares."""

import warnings

import numpy as np
import seaborn as sns
import torch


def head_colors(n_heads):
    """One colour per head, the same in every picture of the course."""
    return sns.color_palette("colorblind" if n_heads <= 10 else "husl", n_heads)


def show_token(token):
    """A token as a label: a space is shown as '␣' (else it would be invisible)."""
    return "␣" if token == " " else str(token)


def as_array(x, name):
    """A tensor (any device, any float dtype, or bool) or array-like as a numpy array."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x.numpy() if x.dtype == torch.bool else x.float().numpy()
    try:
        return np.asarray(x)
    except Exception as error:
        raise TypeError(f"{name} must be a tensor or an array, got {type(x).__name__}") from error


def heatmap(data, **kwargs):
    """seaborn.heatmap, without the PendingDeprecationWarning that seaborn 0.13 triggers in
    matplotlib 3.11 (its own call of cmap.set_bad): nothing a learner can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The set_bad function", PendingDeprecationWarning)
        return sns.heatmap(data, **kwargs)
