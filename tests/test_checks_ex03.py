"""Proves the checks of exercise 03: the reference passes, the stubs are 'not implemented
yet', and every buggy solution fails with its diagnosis on the first line."""

import inspect
from pathlib import Path

import pytest
import torch
from buggy_solutions import ex03_positional_encoding as buggy
from buggy_solutions import first_line, run_as_learner, solutions

from tfcourse.checking import ch03_positional_encoding as ch03
from tfcourse.checking import check, core
from tfcourse.positional import PositionalEncoding, sinusoidal_encoding

EXERCISES = Path(__file__).parents[1] / "exercises"
CHECKS = {
    "sinusoidal_encoding": ch03.check_sinusoidal_encoding,
    "PositionalEncoding": ch03.check_positional_encoding,
    "embed_and_encode": ch03.check_embed_and_encode,
}
REFERENCES = {
    "sinusoidal_encoding": sinusoidal_encoding,
    "PositionalEncoding": PositionalEncoding,
    "embed_and_encode": ch03.embed_and_encode,
}


def item(solution):
    """The exercise item a buggy solution is written for."""
    if isinstance(solution, type):
        return "PositionalEncoding"
    params = inspect.signature(solution).parameters
    return "sinusoidal_encoding" if "max_len" in params else "embed_and_encode"


@pytest.mark.parametrize("name", CHECKS)
def test_reference_passes(name):
    CHECKS[name](REFERENCES[name])


@pytest.mark.parametrize("name", CHECKS)
def test_stub_is_not_implemented_yet(name):
    stub = getattr(core.load_exercise(EXERCISES / "ex03_positional_encoding.py"), name)
    assert first_line(CHECKS[name], stub).startswith("Not implemented yet")


@pytest.mark.parametrize("solution", solutions(buggy))
def test_mistake_is_named_on_the_first_line(solution):
    assert first_line(CHECKS[item(solution)], solution).startswith(solution.expected)


def test_every_catalogued_mistake_has_buggy_solutions():
    tagged = {s.values[0].expected for s in solutions(buggy)}
    catalogue = (*ch03.TABLE_MISTAKES, ch03.MULTIPLIED, ch03.START_IGNORED, *ch03.SCALE_MISTAKES)
    assert {m.title for m in catalogue} <= tagged


def test_positional_encoding_is_checked_without_the_learners_table():
    """An unfinished (or wrong) sinusoidal_encoding does not fail the PositionalEncoding item."""
    module = core.load_exercise(EXERCISES / "ex03_positional_encoding.py")
    module.PositionalEncoding.forward = PositionalEncoding.forward
    ch03.check_positional_encoding(module.PositionalEncoding)
    module.sinusoidal_encoding = buggy.cos_then_sin
    ch03.check_positional_encoding(module.PositionalEncoding)
    assert module.sinusoidal_encoding is buggy.cos_then_sin  # restored after the check


def test_checks_leave_the_global_random_state_alone():
    state = torch.random.get_rng_state()
    for name in CHECKS:
        CHECKS[name](REFERENCES[name])
    assert torch.equal(state, torch.random.get_rng_state())


def test_notebook_check_prints_the_same_diagnosis(capsys):
    check(buggy.cos_then_sin, "sinusoidal_encoding")
    assert capsys.readouterr().out.startswith("✗ sinusoidal_encoding: sin and cos swapped:")
    check(sinusoidal_encoding)
    assert capsys.readouterr().out == "✓ sinusoidal_encoding: every check passes.\n"


HALF_SOLVED = """
import math
import torch
from torch import nn
from tfcourse.positional import sinusoidal_encoding, PositionalEncoding
def embed_and_encode(tokens, embedding, positional_encoding):
    return positional_encoding(embedding(tokens))
"""


def test_pytest_output_for_learners(tmp_path):
    """Run pytest on the exercise as a learner does (two items right, one wrong) and read
    the FAILED line."""
    run = run_as_learner(tmp_path, "ex03_positional_encoding", HALF_SOLVED)
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    assert "1 failed, 2 passed" in run.stdout and len(failed) == 1, run.stdout
    assert failed[0].split(" - ", 1)[1].startswith(
        "Failed: Embeddings not scaled by sqrt(d_model): the paper multiplies"
    ), run.stdout
    assert "Traceback" not in run.stdout
