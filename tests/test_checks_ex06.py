"""Proves the checks of exercise 06: the references pass, the stubs are 'not implemented
yet', and every buggy solution fails with its diagnosis on the first line."""

from pathlib import Path

import pytest
from buggy_solutions import ex06_decoder as buggy
from buggy_solutions import first_line, run_as_learner, solutions

from tfcourse.checking import CheckFailure, check, core
from tfcourse.checking.ch06_decoder import (
    LAYER_MISTAKES,
    MASK_MISTAKES,
    check_causal_mask,
    check_decoder_layer,
)
from tfcourse.decoder import DecoderLayer
from tfcourse.masks import causal_mask

EXERCISES = Path(__file__).parents[1] / "exercises"


def check_for(solution):
    """Classes are decoder layers, functions are causal masks."""
    return check_decoder_layer if isinstance(solution, type) else check_causal_mask


def test_references_pass():
    check_causal_mask(causal_mask)
    check_decoder_layer(DecoderLayer)


def test_stubs_are_not_implemented_yet():
    stub = core.load_exercise(EXERCISES / "ex06_decoder.py")
    assert first_line(check_causal_mask, stub.causal_mask).startswith("Not implemented yet")
    assert first_line(check_decoder_layer, stub.DecoderLayer).startswith("Not implemented yet")


@pytest.mark.parametrize("solution", solutions(buggy))
def test_mistake_is_named_on_the_first_line(solution):
    assert first_line(check_for(solution), solution).startswith(solution.expected)


def test_every_catalogued_mistake_has_buggy_solutions():
    tagged = {s.values[0].expected for s in solutions(buggy)}
    assert all(any(m.title.startswith(t) for t in tagged) for m in MASK_MISTAKES + LAYER_MISTAKES)


def test_the_mask_mistake_shows_the_mask():
    with pytest.raises(CheckFailure) as failure:
        check_causal_mask(buggy.strictly_lower)
    assert "\n    0 0 0 0 0\n    1 0 0 0 0\n" in str(failure.value)


def test_notebook_check_prints_the_same_diagnosis(capsys):
    check(buggy.MemoryAsQueries, "DecoderLayer")
    out = capsys.readouterr().out
    assert out.startswith("✗ DecoderLayer: Queries and keys swapped in cross-attention:")
    check(DecoderLayer)
    assert capsys.readouterr().out == "✓ DecoderLayer: every check passes.\n"


def test_notebook_check_of_the_exercise_file_checks_only_its_items(capsys):
    check("ex06_decoder")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["✗ causal_mask", "✗ DecoderLayer"]


HALF_DONE = (  # the reference mask, and a layer that gives cross-attention the target mask
    "from tfcourse.decoder import DecoderLayer as Base\n"
    "from tfcourse.masks import causal_mask\n"
    "class DecoderLayer(Base):\n"
    "    def forward(self, x, memory, src_mask=None, tgt_mask=None):\n"
    "        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask)[0])\n"
    "        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, tgt_mask)[0])\n"
    "        return self.sublayers[2](x, self.feed_forward)\n"
)


def test_pytest_output_for_learners(tmp_path):
    """Run pytest on a half-done exercise as a learner does and read the FAILED line.
    (The stub's message is tested above, in-process.)"""
    run = run_as_learner(tmp_path, "ex06_decoder", HALF_DONE)
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 1 and " 1 passed" in run.stdout, run.stdout
    assert failed[0].startswith("FAILED test_ex06_decoder.py::test_decoder_layer - "), run.stdout
    assert failed[0].split(" - ", 1)[1].startswith(
        "Failed: Target mask used for cross-attention: cross-attention takes src_mask"
    ), run.stdout
    assert "Traceback" not in run.stdout
