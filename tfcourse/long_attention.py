"""Chapter 10: approximate attention for long sequences, three of the answers to its n^2 cost.

- Local (sliding-window) attention (Longformer, Beltagy et al. 2020; Mistral): query i
  attends only the keys j with |i - j| <= w,

      LocalAttention(Q, K, V)_i = softmax_{|i-j| <= w}(q_i k_j^T / sqrt(d_k)) V

  `local_attention` computes only that band: memory and time grow as n w, not n^2.
- A sparse pattern, strided (Sparse Transformer, Child et al. 2019): the local window and
  every `stride`-th key before (and after) the query, |i - j| % stride == 0. As a mask it
  changes what attention can see, not what it costs; two layers reach every key.
- Low rank (Linformer, Wang et al. 2020): the n keys and values are projected along the
  sequence to r << n rows, E K and E V with E (r, n), and

      LowRank(Q, K, V) = softmax(Q (E K)^T / sqrt(d_k)) (E V)       scores (n, r), not (n, n).

Masks are bool, True = may attend, as everywhere in tfcourse.
"""

import math

import torch
import torch.nn.functional as F

from tfcourse._validate import integer


def _positions(size, device):
    i = torch.arange(integer("size", size), device=device, dtype=torch.int32)
    return i[:, None] - i[None, :]  # (size, size): query i minus key j (4 bytes each, not 8)


def sliding_window_mask(size: int, window: int, causal: bool = False,
                        device: torch.device | None = None) -> torch.Tensor:
    """(size, size) bool: query i may attend key j when |i - j| <= window (w keys each side
    and itself), and, if causal, j <= i (itself and the w keys before it)."""
    window = integer("window", window, minimum=0)
    offset = _positions(size, device)  # (size, size)
    allowed = offset.abs() <= window
    return allowed & (offset >= 0) if causal else allowed


def strided_mask(size: int, window: int, stride: int, causal: bool = False,
                 device: torch.device | None = None) -> torch.Tensor:
    """(size, size) bool: the sliding window of `window` keys each side, plus every key a
    multiple of `stride` away, (i - j) % stride == 0 (Sparse Transformer's strided pattern);
    if causal, keys j <= i only."""
    stride = integer("stride", stride)
    offset = _positions(size, device)
    allowed = sliding_window_mask(size, window, device=device) | (offset % stride == 0)
    return allowed & (offset >= 0) if causal else allowed


def local_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, window: int,
                    causal: bool = False) -> torch.Tensor:
    """Self-attention within a sliding window (module docstring), computed band by band:
    equal to scaled_dot_product_attention(q, k, v, sliding_window_mask(n, window, causal)),
    without the n x n scores.

    The queries are cut into chunks of c = window + 1 positions; chunk b needs the keys from
    b c - w to b c + c - 1 + w (to b c + c - 1 if causal), c + 2w (c + w) of them, read as
    overlapping windows of the keys padded with w zeros on each side. Scores (n / c, c,
    c + 2w): about 3 n w numbers instead of n^2.

    query, key: (..., n, d_k), value (..., n, d_v): the same n (self-attention); no other mask.
    Returns (..., n, d_v).
    """
    window = integer("window", window, minimum=0)
    if query.dim() < 2 or key.shape[-2:] != query.shape[-2:] or value.shape[-2] != query.shape[-2]:
        raise ValueError(f"local_attention is self-attention: query and key (..., n, d_k), value "
                         f"(..., n, d_v) with the same n, got query {tuple(query.shape)}, key "
                         f"{tuple(key.shape)}, value {tuple(value.shape)}")
    n = query.size(-2)
    chunk = window + 1
    after = 0 if causal else window  # keys a chunk reads past its last query
    span = chunk + window + after  # keys a chunk reads
    n_chunks = -(-n // chunk)
    pad_end = n_chunks * chunk - n  # the last chunk may be short
    q = F.pad(query, (0, 0, 0, pad_end))  # (..., n_chunks * chunk, d_k)
    q = q.unflatten(-2, (n_chunks, chunk))  # (..., n_chunks, chunk, d_k)

    def windows(x):  # (..., n, d) -> (..., n_chunks, span, d), overlapping views
        x = F.pad(x, (0, 0, window, pad_end + after))
        return x.unfold(-2, span, chunk).transpose(-2, -1)

    k, v = windows(key), windows(value)
    scores = q @ k.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., n_chunks, chunk, span)
    a = torch.arange(chunk, device=query.device)[:, None]  # query's place in its chunk
    t = torch.arange(span, device=query.device)[None, :]  # key's place in the chunk's span
    offset = a + window - t  # query position minus key position, the same in every chunk
    allowed = (offset.abs() <= window) & (offset >= 0 if causal else True)  # (chunk, span)
    key_pos = torch.arange(n_chunks, device=query.device)[:, None, None] * chunk - window + t
    allowed = allowed & (key_pos >= 0) & (key_pos < n)  # (n_chunks, chunk, span): no padding
    weights = torch.softmax(scores.masked_fill_(~allowed, -math.inf), dim=-1)
    out = weights @ v  # (..., n_chunks, chunk, d_v)
    return out.flatten(-3, -2)[..., :n, :]


def segment_means(n: int, rank: int) -> torch.Tensor:
    """A fixed projection E (rank, n) for low_rank_attention: row r averages the r-th of
    `rank` consecutive segments of the sequence (Linformer learns E; this one is not trained)."""
    n, rank = integer("n", n), integer("rank", rank)
    if rank > n:
        raise ValueError(f"rank must be at most n={n}, got {rank}")
    segment = torch.arange(n) * rank // n  # (n,): the segment of each position
    e = F.one_hot(segment, rank).T.float()  # (rank, n)
    return e / e.sum(dim=1, keepdim=True)


def low_rank_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       projection: torch.Tensor) -> torch.Tensor:
    """Linformer's attention: softmax(Q (E K)^T / sqrt(d_k)) (E V), E = `projection`
    (rank, k_len) shared by keys and values. Scores (..., q_len, rank): memory and time
    linear in the sequence. Not causal: each projected row mixes keys of every position.

    query (..., q_len, d_k), key (..., k_len, d_k), value (..., k_len, d_v). Returns
    (..., q_len, d_v)."""
    if projection.dim() != 2 or projection.size(1) != key.size(-2):
        raise ValueError(f"projection must be (rank, k_len={key.size(-2)}), got "
                         f"{tuple(projection.shape)}")
    e = projection.to(key.dtype)
    k, v = e @ key, e @ value  # (..., rank, d_k), (..., rank, d_v)
    scores = query @ k.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., q_len, rank)
    return torch.softmax(scores, dim=-1) @ v
