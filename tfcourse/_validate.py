"""Argument checks shared by the constructors: bad input gets an error that names the
argument and what it got, before torch fails somewhere deep (or silently computes NaN)."""

import math
import operator

import torch


def integer(name, value, minimum=1):
    """``value`` as an int (numpy's integers too), if it is one >= minimum."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return number


def probability(name, value):
    """A dropout probability: a number in [0, 1] (NaN is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def positive(name, value):
    """A finite number > 0 (an epsilon, a learning rate)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def same_dtype(name, x, weight):
    """``x`` must have the module's floating-point dtype (under autocast, torch converts)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(
            f"{name} is {x.dtype} but the module's weights are {weight.dtype}: use one dtype, "
            f"e.g. module.to({x.dtype}) or {name}.to({weight.dtype})"
        )
