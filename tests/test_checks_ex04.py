"""Proves the checks of exercise 04: the references pass, the stubs are 'not implemented
yet', and every buggy solution fails with its diagnosis on the first line."""

from pathlib import Path

import pytest
import torch
from buggy_solutions import ex04_feed_forward_and_norm as buggy
from buggy_solutions import first_line, run_as_learner, solutions

from tfcourse.checking import ch04_feed_forward_and_norm as ch04
from tfcourse.checking import check, core
from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.normalization import LayerNorm, SublayerConnection

EXERCISES = Path(__file__).parents[1] / "exercises"
REFERENCES = {
    "LayerNorm": (LayerNorm, ch04.check_layer_norm),
    "PositionWiseFeedForward": (PositionWiseFeedForward, ch04.check_position_wise_feed_forward),
    "SublayerConnection": (SublayerConnection, ch04.check_sublayer_connection),
}


def check_of(solution):
    """The check of the reference class a buggy solution subclasses."""
    return next(c for cls, c in REFERENCES.values() if issubclass(solution, cls))


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_passes(name):
    cls, check_fn = REFERENCES[name]
    check_fn(cls)


@pytest.mark.parametrize("name", REFERENCES)
def test_stub_is_not_implemented_yet(name):
    stub = getattr(core.load_exercise(EXERCISES / "ex04_feed_forward_and_norm.py"), name)
    assert first_line(REFERENCES[name][1], stub).startswith("Not implemented yet")


@pytest.mark.parametrize("solution", solutions(buggy))
def test_mistake_is_named_on_the_first_line(solution):
    assert first_line(check_of(solution), solution).startswith(solution.expected)


def test_every_catalogued_mistake_has_buggy_solutions():
    tagged = {s.values[0].expected for s in solutions(buggy)}
    catalogue = (
        ch04.NORM_BUILTIN, *ch04.NORM_MISTAKES, *ch04.FFN_MISTAKES, *ch04.SUBLAYER_MISTAKES,
        *ch04.DROPOUT_MISTAKES,
    )
    assert all(any(m.title.startswith(t) for t in tagged) for m in catalogue)


def test_checks_leave_the_global_random_state_alone():
    state = torch.random.get_rng_state()
    for cls, check_fn in REFERENCES.values():
        check_fn(cls)
    assert torch.equal(state, torch.random.get_rng_state())


def test_notebook_check_prints_the_same_diagnosis(capsys):
    check(buggy.UnbiasedVar, "LayerNorm")
    assert capsys.readouterr().out.startswith("✗ LayerNorm: Unbiased variance:")
    check(LayerNorm)
    assert capsys.readouterr().out == "✓ LayerNorm: every check passes.\n"


HALF_SOLVED = """
from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.normalization import LayerNorm
from torch import nn

class SublayerConnection(nn.Module):
    def __init__(self, d_model, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))
"""


def test_pytest_output_for_learners(tmp_path):
    """Run pytest on the exercise as a learner does (two items right, one wrong) and read
    the FAILED line."""
    run = run_as_learner(tmp_path, "ex04_feed_forward_and_norm", HALF_SOLVED)
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    assert "1 failed, 2 passed" in run.stdout and len(failed) == 1, run.stdout
    assert failed[0].split(" - ", 1)[1].startswith(
        "Failed: Norm on the wrong side of the residual (pre- and post-norm mixed up): post-norm"
    ), run.stdout
    assert "Traceback" not in run.stdout
