"""The checks accept right solutions written otherwise than the reference (each buggy
solutions module's RIGHT): an encoder layer's residuals written out by hand, other draws and
other orders of draws for mask_tokens (its check judges the rule, not the values), other
formulas for lm_loss and mean_pool, other wirings of DecoderLM.forward, greedy decoding
through decode's parts and the cache, exercise 11's BPE functions written otherwise (a plain
dict, a slice assignment, min over a negated count, ranks looked up by position, a bytearray).
Exercise 10's are in test_efficiency.py and test_long_attention.py."""

from importlib import import_module

import pytest

from tfcourse.checking import entry

RIGHT = [(f"{exercise}.{name}", solution)
         for exercise in ("ex05_encoder", "ex08_decoding", "ex09_variants", "ex11_tokens",
                         "ex12_modern_block", "ex13_small_llm")
         for name, found in import_module(f"buggy_solutions.{exercise}").RIGHT.items()
         for solution in found]


@pytest.mark.parametrize("solution", RIGHT, ids=lambda s: s[1].__name__)
def test_a_right_solution_in_another_style_passes(solution):
    key, target = solution
    entry.item(key).check(target)
