"""Buggy solutions to the exercises, each tagged with the mistake it demonstrates.

Each module is named after its exercise. @wrong("item.key") tags a solution with the key
of the mistake that the item's check must name: a catalogued one (e.g.
"MultiHeadAttention.mask_heads") or a shared one (e.g. "split_heads.in_place").
tests/test_checks.py runs the check on every tagged solution and requires that mistake's
title on the first line of the failure; every catalogued mistake needs at least one
solution. Several solutions write the same mistake in different ways: the checks diagnose
by behaviour, not by text.
"""


def wrong(key):
    """Tag a buggy solution with "item.mistake_key", the mistake its check must name."""
    item, _, mistake = key.partition(".")

    def tag(solution):
        solution.item, solution.mistake = item, mistake
        return solution

    return tag

