"""Chapter 06: the whole Transformer (paper, figure 1).

    memory = Encoder(PE(Embed(src)))
    logits = Linear(Decoder(PE(Embed(tgt)), memory))     (softmax is left to the loss)
"""

from dataclasses import dataclass

from torch import nn

from tfcourse._validate import integer, probability
from tfcourse.decoder import Decoder, DecoderCache
from tfcourse.encoder import Embeddings, Encoder
from tfcourse.positional import PositionalEncoding


@dataclass
class TransformerConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_layers: int = 6  # in the encoder, and again in the decoder
    dropout: float = 0.1
    max_len: int = 5000
    norm_first: bool = False
    activation: str = "relu"
    share_embeddings: bool = False  # one embedding table for source and target
    tie_output: bool = False  # generator weight = target embedding weight
    pad_id: int = 0
    attn_impl: str = "explicit"  # or "sdpa": torch's fused attention (chapter 10)

    def __post_init__(self):
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff",
                     "n_layers", "max_len"):
            setattr(self, name, integer(name, getattr(self, name)))
        if self.d_model % self.n_heads != 0 or self.d_model % 2 != 0:
            raise ValueError(f"d_model={self.d_model} must be even (the positional encoding's "
                             f"sin/cos pairs) and divisible by n_heads={self.n_heads}")
        self.dropout = probability("dropout", self.dropout)
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {self.activation!r}")
        if not 0 <= integer("pad_id", self.pad_id, 0) < min(self.src_vocab_size,
                                                             self.tgt_vocab_size):
            raise ValueError(f"pad_id={self.pad_id} is not an id of both vocabularies")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "share_embeddings=True needs one vocabulary, got "
                f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}"
            )

    @classmethod
    def base(cls, vocab_size=37000, **overrides):
        """The paper's base model (Table 3), shared source-target vocabulary, tied weights."""
        return cls(**{**_paper(vocab_size), **overrides})

    @classmethod
    def big(cls, vocab_size=37000, **overrides):
        """The paper's big model (Table 3; dropout 0.3 as for EN-DE)."""
        big = dict(d_model=1024, n_heads=16, d_ff=4096, dropout=0.3)
        return cls(**{**_paper(vocab_size), **big, **overrides})

    @classmethod
    def tiny(cls, vocab_size, **overrides):
        """A model that trains in seconds on a CPU (toy tasks, tests)."""
        tiny = dict(d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=512)
        return cls(**{**_paper(vocab_size), **tiny, **overrides})


def _paper(vocab_size):
    return dict(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        share_embeddings=True,
        tie_output=True,
    )


# Xavier of the stack [W^Q; W^K; W^V] (3 d_model x d_model), as nn.MultiheadAttention initializes
# its in_proj_weight (and fairseq its q/k/v projections): gain 1/sqrt(2) on each d_model x d_model
# part. The copy task then needs about 5% fewer steps (248 against 260, mean of 40 seeds).
_QKV = ("w_q.weight", "w_k.weight", "w_v.weight")
_QKV_GAIN = 0.5**0.5


class Transformer(nn.Module):
    """Encoder-decoder Transformer. forward(src, tgt, ...) gives logits
    (batch, tgt_len, tgt_vocab_size): apply log_softmax / cross_entropy outside.

    Weights: the embedding tables as Embeddings makes them, N(0, 1/d_model) (with tie_output
    the output layer is the target table); every other matrix Xavier-uniform."""

    kind = "seq2seq"  # what checkpoints record (tfcourse.training)
    config_class = TransformerConfig

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.src_embed = Embeddings(c.src_vocab_size, c.d_model)
        self.tgt_embed = (
            self.src_embed if c.share_embeddings else Embeddings(c.tgt_vocab_size, c.d_model)
        )
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        stack = (c.d_model, c.n_heads, c.d_ff, c.n_layers, c.dropout, c.norm_first, c.activation,
                 c.attn_impl)
        self.encoder = Encoder(*stack)
        self.decoder = Decoder(*stack)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        for name, p in self.named_parameters():  # a shared tensor comes once
            if p.dim() > 1 and "_embed." not in name:  # Xavier; W^Q, W^K, W^V as one stack
                nn.init.xavier_uniform_(p, gain=_QKV_GAIN if name.endswith(_QKV) else 1.0)
        if c.tie_output:  # after the init, so that both names hold the same tensor
            self.generator.weight = self.tgt_embed.embedding.weight

    def encode(self, src, src_mask):
        """src ids (batch, src_len), src_mask e.g. padding_mask(src) -> (batch, src_len, d_model)"""
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask, tgt_mask, cache=None):
        """tgt ids (batch, tgt_len), tgt_mask e.g. target_mask(tgt) -> (batch, tgt_len, d_model)

        With a cache (from init_cache()), tgt holds only the new tokens: they take positions
        len(cache), len(cache) + 1, ... and attend to the cached ones; tgt_mask may be None."""
        start = len(cache) if cache is not None else 0
        x = self.positional(self.tgt_embed(tgt), start=start)
        return self.decoder(x, memory, src_mask, tgt_mask, cache=cache)

    def init_cache(self):
        """An empty key/value cache for incremental decoding (tfcourse.decoding)."""
        return DecoderCache(len(self.decoder.layers))

    def forward(self, src, tgt, src_mask, tgt_mask):
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(tgt, memory, src_mask, tgt_mask))  # logits


def count_parameters(model):
    """Parameters of a Transformer by part, and the total. A shared tensor (shared embeddings,
    tied output) counts once, in the first part that holds it: the embeddings."""
    parts = {"src_embed": "embeddings", "tgt_embed": "embeddings", "positional": "embeddings"}
    counts = dict.fromkeys(("embeddings", "encoder", "decoder", "generator"), 0)
    for name, p in model.named_parameters():  # yields a shared tensor once
        part = name.split(".")[0]
        counts[parts.get(part, part)] += p.numel()
    counts["total"] = sum(counts.values())
    return counts
