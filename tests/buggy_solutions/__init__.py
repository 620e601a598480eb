"""Buggy solutions to the exercises, each tagged with the diagnosis its check must give.

The meta-tests (tests/test_checks_exNN.py) run every check on every solution here and
assert the first line of the failure starts with the tagged diagnosis. Several solutions
write the same mistake in different ways: the checks diagnose by behaviour, not by text.
"""


def diagnosis(expected):
    """Tag a buggy solution with the start of the first line its check must print."""

    def tag(solution):
        solution.expected = expected
        return solution

    return tag


def solutions(module):
    """The tagged solutions of a module, as pytest params named after them."""
    import pytest

    return [
        pytest.param(value, id=name)
        for name, value in vars(module).items()
        if hasattr(value, "expected")
    ]


def first_line(check_fn, solution):
    """The first line of the failure that `check_fn` reports for `solution`."""
    import pytest

    from tfcourse.checking import CheckFailure

    with pytest.raises(CheckFailure) as failure:
        check_fn(solution)
    return str(failure.value).splitlines()[0]


def run_as_learner(tmp_path, exercise, source):
    """Run pytest in `tmp_path` on exercise `exercise` (e.g. "ex01_attention") whose file
    holds `source`, as a learner runs it; return the finished process (stdout, returncode)."""
    import subprocess
    import sys
    from pathlib import Path

    exercises = Path(__file__).parents[2] / "exercises"
    for name in (f"test_{exercise}.py", "pytest.ini"):
        (tmp_path / name).write_text((exercises / name).read_text())
    (tmp_path / f"{exercise}.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:timeout"], cwd=tmp_path, capture_output=True, text=True
    )
