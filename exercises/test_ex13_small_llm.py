"""Checks for exercises/ex13_small_llm.py. Run: pytest exercises/test_ex13_small_llm.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex13_small_llm.py")


def test_adamw_step():
    run_check(EXERCISE, "adamw_step")


def test_cosine_lr():
    run_check(EXERCISE, "cosine_lr")


def test_clip_grad_norm():
    run_check(EXERCISE, "clip_grad_norm")


def test_param_groups():
    run_check(EXERCISE, "param_groups")


def test_text_stream():
    run_check(EXERCISE, "TextStream")
