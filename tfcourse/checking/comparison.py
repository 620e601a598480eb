"""Comparing results: `same` (the default comparison, tensors by `close`), copies of inputs
(`clone`) and whether the learner's code left them `unchanged`, and the random parameters
(`randomize`) that make every parameter's role show."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from collections.abc import Callable

import torch
from torch import nn

ABSENT = object()  # an attribute that a learner's object does not have


def describe(**values) -> str:
    """'query (2, 5, 8), mask (2, 1, 7)': how messages name the inputs of a case."""
    return ", ".join(
        f"{n} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else f"{n}={t!r}"
        for n, t in values.items()
        if t is not None
    )


def close(actual, expected: torch.Tensor, margin: float = 1.0) -> bool:
    """Same shape, dtype and values (NaN equal to NaN), with a tolerance for the dtype
    (`margin` times it)."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    if actual.dtype != expected.dtype:
        return False
    if not expected.is_floating_point():
        return torch.equal(actual, expected)
    if expected.dtype in (torch.float16, torch.bfloat16):  # a few units in the last place
        tol = margin * 4 * torch.finfo(expected.dtype).eps
        return torch.allclose(actual, expected, rtol=tol, atol=tol, equal_nan=True)
    tol = margin * (1e-10 if expected.dtype == torch.float64 else 1e-5)
    return torch.allclose(actual, expected, rtol=100 * tol, atol=tol, equal_nan=True)


def same(actual, expected, margin: float = 1.0) -> bool:
    """Default comparison: tensors by `close`, tuples and lists part by part, numbers by
    value, dataclasses field by field, anything else by ==; `margin` scales the tolerances."""
    if isinstance(expected, torch.Tensor):
        return close(actual, expected, margin)
    if expected is None:
        return actual is None
    if isinstance(expected, (tuple, list)):
        return (isinstance(actual, (tuple, list)) and len(actual) == len(expected)
                and all(same(a, e, margin) for a, e in zip(actual, expected)))
    if dataclasses.is_dataclass(expected):
        return all(same(getattr(actual, f.name, ABSENT), getattr(expected, f.name), margin)
                   for f in dataclasses.fields(expected))
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return (isinstance(actual, (int, float)) and not isinstance(actual, bool)
                and math.isclose(actual, expected, rel_tol=margin * 1e-6, abs_tol=margin * 1e-12))
    return actual == expected


def safely(compare: Callable, actual, expected) -> bool:
    """compare(actual, expected), False when learner objects make the comparison fail."""
    try:
        return bool(compare(actual, expected))
    except Exception:
        return False


def kind_of(value) -> str:
    """How messages name the type of a value: 'Tensor', 'tuple', 'None'."""
    return "None" if value is None else type(value).__name__


def wrong_kind(value, expected, what: str) -> tuple[str, str, str, str] | None:
    """(got, want, what, why) when `value` has `expected`'s values in another kind of
    container or number: a list for a tuple, a 0-d tensor for a Python number, a Python
    number for a tensor; else None."""
    if isinstance(expected, tuple) and isinstance(value, list):
        return ("a list", "a tuple is", what, "a list cannot be a dict key or a set member (it is "
                "unhashable): return tuple(...)")
    if isinstance(expected, list) and isinstance(value, tuple) and safely(same, list(value), expected):
        return ("a tuple", "a list is", what, "the docstring asks for a list (a caller may append "
                "to it or extend it, a tuple has neither): return [...], not (...)")
    if isinstance(expected, float) and isinstance(value, torch.Tensor):
        return ("a 0-d tensor", "a Python float is", what, "a tensor where a float is expected "
                "(an optimizer's lr, a schedule) carries a dtype and a device along: float(...) it")
    if isinstance(expected, torch.Tensor) and expected.dim() == 0 and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        return ("a Python number", "a 0-d tensor is", what, "torch returns such a value as a tensor "
                "(torch.nn.utils.clip_grad_norm_ returns the total norm as one); .item() or float() "
                "drops its dtype and device and forces a device sync")
    if isinstance(expected, dict) and isinstance(value, dict) and expected and all(
            isinstance(k, tuple) for k in expected) and all(isinstance(k, str) for k in value):
        return ("string keys", "tuple keys are", what, f"a key such as {next(iter(value))!r} is text, "
                "and a lookup by the pair (a, b) finds nothing: key the dict by the tuple itself")
    if isinstance(expected, dict) and isinstance(value, dict) and expected and all(
            isinstance(k, tuple) for k in expected) and all(isinstance(k, bytes) for k in value):
        return ("bytes keys", "tuple keys are", what, f"a key such as {next(iter(value))!r} is bytes "
                "(bytes(word[i:i + 2])): a merged rank of 256 or more is no byte (bytes([256]) raises "
                "ValueError), and a lookup by the pair (a, b) finds nothing: key the dict by the tuple")
    packed = _packing(value, expected)
    if packed:
        return (f"integer keys (each pair packed into one int, {packed[0]})", "tuple keys are", what,
                f"a key such as {next(iter(value))!r} is one number, and a lookup by the pair (a, b) "
                "finds nothing (a port's u64 key): key the dict by the tuple (a, b) itself")
    if _nested(value, expected):
        return ("a list of lists", "one flat list is", what, "each part's list was appended as "
                "one item: extend the result with it (out += part), not append it")
    if isinstance(expected, (tuple, list)) and isinstance(value, (tuple, list)) \
            and len(value) == len(expected):
        for i, (v, e) in enumerate(zip(value, expected)):
            found = wrong_kind(v, e, f"{what}[{i}]")
            if found:
                return found
    return None


