"""Losses (chapters 07 and 09): cross entropy against label-smoothed targets, and the
language model's next-token loss.

    q = (1 - eps) * one_hot(y) + eps / V       (label smoothing, paper section 5.4, eps = 0.1)
    loss = H(q, p) = -sum_v q_v log p_v, averaged over the targets that count
"""

import torch
import torch.nn.functional as F

from tfcourse.vocab import PAD


def smoothed_targets(target: torch.Tensor, n_classes: int, eps: float,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The distribution the model is trained towards, (..., n_classes):
    q = (1 - eps) * one_hot(target) + eps / n_classes. Each row sums to 1."""
    q = torch.full((*target.shape, n_classes), eps / n_classes, dtype=dtype, device=target.device)
    return q.scatter_add_(-1, target.unsqueeze(-1), torch.full_like(q[..., :1], 1.0 - eps))


def label_smoothing_loss(logits: torch.Tensor, target: torch.Tensor, eps: float = 0.1,
                         pad_id: int | None = PAD) -> torch.Tensor:
    """Cross entropy H(q, p) between the smoothed targets q and the model's p = softmax(logits),
    averaged over the target positions that are not padding. The same value as
    F.cross_entropy(logits.flatten(0, -2), target.flatten(), label_smoothing=eps,
    ignore_index=pad_id).

    logits (..., V) float, target (...) ids; pad_id=None: every target counts (class labels).
    """
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits (..., V) and target (...) must agree: got logits "
                         f"{tuple(logits.shape)} and target {tuple(target.shape)}")
    # float32 at least, also under mixed precision
    log_p = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    q = smoothed_targets(target, logits.size(-1), eps, log_p.dtype)  # (..., V)
    loss = -(q * log_p).sum(-1)  # (...)
    if pad_id is None:
        return loss.mean()
    return loss[target != pad_id].mean()


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor, pad_id: int = PAD) -> torch.Tensor:
    """The next-token loss of a language model, as tfcourse trains its own: the logits at
    position t predict token t + 1 (targets[:, t] = tokens[:, t + 1], as batches.LMBatch
    makes them), without label smoothing, averaged over the targets that are not padding:

        L = -1/|T| sum_{(b, t) in T} log softmax(logits[b, t])[tokens[b, t + 1]],
        T = {(b, t) : t < seq - 1, tokens[b, t + 1] != pad_id}

    logits (batch, seq, V) float, tokens (batch, seq) ids; returns a scalar.
    """
    return label_smoothing_loss(logits[:, :-1], tokens[:, 1:], 0.0, pad_id)  # (batch, seq - 1, V)
