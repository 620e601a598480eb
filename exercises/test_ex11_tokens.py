"""Checks for exercises/ex11_tokens.py. Run: pytest exercises/test_ex11_tokens.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex11_tokens.py")


def test_count_pairs():
    run_check(EXERCISE, "count_pairs")


def test_merge():
    run_check(EXERCISE, "merge")


def test_learn_merges():
    run_check(EXERCISE, "learn_merges")


def test_encode():
    run_check(EXERCISE, "encode")


def test_decode():
    run_check(EXERCISE, "decode")