def _nested(value, expected) -> bool:
    """Whether `value` is a list of lists where `expected` is a flat list of numbers."""
    return isinstance(expected, list) and isinstance(value, list) and bool(value) and all(
        isinstance(v, (list, tuple)) for v in value) and not any(
        isinstance(e, (list, tuple)) for e in expected)


def as_kind_of(value, expected):
    """`value` turned into `expected`'s kinds where wrong_kind finds them wrong (a list into a
    tuple, a 0-d tensor into a float, a number into a tensor), to see if its values are right."""
    if isinstance(expected, tuple) and isinstance(value, list):
        value = tuple(value)
    if isinstance(expected, list) and isinstance(value, tuple):
        value = list(value)
    if _nested(value, expected):
        return [x for part in value for x in part]
    if isinstance(expected, dict) and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {tuple(int(t) for t in re.findall(r"-?\d+", k)): v for k, v in value.items()}
    if isinstance(expected, dict) and isinstance(value, dict) and all(isinstance(k, bytes) for k in value):
        return {tuple(k): v for k, v in value.items()}
    packed = _packing(value, expected)
    if packed:
        return {packed[1](k): v for k, v in value.items()}
    if isinstance(expected, float) and isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(expected, torch.Tensor) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(value, dtype=expected.dtype)
    if isinstance(expected, (tuple, list)) and isinstance(value, (tuple, list)) \
            and len(value) == len(expected):
        return type(value)(as_kind_of(v, e) for v, e in zip(value, expected))
    return value


def _packing(value, expected):
    """(how, unpack) when `value`, a dict keyed by ints, has `expected`'s pairs (a, b) each
    packed into one int: a << s | b, or a * m + b; else None."""
    if not (isinstance(expected, dict) and isinstance(value, dict) and expected and value
            and all(isinstance(k, tuple) and len(k) == 2 for k in expected)
            and all(type(k) is int for k in value)):
        return None
    for how, unpack in [*((f"a << {s} | b", lambda k, s=s: (k >> s, k & ((1 << s) - 1)))
                          for s in (8, 16, 20, 24, 32, 64)),
                        *((f"a * {m} + b", lambda k, m=m: divmod(k, m))
                          for m in (256, 1000, 10000, 100000, 1000000))]:
        if {unpack(k) for k in value} == set(expected):
            return how, unpack
    return None

def clone(value):
    """A copy of every tensor and module in `value` (in tuples, lists, dicts, dataclasses)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, nn.Module):
        return copy.deepcopy(value)
    if isinstance(value, (tuple, list)):
        return type(value)(clone(v) for v in value)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: clone(getattr(value, f.name))
                                             for f in dataclasses.fields(value)})
    return value


def unchanged(a, b) -> bool:
    """Whether `a` (the learner's copy of an input, after the call) still equals `b`."""
    if isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and torch.equal(a, b))
    if isinstance(b, nn.Module):
        return isinstance(a, nn.Module) and unchanged(module_state(a), module_state(b))
    if isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and len(a) == len(b)
                and all(unchanged(x, y) for x, y in zip(a, b)))
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(unchanged(a[k], b[k]) for k in b)
    if dataclasses.is_dataclass(b) and not isinstance(b, type):
        return all(unchanged(getattr(a, f.name, None), getattr(b, f.name))
                   for f in dataclasses.fields(b))
    return safely(lambda x, y: x == y, a, b)


def module_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of `module` (non-persistent buffers too), copied."""
    state = {k: v.detach().clone() for k, v in module.named_parameters()}
    state.update({k: v.detach().clone() for k, v in module.named_buffers()})
    return state


def randomize(module: nn.Module, seed: int) -> nn.Module:
    """Random parameters, so that two parameters in different roles are never equal: the
    gains of norms around 1, their biases and other vectors around 0, matrices scaled by
    1 / sqrt(fan_in). (With the default init two LayerNorms are the same function, and a
    mistake that swaps them would be invisible.)"""
    g = torch.Generator().manual_seed(seed)
    norms = {name for name, m in module.named_modules()
             if isinstance(m, nn.LayerNorm) or type(m).__name__ == "LayerNorm"}
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            owner, _, kind = name.rpartition(".")
            if p.dim() >= 2:
                p.copy_(noise / p.shape[-1] ** 0.5)
            elif owner in norms and kind == "weight":
                p.copy_(1 + 0.5 * noise)
            else:
                p.copy_(0.5 * noise)
    return module


def float32_equal(actual, expected) -> bool:
    """`actual` (float64 tensors, or a tuple of them) equal to `expected` (the same in
    float32) to float32's precision."""
    if isinstance(expected, (tuple, list)):
        return (isinstance(actual, (tuple, list)) and len(actual) == len(expected)
                and all(float32_equal(a, e) for a, e in zip(actual, expected)))
    if isinstance(expected, torch.Tensor) and expected.dtype == torch.float32:
        return (isinstance(actual, torch.Tensor) and actual.dtype == torch.float64
                and same(actual.float(), expected))
    return same(actual, expected)


def seq_first_back(result):
    """A result computed on seq-first inputs, with its (or its first part's) axes 0 and 1
    swapped back."""
    if isinstance(result, tuple):
        return (seq_first_back(result[0]),) + result[1:]
    return result.transpose(0, 1) if result.dim() >= 3 else result
