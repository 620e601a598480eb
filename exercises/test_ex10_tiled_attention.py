"""Checks for exercises/ex10_tiled_attention.py. Run: pytest exercises/test_ex10_tiled_attention.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex10_tiled_attention.py")


def test_tiled_attention():
    run_check(EXERCISE, "tiled_attention")


def test_sliding_window_mask():
    run_check(EXERCISE, "sliding_window_mask")
