"""Readings of a case other than the reference's that a wrong result may match: float64
inputs computed in float32 (LOWER_PRECISION), bool masks read inverted (MASK_READ_INVERTED),
(batch, seq, ...) inputs read seq-first (READ_SEQ_FIRST). Each takes the Item it checks."""

from __future__ import annotations

import dataclasses

import torch

from .comparison import float32_equal, safely, seq_first_back
from .mistakes import LOWER_PRECISION, MASK_READ_INVERTED, READ_SEQ_FIRST


def fail_if_float32(item, result, reference, case, what):
    """LOWER_PRECISION when a function's float64 inputs give `result`, float64, equal to
    the reference's on those inputs cast to float32, to float32's precision."""
    if item.is_class or not any(isinstance(a, torch.Tensor) and a.dtype == torch.float64
                                for a in case.args):
        return
    down = dataclasses.replace(case, args=tuple(
        a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.float64 else a
        for a in case.args))
    try:
        expected = item._expected(reference, down)
    except Exception:  # the reference refuses float32 inputs
        return
    if safely(float32_equal, result, expected):
        LOWER_PRECISION.fail(item._details(case, result), what=what.removeprefix("the "),
                             label=case.label)

def fail_if_read_otherwise(item, result, reference, case, what):
    """MASK_READ_INVERTED when `result` is the reference's for the case's bool masks
    inverted (all of them, or one of several); READ_SEQ_FIRST when it is the reference's
    for its (batch, seq, ...) inputs read seq-first (each input's axes 0 and 1 swapped,
    and the output's back)."""
    named = [(i, n) for i, (n, a) in enumerate(zip(case.names, case.args))
             if n and isinstance(a, torch.Tensor)]
    masks = [(i, n) for i, n in named if case.args[i].dtype == torch.bool
             and 0 < int(case.args[i].sum()) < case.args[i].numel()]
    seq = [(i, n) for i, n in named if case.args[i].is_floating_point()
           and case.args[i].dim() == 3 and case.args[i].size(0) > 1]
    if seq:  # and the inputs (a mask, ids) that share their (batch, seq) axes
        lead = case.args[seq[0][0]].shape[:2]
        seq += [(i, n) for i, n in named if (i, n) not in seq and case.args[i].dim() >= 2
                and case.args[i].shape[:2] == lead]
    compare = case.same or item.same
    singly = [[m] for m in masks] if len(masks) > 1 else []
    for mistake, chosen, change, back in (
            *((MASK_READ_INVERTED, c, lambda a: ~a, lambda r: r) for c in [masks, *singly]),
            (READ_SEQ_FIRST, seq, lambda a: a.transpose(0, 1), seq_first_back)):
        if not chosen:
            continue
        args = list(case.args)
        for i, _ in chosen:
            args[i] = change(args[i])
        try:
            expected = back(item._expected(reference, dataclasses.replace(case, args=tuple(args))))
        except Exception:  # the reference refuses the inputs read otherwise
            continue
        if safely(compare, result, expected):
            names = [n for _, n in chosen]
            mistake.fail(item._details(case, result), what=what.removeprefix("the "),
                         label=case.label, are="are" if len(names) > 1 else "is",
                         gives="give" if len(names) > 1 else "gives",
                         names=" and ".join(filter(None, (", ".join(names[:-1]), names[-1]))))
