"""Parity with torch.nn: the weight mapping between tfcourse's modules and PyTorch's, both
ways, and PyTorch's modules run on their plain path, so that the two compute the same thing.

    tfcourse                               torch.nn
    w_q, w_k, w_v  (three d x d Linear)    in_proj_weight, in_proj_bias  ([W^Q; W^K; W^V])
    w_o                                    out_proj
    cross_attn                             multihead_attn
    feed_forward.linear1, .linear2         linear1, linear2
    sublayers.{0,1,2}.norm                 norm1, norm2, norm3
    norm (the stack's final LayerNorm)     norm

It applies at every level: MultiHeadAttention <-> nn.MultiheadAttention, EncoderLayer <->
nn.TransformerEncoderLayer, Encoder <-> nn.TransformerEncoder, and the same for the decoder.

Chapter 12: llama_from_transformers(model) maps transformers' LlamaForCausalLM onto
tfcourse.modern.LlamaLM (q_proj -> w_q, mlp.gate_proj -> feed_forward.gate,
input_layernorm -> sublayers.0.norm, lm_head -> generator, ...); transformers itself is
never imported here.
"""

import re

import torch
from torch import nn

# torch.nn name -> tfcourse name, applied in order to every state_dict key, and back.
_TO_OURS = (
    (r"\bnorm([123])\b", lambda m: f"sublayers.{int(m[1]) - 1}.norm"),
    (r"\b(linear[12])\b", r"feed_forward.\1"),
    (r"\bmultihead_attn\b", "cross_attn"),
    (r"\bout_proj\b", "w_o"),
)
_TO_TORCH = (
    (r"\bsublayers\.([012])\.norm\b", lambda m: f"norm{int(m[1]) + 1}"),
    (r"\bfeed_forward\.(linear[12])\b", r"\1"),
    (r"\bcross_attn\b", "multihead_attn"),
    (r"\bw_o\b", "out_proj"),
)


def _rename(name, rules):
    for pattern, replacement in rules:
        name = re.sub(pattern, replacement, name)
    return name


def from_torch_state_dict(state):
    """A torch.nn state_dict -> the same tensors under tfcourse's names.
    in_proj_{weight,bias} = [W^Q; W^K; W^V] is cut into w_q, w_k, w_v."""
    ours = {}
    for name, tensor in state.items():
        name = _rename(name, _TO_OURS)
        if "in_proj_" in name:
            for role, chunk in zip("qkv", tensor.chunk(3), strict=True):
                ours[name.replace("in_proj_", f"w_{role}.")] = chunk
        else:
            ours[name] = tensor
    return ours


def to_torch_state_dict(state):
    """A tfcourse state_dict -> the same tensors under torch.nn's names: the inverse of
    from_torch_state_dict (w_q, w_k, w_v stacked into in_proj_{weight,bias})."""
    theirs, stacks = {}, {}
    for name, tensor in state.items():
        match = re.fullmatch(r"(.*)\bw_([qkv])\.(weight|bias)", name)
        if match:
            prefix, role, kind = match.groups()
            stacks.setdefault(f"{_rename(prefix, _TO_TORCH)}in_proj_{kind}", {})[role] = tensor
        else:
            theirs[_rename(name, _TO_TORCH)] = tensor
    for name, parts in stacks.items():
        theirs[name] = torch.cat([parts[role] for role in "qkv"])
    return theirs


