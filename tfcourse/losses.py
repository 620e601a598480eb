"""Losses: the language model's next-token loss, lm_loss (chapter 09)."""

import torch

from .data import PAD
from .training import label_smoothing_loss


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor, pad_id: int = PAD) -> torch.Tensor:
    """The next-token loss of a language model, as tfcourse trains its own: the logits at
    position t predict token t + 1 (targets[:, t] = tokens[:, t + 1], as corpora.LMBatch
    makes them), without label smoothing, averaged over the targets that are not padding:

        L = -1/|T| sum_{(b, t) in T} log softmax(logits[b, t])[tokens[b, t + 1]],
        T = {(b, t) : t < seq - 1, tokens[b, t + 1] != pad_id}

    logits (batch, seq, V) float, tokens (batch, seq) ids; returns a scalar.
    """
    return label_smoothing_loss(logits[:, :-1], tokens[:, 1:], 0.0, pad_id)  # (batch, seq - 1, V)
