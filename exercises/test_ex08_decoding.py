"""Checks for exercises/ex08_decoding.py. Run: pytest exercises/test_ex08_decoding.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex08_decoding.py")


def test_greedy_decode():
    run_check(EXERCISE, "greedy_decode")


def test_beam_search_step():
    run_check(EXERCISE, "beam_search_step")


def test_decode_step():
    run_check(EXERCISE, "decode_step")
