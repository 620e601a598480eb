"""Chapter 06: the whole Transformer (paper, figure 1).

    memory = Encoder(PE(Embed(src)))
    logits = Linear(Decoder(PE(Embed(tgt)), memory))     (softmax is left to the loss)
"""

import functools
from dataclasses import MISSING, dataclass
from typing import Any

import torch
from torch import nn

from tfcourse.batches import check_tokens
from tfcourse.config import BlockConfig, check_pad_id, setting
from tfcourse.decoder import Decoder
from tfcourse.device import check_fits
from tfcourse.encoder import Embeddings, Encoder
from tfcourse.multi_head import Cache
from tfcourse.positional import PositionalEncoding
from tfcourse.vocab import VOCAB_SIZES


@dataclass(frozen=True)
class TransformerConfig(BlockConfig):
    """The encoder-decoder: its block (BlockConfig: the paper's base by default), its two
    vocabularies and the weights they may share."""

    src_vocab_size: int = setting(MISSING, "tokens of the source vocabulary", "[1, inf)")
    tgt_vocab_size: int = setting(MISSING, "tokens of the target vocabulary", "[1, inf)")
    max_len: int = setting(5000, "positions the model has", "[1, inf)")
    share_embeddings: bool = setting(False, "one embedding table for source and target")
    tie_output: bool = setting(False, "output layer weight = the (target) embedding weight")
    pad_id: int = setting(0, "the padding id", "[0, inf)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_even(self.d_model)
        check_pad_id(self, self.src_vocab_size, self.tgt_vocab_size)
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "share_embeddings=True needs one vocabulary, got "
                f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}"
            )

    @classmethod
    def base(cls, vocab_size: int = 37000, **overrides: Any) -> "TransformerConfig":
        """The paper's base model (Table 3), shared source-target vocabulary, tied weights."""
        return cls(**{**_paper(vocab_size), **overrides})

    @classmethod
    def big(cls, vocab_size: int = 37000, **overrides: Any) -> "TransformerConfig":
        """The paper's big model (Table 3; dropout 0.3 as for EN-DE)."""
        big = dict(d_model=1024, n_heads=16, d_ff=4096, dropout=0.3)
        return cls(**{**_paper(vocab_size), **big, **overrides})

    @classmethod
    def tiny(cls, vocab_size: int, **overrides: Any) -> "TransformerConfig":
        """A model that trains in seconds on a CPU (toy tasks, tests)."""
        tiny = dict(d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=512)
        return cls(**{**_paper(vocab_size), **tiny, **overrides})


def _paper(vocab_size: int) -> dict[str, Any]:
    return dict(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        share_embeddings=True,
        tie_output=True,
    )


def check_even(d_model: int) -> None:
    """The sinusoidal encoding pairs sin and cos: d_model must be even."""
    if d_model % 2:
        raise ValueError(f"d_model={d_model} must be even: the positional encoding's "
                         "sin/cos come in pairs")


# Xavier of the stack [W^Q; W^K; W^V] (3 d_model x d_model), as nn.MultiheadAttention initializes
# its in_proj_weight (and fairseq its q/k/v projections): gain 1/sqrt(2) on each d_model x d_model
# part. The copy task then needs about 5% fewer steps (248 against 260, mean of 40 seeds).
_QKV = ("w_q", "w_k", "w_v")
_QKV_GAIN = 0.5**0.5


def check_config(cls: type, config: Any) -> None:
    """What every model kind checks first in its __init__: ``config`` is a
    ``cls.config_class`` (TypeError naming it otherwise: a dict, another kind's config), and
    the model fits in the free memory of the device it is built on (ValueError naming its
    sizes and the memory it needs, before anything is allocated; counted on the meta device,
    its fixed tables, e.g. the positional encoding, included)."""
    if not isinstance(config, cls.config_class):
        raise TypeError(f"config must be a {cls.config_class.__name__}, got "
                        f"{type(config).__name__}")
    device = torch.get_default_device()
    if device.type == "meta":
        return
    try:
        numbers = _numbers(cls, config)
    except TypeError:  # a config that is not frozen (unhashable): counted each time
        numbers = _numbers.__wrapped__(cls, config)
    sizes = ", ".join(f"{name}={getattr(config, name):,}" for name in (
        "d_model", "d_ff", "n_layers", "max_len", *VOCAB_SIZES)
        if isinstance(getattr(config, name, None), int))
    check_fits(4 * numbers, f"a {cls.__name__} with {sizes} ({numbers:,} numbers)", device,
               "choose smaller sizes")


