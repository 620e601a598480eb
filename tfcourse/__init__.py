"""tfcourse: the Transformer of "Attention Is All You Need", built from scratch."""

__version__ = "0.1.0"
