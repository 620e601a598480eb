"""Chapter 12: Llama's block, chapter 09's decoder-only model with four parts changed.
Its kin differ in details: Mistral 7B adds sliding-window attention (chapter 10); Qwen (1 to
2.5) has biases on the q, k and v projections; Gemma (1) uses GeGLU (tanh GELU) for SwiGLU,
multiplies the token vectors by sqrt(d), scales its RMSNorm by (1 + w), and has heads 256
wide whatever d / heads (LlamaConfig's head_dim holds that one).

    x = Embed(tokens)                                  no positions added, no sqrt(d) scale
    x = x + Attention(RMSNorm(x))                      grouped-query (chapter 10), no biases,
                                                       rotary positions on q and k
    x = x + SwiGLU(RMSNorm(x))                         (SiLU(x W_gate) * x W_up) W_down
    logits = RMSNorm(x) W_out                          W_out = E (tied) or its own

Each part lives beside its kin: RMSNorm in normalization.py, SwiGLU in feed_forward.py,
RoPE in positional.py, grouped-query attention in grouped_query.py. The model is DecoderLM
(its causal mask, its cache, its forward pass) with these parts: a kind of its own ("llama"),
registered for checkpoints, trained by the same loop (recipe "lm-llama").
"""

from dataclasses import MISSING, dataclass
from typing import Any, Literal

from torch import nn

from tfcourse.config import Activation, BlockConfig, check_pad_id, default, set_field, setting
from tfcourse.encoder import Embeddings
from tfcourse.feed_forward import SwiGLU
from tfcourse.grouped_query import GroupedQueryAttention
from tfcourse.model import check_config, check_even, init_weights
from tfcourse.multi_head import LayerCache
from tfcourse.normalization import RMSNorm, SublayerConnection
from tfcourse.positional import LearnedPositionalEncoding, PositionalEncoding, RotaryEmbedding
from tfcourse.variants import DecoderLM
from tfcourse.vocab import PAD

Positions = Literal["rotary", "learned", "sinusoidal"]


