"""Proves the checks of exercise 02: the reference passes, the stubs are 'not implemented
yet', and every buggy solution fails with its diagnosis on the first line."""

from pathlib import Path

import pytest
import torch
from buggy_solutions import ex02_multi_head_attention as buggy
from buggy_solutions import first_line, run_as_learner, solutions

from tfcourse import multi_head
from tfcourse.checking import check, core
from tfcourse.checking.ch02_multi_head_attention import (
    MERGE_MISTAKES,
    MISTAKES,
    SPLIT_MISTAKES,
    check_merge_heads,
    check_multi_head_attention,
    check_split_heads,
)

EXERCISES = Path(__file__).parents[1] / "exercises"
CHECKS = {
    "split_heads": check_split_heads,
    "merge_heads": check_merge_heads,
    "MultiHeadAttention": check_multi_head_attention,
}


def item(solution):
    """Which exercise item a buggy solution stands for."""
    if isinstance(solution, type):
        return "MultiHeadAttention"
    return "split_heads" if solution.__name__.startswith("split_") else "merge_heads"


@pytest.mark.parametrize("name", CHECKS)
def test_reference_passes(name):
    CHECKS[name](getattr(multi_head, name))


def test_other_correct_ways_pass():
    def split_heads(x, n_heads):  # chunk and stack instead of view and transpose
        return torch.stack(x.chunk(n_heads, dim=-1), dim=1)

    def merge_heads(x):
        return torch.cat(x.unbind(1), dim=-1)

    check_split_heads(split_heads)
    check_merge_heads(merge_heads)


@pytest.mark.parametrize("name", CHECKS)
def test_stub_is_not_implemented_yet(name):
    stub = getattr(core.load_exercise(EXERCISES / "ex02_multi_head_attention.py"), name)
    assert first_line(CHECKS[name], stub).startswith("Not implemented yet")


@pytest.mark.parametrize("solution", solutions(buggy))
def test_mistake_is_named_on_the_first_line(solution):
    assert first_line(CHECKS[item(solution)], solution).startswith(solution.expected)


def test_every_catalogued_mistake_has_buggy_solutions():
    tagged = {(item(s.values[0]), s.values[0].expected) for s in solutions(buggy)}
    catalogue = {("split_heads", m.title) for m in SPLIT_MISTAKES}
    catalogue |= {("merge_heads", m.title) for m in MERGE_MISTAKES}
    catalogue |= {("MultiHeadAttention", m.title) for m in MISTAKES}
    assert catalogue <= tagged, catalogue - tagged


def test_notebook_check_prints_the_same_diagnosis(capsys):
    check(buggy.NoOutputProjection, "MultiHeadAttention")
    assert capsys.readouterr().out.startswith("✗ MultiHeadAttention: Output projection missing:")
    check(multi_head.MultiHeadAttention)
    assert capsys.readouterr().out == "✓ MultiHeadAttention: every check passes.\n"


REFERENCE = "from tfcourse.multi_head import MultiHeadAttention, merge_heads, split_heads\n"


@pytest.mark.parametrize(
    "source, expected",
    [
        (None, ["Not implemented yet"] * 3),
        (
            REFERENCE.replace("merge_heads, ", "")
            + "def merge_heads(x):\n    return x.reshape(x.size(0), x.size(2), -1)\n",
            [None, "Heads merged in the wrong order", None],
        ),
    ],
    ids=["stub", "merge-without-transpose"],
)
def test_pytest_output_for_learners(tmp_path, source, expected):
    """Run pytest on the exercise as a learner does and read the FAILED lines."""
    stub = (EXERCISES / "ex02_multi_head_attention.py").read_text()
    run = run_as_learner(tmp_path, "ex02_multi_head_attention", stub if source is None else source)
    failed = {
        line.split("::")[1].split(" ")[0]: line.split(" - ", 1)[1]
        for line in run.stdout.splitlines()
        if line.startswith("FAILED ")
    }
    tests = ("test_split_heads", "test_merge_heads", "test_multi_head_attention")
    for test, want in zip(tests, expected):
        if want is None:
            assert test not in failed, run.stdout
        else:
            assert failed[test].startswith(f"Failed: {want}"), run.stdout
    assert "Traceback" not in run.stdout
