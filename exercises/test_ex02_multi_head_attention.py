"""Checks for exercises/ex02_multi_head_attention.py.
Run: pytest exercises/test_ex02_multi_head_attention.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex02_multi_head_attention.py")


def test_split_heads():
    run_check(EXERCISE, "split_heads")


def test_merge_heads():
    run_check(EXERCISE, "merge_heads")


def test_multi_head_attention():
    run_check(EXERCISE, "MultiHeadAttention")
