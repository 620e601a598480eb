"""Exercise checks that name the learner's mistake.

From pytest: `pytest exercises` runs exercises/test_*.py, which call `run_check`.
From a notebook: `from tfcourse.checking import check; check("ex01_attention")`.
"""

from .core import CheckFailure, Mistake, check, run_check

__all__ = ["CheckFailure", "Mistake", "check", "run_check"]
