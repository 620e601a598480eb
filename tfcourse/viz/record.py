"""What a model computes inside, read with forward hooks: every attention module's weights and
every feed-forward network's hidden activations.

The hooks find the modules by what they are, not by which class made them, so they work on
the reference classes and on a learner's own (exercises 02, 04, 05, 06) alike:

- attention: a module whose class is called ``MultiHeadAttention`` and whose forward takes
  ``(query, key, value, mask=None, need_weights=False)`` and returns ``(output, weights)``;
- feed-forward: a module with children ``linear1`` and ``linear2`` (``nn.Linear``): the
  hidden activations are what ``linear2`` receives, activation(linear1(x)).

    with record(model) as rec:
        model(src, tgt, src_mask, tgt_mask)
    rec.attention[0].weights   # (batch, heads, q_len, k_len), the first attention call
    rec.ffn[0].hidden          # (batch, seq, d_ff), the first feed-forward call
"""

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class AttentionCall:
    """One call of an attention module.

    name: the module's name in the model (e.g. "decoder.layers.1.cross_attn").
    kind: "self" (query is key), "masked self" (self, and no query may see a later key),
          or "cross" (keys and values from elsewhere, e.g. the encoder's memory).
    weights: (batch, heads, q_len, k_len), each row sums to 1 (or is 0 where all is masked).
    mask: bool (batch, heads, q_len, k_len), True = may attend; None if the call had none.
    """

    name: str
    kind: str
    weights: torch.Tensor
    mask: torch.Tensor | None


@dataclass
class FFNCall:
    """One call of a position-wise feed-forward network, FFN(x) = W_2 act(W_1 x + b_1) + b_2.

    input:    (batch, seq, d_model)  x, what the FFN reads
    hidden:   (batch, seq, d_ff)     act(W_1 x + b_1), after the ReLU/GELU
    output:   (batch, seq, d_model)  FFN(x), the update added to the residual stream
    residual: (batch, seq, d_model)  the residual stream the update is added to: x itself
              with post-norm; with pre-norm, the stream before the LayerNorm that made x
    """

    name: str
    input: torch.Tensor
    hidden: torch.Tensor
    output: torch.Tensor
    residual: torch.Tensor


class Recording:
    """The calls seen while recording, in the order they happened."""

    def __init__(self):
        self.attention: list[AttentionCall] = []
        self.ffn: list[FFNCall] = []


def is_attention(module):
    return type(module).__name__ == "MultiHeadAttention"


def is_feed_forward(module):
    return isinstance(getattr(module, "linear1", None), nn.Linear) and isinstance(
        getattr(module, "linear2", None), nn.Linear
    )


@contextmanager
def record(model):
    """Record every attention and feed-forward call of `model` (any nn.Module that contains
    them, or one of them) inside the `with` block. The model runs in eval mode (no dropout:
    the weights shown are the ones that make the output) and without gradients; its modules'
    training flags are restored afterwards and the hooks removed."""
    rec = Recording()
    names = {module: name or type(module).__name__ for name, module in model.named_modules()}
    attention = [m for m in names if is_attention(m)]
    ffns = [m for m in names if is_feed_forward(m)]
    if not attention and not ffns:
        raise ValueError(
            f"{type(model).__name__} contains no MultiHeadAttention and no feed-forward "
            "module (children linear1 and linear2): nothing to record"
        )
    pre_norm = any(getattr(m, "norm_first", False) for m in names) or getattr(
        getattr(model, "config", None), "norm_first", False
    )
    pending = {}  # attention module -> (kind, mask, caller wanted the weights)
    hidden = {}  # feed-forward module -> its linear2's input
    norm_io = []  # (output, input) of every normalization call, to find a pre-norm residual

    def attention_pre(module, args, kwargs):
        query = args[0] if args else kwargs["query"]
        key = args[1] if len(args) > 1 else kwargs["key"]
        mask = args[3] if len(args) > 3 else kwargs.get("mask")
        wanted = args[4] if len(args) > 4 else kwargs.get("need_weights", False)
        if len(args) > 4:
            args = (*args[:4], True, *args[5:])
        else:
            kwargs = {**kwargs, "need_weights": True}
        pending[module] = (query is key, mask, wanted)
        return args, kwargs

    def attention_post(module, args, kwargs, output):
        is_self, mask, wanted = pending.pop(module)
        out, weights = output
        if not isinstance(weights, torch.Tensor) or weights.dim() != 4:
            raise TypeError(
                f"{names[module]} returned weights {_describe(weights)} with need_weights=True; "
                "expected a tensor (batch, heads, q_len, k_len)"
            )
        if mask is not None:
            mask = mask.to(torch.bool).expand(weights.shape)
        kind = "cross" if not is_self else "masked self" if _is_causal(mask) else "self"
        rec.attention.append(AttentionCall(names[module], kind, weights.detach(), mask))
        return out, (weights if wanted else None)

    def linear2_pre(ffn):
        def hook(module, args):
            hidden[ffn] = args[0].detach()
        return hook

    def ffn_post(module, args, output):
        x = args[0]
        residual = x
        if pre_norm:
            residual = next((i for o, i in reversed(norm_io) if o is x), x)
        rec.ffn.append(FFNCall(names[module], x.detach(), hidden.pop(module), output.detach(),
                               residual.detach()))

    def norm_post(module, args, output):
        norm_io.append((output, args[0]))

    hooks = []
    for m in attention:
        hooks.append(m.register_forward_pre_hook(attention_pre, with_kwargs=True))
        hooks.append(m.register_forward_hook(attention_post, with_kwargs=True))
    for m in ffns:
        hooks.append(m.linear2.register_forward_pre_hook(linear2_pre(m)))
        hooks.append(m.register_forward_hook(ffn_post))
    for m in names:
        if "Norm" in type(m).__name__:
            hooks.append(m.register_forward_hook(norm_post))
    training = {m: m.training for m in names}
    model.eval()
    try:
        with torch.no_grad():
            yield rec
    finally:
        for hook in hooks:
            hook.remove()
        for m, flag in training.items():
            m.training = flag


def _is_causal(mask):
    """True when no query may see a later key (every pair above the diagonal is masked)."""
    if mask is None or mask.size(-1) != mask.size(-2) or mask.size(-1) < 2:
        return False
    return not mask.triu(diagonal=1).any().item()


def _describe(x):
    return f"of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else f"= {x!r}"
