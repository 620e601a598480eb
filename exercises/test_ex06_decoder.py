"""Checks for exercises/ex06_decoder.py. Run: pytest exercises/test_ex06_decoder.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex06_decoder.py")


def test_causal_mask():
    run_check(EXERCISE, "causal_mask")


def test_decoder_layer():
    run_check(EXERCISE, "DecoderLayer")
