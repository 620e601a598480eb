"""Attention masks. Boolean, True means "may attend", broadcastable to
(batch, heads, q_len, k_len). (torch.nn.MultiheadAttention uses the opposite polarity.)
"""

import torch


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Keys that are real tokens, not padding: (batch, seq) -> (batch, 1, 1, seq)."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, seq), got {tuple(tokens.shape)}")
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Position i may attend to positions j <= i: (size, size), lower triangle and diagonal."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def target_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Decoder self-attention: causal and not padding. (batch, seq) -> (batch, 1, seq, seq)."""
    return padding_mask(tokens, pad_id) & causal_mask(tokens.size(1), device=tokens.device)
