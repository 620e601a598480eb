"""Checks for exercises/ex01_attention.py. Run: pytest exercises/test_ex01_attention.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex01_attention.py")


def test_scaled_dot_product_attention():
    run_check(EXERCISE, "scaled_dot_product_attention")
