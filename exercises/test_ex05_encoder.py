"""Checks for exercises/ex05_encoder.py. Run: pytest exercises/test_ex05_encoder.py"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex05_encoder.py")


def test_embeddings():
    run_check(EXERCISE, "Embeddings")


def test_encoder_layer():
    run_check(EXERCISE, "EncoderLayer")


def test_encoder():
    run_check(EXERCISE, "Encoder")
