"""Exercise checks that name the learner's mistake."""

from .core import Case, CheckFailure, Item, Mistake, check, run_check

__all__ = ["Case", "CheckFailure", "Item", "Mistake", "check", "run_check"]
