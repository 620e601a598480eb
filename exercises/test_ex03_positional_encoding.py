"""Checks for exercises/ex03_positional_encoding.py. Run: pytest exercises/test_ex03_positional_encoding.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex03_positional_encoding.py")


def test_sinusoidal_encoding():
    run_check(EXERCISE, "sinusoidal_encoding")


def test_positional_encoding():
    run_check(EXERCISE, "PositionalEncoding")


def test_embed_and_encode():
    run_check(EXERCISE, "embed_and_encode")
