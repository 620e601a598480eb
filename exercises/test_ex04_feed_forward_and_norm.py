"""Checks for exercises/ex04_feed_forward_and_norm.py.

Run: pytest exercises/test_ex04_feed_forward_and_norm.py
"""

from pathlib import Path

from tfcourse.checking import run_check

EXERCISE = Path(__file__).with_name("ex04_feed_forward_and_norm.py")


def test_layer_norm():
    run_check(EXERCISE, "LayerNorm")


def test_position_wise_feed_forward():
    run_check(EXERCISE, "PositionWiseFeedForward")


def test_sublayer_connection():
    run_check(EXERCISE, "SublayerConnection")
