"""Exercise 09's checks accept right solutions written otherwise than the reference: other
draws and other orders of draws for mask_tokens (its check judges the rule, not the values),
other formulas for lm_loss and mean_pool, other wirings of DecoderLM.forward (its layers
written with their sublayers, chapter 06's masks, the tied matrix used directly)."""

import pytest
from buggy_solutions.ex09_variants import RIGHT

from tfcourse.checking import entry


@pytest.mark.parametrize("solution", [(name, s) for name, found in RIGHT.items() for s in found],
                         ids=lambda s: s[1].__name__)
def test_a_right_solution_in_another_style_passes(solution):
    name, target = solution
    entry.item(f"ex09_variants.{name}").check(target)