@functools.lru_cache(maxsize=64)
def _numbers(cls: type, config: Any) -> int:
    """The numbers (parameters and buffers) of cls(config), counted on the meta device: no
    memory (configs are frozen, so a config seen before is not built again)."""
    with torch.device("meta"):
        shape = cls(config)
    return sum(t.numel() for t in (*shape.parameters(), *shape.buffers()))


def init_weights(model: nn.Module) -> None:
    """Every model kind's initialization: each linear map's weight Xavier-uniform (W^Q, W^K,
    W^V each as a third of one stacked matrix), in the order of the model's modules. The
    embedding tables keep Embeddings' N(0, 1/d_model) (so a tied output layer starts with
    small logits), learned positions nn.Embedding's N(0, 1), biases and LayerNorms theirs.
    Tie the output layer after this, so that both names hold the embedding's tensor."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            qkv = name.rsplit(".", 1)[-1] in _QKV
            nn.init.xavier_uniform_(module.weight, gain=_QKV_GAIN if qkv else 1.0)


class Transformer(nn.Module):
    """Encoder-decoder Transformer. forward(src, tgt, ...) gives logits
    (batch, tgt_len, tgt_vocab_size): apply log_softmax / cross_entropy outside.

    Weights: the embedding tables as Embeddings makes them, N(0, 1/d_model) (with tie_output
    the output layer is the target table); every other matrix Xavier-uniform."""

    kind = "seq2seq"  # what checkpoints record (tfcourse.checkpoint)
    config_class = TransformerConfig

    def __init__(self, config: TransformerConfig):
        super().__init__()
        check_config(type(self), config)
        c = self.config = config
        self.src_embed = Embeddings(c.src_vocab_size, c.d_model)
        self.tgt_embed = (
            self.src_embed if c.share_embeddings else Embeddings(c.tgt_vocab_size, c.d_model)
        )
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.encoder = Encoder.from_config(c)
        self.decoder = Decoder.from_config(c)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        init_weights(self)
        if c.tie_output:  # after the init, so that both names hold the same tensor
            self.generator.weight = self.tgt_embed.embedding.weight

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        """src ids (batch, src_len), src_mask e.g. padding_mask(src) -> (batch, src_len, d_model)"""
        check_tokens(src, "src")
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None,
               tgt_mask: torch.Tensor | None, cache: Cache | None = None) -> torch.Tensor:
        """tgt ids (batch, tgt_len), tgt_mask e.g. target_mask(tgt) -> (batch, tgt_len, d_model)

        With a cache (from init_cache()), tgt holds only the new tokens: they take positions
        len(cache), len(cache) + 1, ... and attend to the cached ones; tgt_mask may be None."""
        start = len(cache) if cache is not None else 0
        x = self.positional(self.tgt_embed(tgt), start=start)
        return self.decoder(x, memory, src_mask, tgt_mask, cache=cache)

    def init_cache(self) -> Cache:
        """An empty key/value cache for incremental decoding (tfcourse.decoding)."""
        return Cache(len(self.decoder.layers), cross=True)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None,
                tgt_mask: torch.Tensor | None) -> torch.Tensor:
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(tgt, memory, src_mask, tgt_mask))  # logits


def count_parameters(model: nn.Module) -> dict[str, int]:
    """Parameters of a Transformer by part, and the total. A shared tensor (shared embeddings,
    tied output) counts once, in the first part that holds it: the embeddings."""
    parts = {"src_embed": "embeddings", "tgt_embed": "embeddings", "positional": "embeddings"}
    counts = dict.fromkeys(("embeddings", "encoder", "decoder", "generator"), 0)
    for name, p in model.named_parameters():  # yields a shared tensor once
        part = name.split(".")[0]
        counts[parts.get(part, part)] += p.numel()
    counts["total"] = sum(counts.values())
    return counts
