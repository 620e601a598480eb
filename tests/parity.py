"""Shared by the parity tests: copy torch.nn's Transformer weights into tfcourse modules,
and run torch.nn modules on their plain (non-fused) path."""

import re

import torch

# torch.nn name -> tfcourse name, applied in order to every state_dict key.
_RENAMES = (
    (r"\bnorm([123])\b", lambda m: f"sublayers.{int(m[1]) - 1}.norm"),
    (r"\b(linear[12])\b", r"feed_forward.\1"),
    (r"\bmultihead_attn\b", "cross_attn"),
    (r"\bout_proj\b", "w_o"),
)


def load_torch_weights(ours, theirs):
    """Copy every tensor of `theirs` (torch.nn.MultiheadAttention, TransformerEncoder[Layer],
    TransformerDecoder[Layer], or their stacks) into `ours`, strictly: a tensor missing on
    either side is an error. in_proj_{weight,bias} = [W^Q; W^K; W^V] -> w_q, w_k, w_v."""
    state = {}
    for name, tensor in theirs.state_dict().items():
        for pattern, replacement in _RENAMES:
            name = re.sub(pattern, replacement, name)
        if "in_proj_" in name:
            for role, chunk in zip("qkv", tensor.chunk(3), strict=True):
                state[name.replace("in_proj_", f"w_{role}.")] = chunk
        else:
            state[name] = tensor
    ours.load_state_dict(state)


def run_torch(module, *args, **kwargs):
    """module(*args, **kwargs) with torch's MHA fastpath off. In eval mode without grad the
    fastpath fuses kernels, and TransformerEncoder with a padding mask returns zeros at
    padded positions; we compare with the plain computation."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return module(*args, **kwargs)
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)
