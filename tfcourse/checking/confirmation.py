"""A catalogued match confirmed on the later cases before it is named.

A mistake is named when its computation gives the learner's result on the first case the
learner gets wrong (and the reference's on the cases passed). One case can be matched by
chance: a scan in steps of two and an assignment for `+=` both lose the same counts on a
small dict. So, for a function (or a plain class), the learner's code is also run on the
cases after that one; where it is wrong again, a match should give what it gives there
too. A match that gives something else on most of them is not the learner's mistake:
another match that the later cases confirm is named instead, or none (the explanation then
tells what differs).
"""

from __future__ import annotations

import math

import torch

from .comparison import clone, safely
from .sandbox import call


def later_failures(item, obj, case):
    """(case, reference object, learner's result) for every case after `case`, of the same
    kind, where the learner's `obj` returns a wrong result (a case it raises on or gets
    right says nothing about which wrong computation it runs, nor one in half precision or
    in training mode, where its rounding or its random draws are not the mistake's), one at a
    time (the learner's code runs when one is asked for)."""
    for later in _later_cases(item, obj, case):
        outcome = call(item._run, obj, clone(later.args), later, seed=later.seed)
        reference = item._reference_object(later)
        compare = item.match or later.same or item.same
        if outcome.error is None and not safely(compare, outcome.value,
                                                item._expected(reference, later)):
            yield later, reference, outcome.value


def _later_cases(item, obj, case) -> list:
    if obj is None or item.is_module or not any(c is case for c in item.cases):
        return []
    kind = case.run or item.run
    return [later for later in item.cases[[id(c) for c in item.cases].index(id(case)) + 1:]
            if (later.run or item.run) is kind and not _half(later) and not later.train]


def agreement(item, mistake, compute, failures) -> tuple[int, int]:
    """On how many of the learner's later `failures` the mistake's `compute` gives the
    learner's result, and on how many it gives another (where the mistake is looked for,
    its computation runs, and both results are finite or both are not)."""
    agreed = disagreed = 0
    for later, reference, result in failures:
        if mistake not in (item.mistakes if later.mistakes is None else later.mistakes):
            continue
        try:
            predicted = item._compute(compute, reference, later)
        except Exception:  # the mistake cannot run there: no evidence either way
            continue
        if _finite(predicted) != _finite(result):  # -inf or 1e9 for a masked score: no evidence
            continue
        if safely(item.match or later.same or item.same, result, predicted):
            agreed += 1
        else:
            disagreed += 1
    return agreed, disagreed


def confirmed(item, found, obj, case):
    """The match of `found` ((mistake, computation) pairs that give the learner's result on
    `case`) that the later cases confirm, or (None, None). A match is contradicted when it
    gives another result than the learner's on two or more of the learner's later wrong
    results, and on at least twice as many as it gives the learner's (a catalogued
    computation need not follow the learner's code into every regime, so a case it misses
    is no proof; a match by chance misses most); of the others, the one that gives most
    of them wins (the first of equals)."""
    if not found:
        return None, None
    if len(found) == 1:  # one match: the learner's later cases run only until they decide
        return found[0] if _kept(item, *found[0], obj, case) else (None, None)
    failures = list(later_failures(item, obj, case))
    if not failures:
        return found[0]
    scored = [(f, agreement(item, f[0], f[1], failures)) for f in found]
    kept = [(f, agreed) for f, (agreed, disagreed) in scored if not _contradicted(agreed, disagreed)]
    if not kept:
        return None, None
    return max(kept, key=lambda k: k[1])[0]


def _kept(item, mistake, compute, obj, case) -> bool:
    """Whether one match is not contradicted (as in `confirmed`), stopping as soon as the
    learner's cases left cannot contradict it."""
    left, agreed, disagreed = len(_later_cases(item, obj, case)), 0, 0
    if left < 2:
        return True
    for failure in later_failures(item, obj, case):
        a, d = agreement(item, mistake, compute, [failure])
        agreed, disagreed = agreed + a, disagreed + d
        left = len(_later_cases(item, obj, failure[0]))
        if not _contradicted(agreed, disagreed + left):
            return True
    return not _contradicted(agreed, disagreed)


def _contradicted(agreed, disagreed) -> bool:
    """Whether a match that gives the learner's later results `agreed` times and others
    `disagreed` times is not the learner's mistake (see `confirmed`)."""
    return disagreed >= max(2, 2 * agreed)


def _finite(value) -> bool:
    """Whether every number of `value` (tensors and floats, in lists, tuples, dicts) is finite."""
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def _half(case) -> bool:
    """Whether `case` computes in float16 or bfloat16."""
    return case.dtype in _HALF or any(
        isinstance(a, torch.Tensor) and a.dtype in _HALF for a in (*case.args, *case.kwargs.values()))


_HALF = (torch.float16, torch.bfloat16)
