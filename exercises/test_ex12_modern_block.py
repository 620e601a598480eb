"""Checks for exercises/ex12_modern_block.py. Run: pytest exercises/test_ex12_modern_block.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex12_modern_block.py")


def test_rms_norm():
    run_check(EXERCISE, "RMSNorm")


def test_swiglu():
    run_check(EXERCISE, "SwiGLU")


def test_rotate():
    run_check(EXERCISE, "rotate")


def test_rotary_attention():
    run_check(EXERCISE, "rotary_attention")
