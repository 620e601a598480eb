"""tfcourse: the Transformer of "Attention Is All You Need", built from scratch.

The public names are here (``tfcourse.Transformer``, ``tfcourse.train``, ...), one module per
chapter behind them. They are imported on first use, so that ``import tfcourse.attention``
does not load the training code.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "attention": ["scaled_dot_product_attention"],
    "multi_head": ["MultiHeadAttention"],
    "positional": ["PositionalEncoding", "LearnedPositionalEncoding", "sinusoidal_encoding",
                   "RotaryEmbedding"],
    "feed_forward": ["PositionWiseFeedForward", "SwiGLU"],
    "normalization": ["LayerNorm", "SublayerConnection", "RMSNorm"],
    "masks": ["padding_mask", "causal_mask", "target_mask"],
    "encoder": ["Embeddings", "EncoderLayer", "Encoder"],
    "decoder": ["DecoderLayer", "Decoder"],
    "config": ["BlockConfig"],
    "model": ["Transformer", "TransformerConfig", "count_parameters"],
    "variants": ["EncoderClassifier", "EncoderClassifierConfig", "DecoderLM", "DecoderLMConfig"],
    "modern": ["LlamaLM", "LlamaConfig"],
    "vocab": ["Vocab"],
    "tokens": ["BPE", "train_bpe"],
    "batches": ["Batch", "make_batch"],
    "data": ["Task", "copy_task", "reverse_task", "dates_task"],
    "losses": ["label_smoothing_loss"],
    "schedules": ["noam_lr"],
    "training": ["TrainConfig", "train", "train_step"],
    "inference": ["predict", "exact_match", "classify", "complete"],
    "checkpoint": ["save_checkpoint", "load_checkpoint", "register"],
    "decoding": ["greedy_decode", "beam_search_decode", "sample_decode", "generate"],
    "recipes": ["RECIPES", "build"],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(f"tfcourse.{_MODULE_OF[name]}"), name)
        globals()[name] = value  # found directly next time
        return value
    raise AttributeError(f"module 'tfcourse' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
