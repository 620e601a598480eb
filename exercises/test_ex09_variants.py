"""Checks for exercises/ex09_variants.py. Run: pytest exercises/test_ex09_variants.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex09_variants.py")


def test_lm_loss():
    run_check(EXERCISE, "lm_loss")


def test_mask_tokens():
    run_check(EXERCISE, "mask_tokens")


def test_mean_pool():
    run_check(EXERCISE, "mean_pool")


def test_decoder_lm():
    run_check(EXERCISE, "DecoderLM")
