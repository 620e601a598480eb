"""Checks for exercises/ex07_training.py. Run: pytest exercises/test_ex07_training.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex07_training.py")


def test_make_batch():
    run_check(EXERCISE, "make_batch")


def test_label_smoothing_loss():
    run_check(EXERCISE, "label_smoothing_loss")


def test_noam_lr():
    run_check(EXERCISE, "noam_lr")


def test_train_step():
    run_check(EXERCISE, "train_step")