def load_torch_weights(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy every tensor of the torch.nn module `theirs` into the tfcourse module `ours`,
    strictly: a tensor missing on either side is an error."""
    ours.load_state_dict(from_torch_state_dict(theirs.state_dict()))


def copy_weights_to_torch(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy every tensor of the tfcourse module `ours` into the torch.nn module `theirs`,
    strictly: the reverse of load_torch_weights."""
    theirs.load_state_dict(to_torch_state_dict(ours.state_dict()))


def run_torch(module, *args, **kwargs):
    """module(*args, **kwargs) with torch's MHA fastpath off. In eval mode without grad the
    fastpath fuses kernels, and TransformerEncoder with a padding mask returns zeros at
    padded positions; tfcourse is compared with the plain computation."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return module(*args, **kwargs)
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


# ---------------------------------------------------------------- chapter 12: Llama
# transformers' LlamaForCausalLM prefix and tfcourse.modern.LlamaLM's, {} a layer's index;
# renamed both ways (tfcourse.hf writes and reads the folder transformers saves with these).
_LLAMA_NAMES = (
    ("model.embed_tokens.", "embed.embedding."),
    ("model.norm.", "norm."),
    ("lm_head.", "generator."),
    *((f"model.layers.{{}}.self_attn.{p}_proj.", f"layers.{{}}.self_attn.w_{p}.") for p in "qkvo"),
    *((f"model.layers.{{}}.mlp.{p}_proj.", f"layers.{{}}.feed_forward.{p}.")
      for p in ("gate", "up", "down")),
    ("model.layers.{}.input_layernorm.", "layers.{}.sublayers.0.norm."),
    ("model.layers.{}.post_attention_layernorm.", "layers.{}.sublayers.1.norm."),
)


def _prefix_rules(pairs):
    """(source, target) prefixes -> _rename's rules: the layer's index carried across."""
    return tuple(("^" + re.escape(a).replace(r"\{\}", r"(\d+)"), b.replace("{}", r"\1"))
                 for a, b in pairs)


_FROM_LLAMA = _prefix_rules(_LLAMA_NAMES)
_TO_LLAMA = _prefix_rules((b, a) for a, b in _LLAMA_NAMES)


def llama_state_dict_to_transformers(state):
    """A LlamaLM state_dict -> the same tensors under LlamaForCausalLM's names (the inverse of
    the renaming llama_from_transformers does)."""
    return {_rename(name, _TO_LLAMA): tensor for name, tensor in state.items()}


def llama_config_from_transformers(c, **overrides):
    """The tfcourse.modern.LlamaConfig of a transformers LlamaConfig ``c``; ValueError in one
    line naming each setting LlamaLM does not have (biases, an activation other than SiLU,
    RoPE scaling, partial rotary)."""
    from tfcourse.modern import LlamaConfig

    rope = c.rope_parameters or {}
    differ = {"attention_bias": (c.attention_bias, False), "mlp_bias": (c.mlp_bias, False),
              "hidden_act": (c.hidden_act, "silu"),
              "rope_type": (rope.get("rope_type", "default"), "default"),
              "partial_rotary_factor": (rope.get("partial_rotary_factor", 1.0), 1.0)}
    unlike = [f"{name}={got!r} (LlamaLM: {want!r})" for name, (got, want) in differ.items()
              if got != want]
    if unlike:
        raise ValueError(f"LlamaLM has no equivalent of {', '.join(unlike)}")
    return LlamaConfig(
        vocab_size=c.vocab_size, d_model=c.hidden_size, n_heads=c.num_attention_heads,
        n_kv_heads=c.num_key_value_heads, head_dim=c.head_dim, d_ff=c.intermediate_size,
        n_layers=c.num_hidden_layers, max_len=c.max_position_embeddings,
        rope_base=float(rope["rope_theta"]), norm_eps=c.rms_norm_eps,
        tie_output=c.tie_word_embeddings,
        pad_id=c.pad_token_id if c.pad_token_id is not None else LlamaConfig.pad_id, **overrides)


def llama_config_to_transformers(config):
    """The keyword arguments of transformers.LlamaConfig for a tfcourse.modern.LlamaConfig
    (rotary positions only: learned or sinusoidal ones have no place in LlamaForCausalLM)."""
    if config.positions != "rotary":
        raise ValueError(f"positions={config.positions!r}: LlamaForCausalLM has rotary "
                         "positions only")
    c = config
    return dict(vocab_size=c.vocab_size, hidden_size=c.d_model, num_attention_heads=c.n_heads,
                num_key_value_heads=c.n_kv_heads, head_dim=c.head_dim,
                intermediate_size=c.d_ff, num_hidden_layers=c.n_layers, hidden_act=c.activation,
                max_position_embeddings=c.max_len, rms_norm_eps=c.norm_eps,
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_base},
                tie_word_embeddings=c.tie_output, attention_bias=False, mlp_bias=False,
                pad_token_id=c.pad_id)


def llama_from_transformers(theirs: nn.Module, **overrides):
    """A tfcourse.modern.LlamaLM with the config and the weights of ``theirs``, a
    transformers.LlamaForCausalLM (ValueError for a setting LlamaLM does not have:
    llama_config_from_transformers). ``overrides``: other values of LlamaConfig's own
    settings (attn_impl)."""
    from tfcourse.modern import LlamaLM

    ours = LlamaLM(llama_config_from_transformers(theirs.config, **overrides))
    ours.load_state_dict({_rename(name, _FROM_LLAMA): tensor
                          for name, tensor in theirs.state_dict().items()})
    return ours.to(theirs.dtype).eval()
