"""Proves the checks of exercise 01: the reference passes, the stub is 'not implemented
yet', and every buggy solution fails with its diagnosis on the first line."""

from pathlib import Path

import pytest
from buggy_solutions import ex01_attention as buggy
from buggy_solutions import first_line, run_as_learner, solutions

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.checking import CheckFailure, check, core
from tfcourse.checking.ch01_attention import MISTAKES, check_scaled_dot_product_attention

EXERCISES = Path(__file__).parents[1] / "exercises"


def test_reference_passes():
    check_scaled_dot_product_attention(scaled_dot_product_attention)


def test_stub_is_not_implemented_yet():
    stub = core.load_exercise(EXERCISES / "ex01_attention.py").scaled_dot_product_attention
    assert first_line(check_scaled_dot_product_attention, stub).startswith("Not implemented yet")


@pytest.mark.parametrize("solution", solutions(buggy))
def test_mistake_is_named_on_the_first_line(solution):
    assert first_line(check_scaled_dot_product_attention, solution).startswith(solution.expected)


def test_every_catalogued_mistake_has_buggy_solutions():
    tagged = {s.values[0].expected for s in solutions(buggy)}
    assert {m.title for m in MISTAKES} <= tagged


def test_huge_prints_are_hidden(capsys):
    with pytest.raises(CheckFailure) as failure:
        check_scaled_dot_product_attention(buggy.prints_a_lot)
    assert len(str(failure.value)) < 1000
    assert capsys.readouterr().out == ""


def test_notebook_check_prints_the_same_diagnosis(capsys):
    check(buggy.no_scaling, "scaled_dot_product_attention")
    assert capsys.readouterr().out.startswith("✗ scaled_dot_product_attention: Scores not scaled:")
    check(scaled_dot_product_attention)
    assert capsys.readouterr().out == "✓ scaled_dot_product_attention: every check passes.\n"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from tfcourse.attention import scaled_dot_product_attention\n", None),
        (None, "Not implemented yet"),
        (
            "import torch\n"
            "def scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    w = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~mask, -1e9)\n"
            "                      if mask is not None else q @ k.transpose(-2, -1), -1)\n"
            "    return w @ v, w\n",
            "Scores not scaled",
        ),
        (
            "def scaled_dot_product_attention(q, k, v, mask=None)\n    pass\n",
            "ex01_attention.py has a syntax error",
        ),
    ],
    ids=["reference", "stub", "no-scaling", "syntax-error"],
)
def test_pytest_output_for_learners(tmp_path, source, expected):
    """Run pytest on the exercise as a learner does and read the FAILED line."""
    stub = (EXERCISES / "ex01_attention.py").read_text()
    run = run_as_learner(tmp_path, "ex01_attention", stub if source is None else source)
    if expected is None:
        assert run.returncode == 0, run.stdout
        return
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 1, run.stdout
    assert failed[0].split(" - ", 1)[1].startswith(f"Failed: {expected}"), run.stdout
    assert "Traceback" not in run.stdout