@dataclass(frozen=True)
class LlamaConfig(BlockConfig):
    """The Llama-style language model: its block (defaults: Llama 3 8B's, Meta 2024: pre-norm
    with RMSNorm, SwiGLU, no dropout, 8 key/value heads for 32 query heads, RoPE with base
    500,000), vocabulary, positions and tying."""

    d_model: int = default("d_model", 4096)
    n_heads: int = default("n_heads", 32)
    d_ff: int = default("d_ff", 14336)
    n_layers: int = default("n_layers", 32)
    dropout: float = default("dropout", 0.0)
    norm_first: bool = default("norm_first", True)
    activation: Activation = default("activation", "silu")
    vocab_size: int = setting(MISSING, "tokens of the vocabulary", "[1, inf)")
    n_kv_heads: int = setting(8, "key/value heads, shared by n_heads / n_kv_heads query heads "
                              "each (grouped-query attention)", "[1, inf)")
    head_dim: int = setting(0, "width of each attention head; 0: d_model / n_heads (Gemma's "
                            "are 256 wide whatever d_model)", "[0, inf)")
    max_len: int = setting(8192, "positions the model has (the longest text it reads)",
                           "[1, inf)")
    positions: Positions = setting("rotary", "rotary positions inside attention (Llama's), or "
                                   "learned or sinusoidal ones added to the input")
    rope_base: float = setting(500000.0, "RoPE's base: pair i turns by base^(-2i/d_head) per "
                               "position (Llama 2: 10000, Llama 3: 500000)", "(1, inf)")
    norm_eps: float = setting(1e-5, "RMSNorm's epsilon", "(0, inf)")
    tie_output: bool = setting(False, "output layer weight = the embedding weight")
    pad_id: int = setting(PAD, "the padding id", "[0, inf)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.head_dim == 0:  # the default, as transformers'; checkpoints saved before it too
            set_field(self, "head_dim", self.d_model // self.n_heads)
        if not self.norm_first:
            raise ValueError("norm_first must be True: the Llama block is pre-norm")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by "
                             f"n_kv_heads={self.n_kv_heads}")
        if self.positions == "rotary" and self.head_dim % 2:
            raise ValueError(f"head_dim = {self.head_dim} must be even (RoPE rotates the "
                             "features of a head in pairs)")
        if self.positions == "sinusoidal":
            check_even(self.d_model)
        check_pad_id(self, self.vocab_size)

    @classmethod
    def llama3_8b(cls, vocab_size: int = 128256, **overrides: Any) -> "LlamaConfig":
        """Llama 3 8B: 32 layers, d_model 4096, 32 query heads, 8 key/value heads, d_ff 14336,
        RoPE base 500,000, 8192 positions, 128,256 tokens, untied output."""
        return cls(vocab_size, **overrides)

    @classmethod
    def tiny(cls, vocab_size: int, **overrides: Any) -> "LlamaConfig":
        """A model that trains in seconds on a CPU (d_ff: swiglu_width(64, 16))."""
        tiny = dict(d_model=64, n_heads=4, n_kv_heads=2, d_ff=176, n_layers=2, max_len=256,
                    rope_base=10000.0, tie_output=True)
        return cls(vocab_size, **{**tiny, **overrides})


class LlamaLayer(nn.Module):
    """Llama's block: x + Attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)). x (batch, seq,
    d_model); mask bool, True = may attend; cache None or the layer's LayerCache (x: the new
    positions only, rotated at positions len(cache), len(cache) + 1, ...)."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        c = config
        rotary = RotaryEmbedding(c.head_dim, c.rope_base) if c.positions == "rotary" else None
        self.self_attn = GroupedQueryAttention(c.d_model, c.n_heads, c.n_kv_heads, bias=False,
                                               rotary=rotary, attn_impl=c.attn_impl,
                                               d_head=c.head_dim)
        self.feed_forward = SwiGLU(c.d_model, c.d_ff, c.dropout, c.activation)
        self.sublayers = nn.ModuleList(
            SublayerConnection(c.d_model, c.dropout, norm_first=True,
                               norm=RMSNorm(c.d_model, c.norm_eps)) for _ in range(2))

    def forward(self, x, mask=None, cache: LayerCache | None = None):
        kv = cache.self_attn if cache is not None else None
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask, cache=kv))
        return self.sublayers[1](x, self.feed_forward)  # (batch, seq, d_model)


class LlamaLM(DecoderLM):
    """A Llama-style language model: DecoderLM's forward pass (causal mask, optional extra
    mask such as left padding, KV cache: forward(tokens, mask=None, cache=None)), with
    Llama's parts. Equal to transformers.LlamaForCausalLM with the same weights
    (tfcourse.parity.llama_from_transformers; transformers' padded batch included: a
    forward call without position_ids puts the tokens at 0, 1, ... whatever the padding,
    generate() passes position_ids counted from the first real token; RoPE does not mind
    either, since only offsets count).

    Weights: the embedding N(0, 1/d_model) (a tied output starts with small logits; looked
    up as it is with RoPE, as Llama's, which multiplies nothing in: Meta did not publish
    its table's starting scale, PyTorch's torchtitan starts it at std 1, transformers at
    0.02; scaled by sqrt(d_model) with added positions, which need the token vectors at
    their scale), every linear map Xavier-uniform (tfcourse.model.init_weights), the RMSNorm
    gains 1.
    """

    kind = "llama"
    config_class = LlamaConfig

    def __init__(self, config: LlamaConfig):
        nn.Module.__init__(self)  # DecoderLM's forward, not its parts
        check_config(type(self), config)
        c = self.config = config
        added = {"learned": LearnedPositionalEncoding, "sinusoidal": PositionalEncoding}
        # Positions added to the input need the token vectors at their scale (chapter 03).
        self.embed = Embeddings(c.vocab_size, c.d_model, scaled=c.positions in added)
        self.positional = (added[c.positions](c.d_model, c.max_len, c.dropout)
                           if c.positions in added else None)
        self.layers = nn.ModuleList(LlamaLayer(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.d_model, c.norm_eps)
        self.generator = nn.Linear(c.d_model, c.vocab_size, bias=False)
        init_weights(self)
        if c.tie_output:  # after the init, so that both names hold the same tensor
            self.generator.weight = self.embed.embedding.weight
