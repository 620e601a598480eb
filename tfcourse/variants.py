"""Chapter 09: the two halves of the Transformer, each a model of its own.

Encoder-only (BERT, Devlin et al. 2019): the chapter 05 encoder reads the whole text at once,
every position seeing every other; one vector per text feeds a classifier

    h = Encoder(PE(Embed([CLS] x_1 ... x_n)))       (batch, seq, d_model)
    logits = Linear(pool(h))                        pool: h at [CLS], or the mean over the text

and its pre-training objective, the masked language model, predicts hidden tokens from both
sides: logits = h E^T + b, with E the input embedding table (tied weights).

Decoder-only (GPT, Radford et al. 2018, 2019): the chapter 06 decoder without cross-attention
(there is no encoder to attend to), so each block is self-attention under a causal mask, then
the feed-forward network, exactly the encoder layer with a causal mask. Trained to predict
every next token, p(x_t+1 | x_1 ... x_t), from the logits h E^T (tied weights).

Each model has a ``config`` (a BlockConfig and the kind's own fields), a ``kind`` and its
``config_class``: a checkpoint that records (kind, asdict(config)) rebuilds it. Their
weights start as the encoder-decoder's (tfcourse.model.init_weights).
"""

from dataclasses import MISSING, dataclass
from typing import Any, Literal

import torch
from torch import nn

# BERT's masked-LM corruption is a batch's job (tfcourse.batches); chapter 09 presents it
# here with its models, and notebook 09 and exercise 09 read it from here.
from tfcourse.batches import check_tokens, mask_tokens  # noqa: F401
from tfcourse.config import Activation, BlockConfig, check_pad_id, default, setting
from tfcourse.encoder import Embeddings, Encoder, EncoderLayer
from tfcourse.model import check_config, check_even, init_weights
from tfcourse.multi_head import Cache, LayerCache
from tfcourse.normalization import LayerNorm
from tfcourse.positional import LearnedPositionalEncoding, PositionalEncoding
from tfcourse.vocab import PAD

_POSITIONAL = {"sinusoidal": PositionalEncoding, "learned": LearnedPositionalEncoding}
Positional = Literal["learned", "sinusoidal"]


def _check_config(config: Any) -> None:
    """What the two chapter 09 configs check beyond their fields' own intervals."""
    if config.positional == "sinusoidal":
        check_even(config.d_model)
    check_pad_id(config, config.vocab_size)


def _check_mask(mask: torch.Tensor | None, shape: tuple[int, int, int, int]) -> None:
    """A bool mask (True = may attend) broadcastable to shape = (batch, heads, seq, total)."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {got}")
    try:
        fits = mask.dim() <= 4 and torch.broadcast_shapes(mask.shape, shape)[-2:] == shape[-2:]
        fits = fits and torch.broadcast_shapes(mask.shape, shape)[0] == shape[0]
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"mask must be broadcastable to (batch, heads, seq, total) = "
                         f"({shape[0]}, heads, {shape[2]}, {shape[3]}), got {tuple(mask.shape)}")


# ------------------------------------------------------------------ encoder-only (BERT-style)


@dataclass(frozen=True)
class EncoderClassifierConfig(BlockConfig):
    """The encoder classifier: its block (defaults: BERT-base's, Devlin et al. 2019: post-norm
    as the paper, GELU), its vocabulary, classes, positions and pooling."""

    d_model: int = default("d_model", 768)
    n_heads: int = default("n_heads", 12)
    d_ff: int = default("d_ff", 3072)
    n_layers: int = default("n_layers", 12)
    activation: Activation = default("activation", "gelu")
    vocab_size: int = setting(MISSING, "tokens of the vocabulary", "[1, inf)")
    n_classes: int = setting(MISSING, "classes to choose from", "[2, inf)")
    max_len: int = setting(512, "positions the model has", "[1, inf)")
    positional: Positional = setting("learned", "learned positions (BERT's) or the paper's "
                                     "sinusoidal ones")
    pooling: Literal["cls", "mean"] = setting("cls", "one vector per text: the one at [CLS], "
                                              "or the mean over the text")
    pad_id: int = setting(PAD, "the padding id", "[0, inf)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_config(self)

    @classmethod
    def bert_base(cls, vocab_size: int = 30522, n_classes: int = 2,
                  **overrides: Any) -> "EncoderClassifierConfig":
        """BERT-base: 12 layers, d_model 768, 12 heads, d_ff 3072, 512 positions, WordPiece
        vocabulary of 30,522 tokens."""
        return cls(vocab_size, n_classes, **overrides)

    @classmethod
    def tiny(cls, vocab_size: int, n_classes: int, **overrides: Any) -> "EncoderClassifierConfig":
        """A model that trains in seconds on a CPU."""
        tiny = dict(d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=128)
        return cls(vocab_size, n_classes, **{**tiny, **overrides})


def mean_pool(h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The mean of h (batch, seq, d_model) over the positions where keep (batch, seq) is True,
    (batch, d_model): padding neither adds to the sum nor counts in the divisor."""
    keep = keep.to(h.dtype)[:, :, None]  # (batch, seq, 1)
    return (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)


class EncoderClassifier(nn.Module):
    """The chapter 05 encoder with two heads: a classifier of whole texts, and the masked
    language model (MLM) of BERT's pre-training, tied to the input embeddings.

    tokens (batch, seq) start with the [CLS] token (the data puts it there) when
    pooling="cls"; mask is padding_mask(tokens, pad_id), (batch, 1, 1, seq), made from
    config.pad_id when not given.
    forward(tokens, mask) -> class logits (batch, n_classes);
    forward(tokens, mask, mlm=True) -> token logits (batch, seq, vocab_size).
    """

    kind = "classifier"
    config_class = EncoderClassifierConfig

    def __init__(self, config: EncoderClassifierConfig):
        super().__init__()
        check_config(type(self), config)
        c = self.config = config
        self.embed = Embeddings(c.vocab_size, c.d_model)
        self.positional = _POSITIONAL[c.positional](c.d_model, c.max_len, c.dropout)
        self.encoder = Encoder.from_config(c)
        self.dropout = nn.Dropout(c.dropout)
        self.classifier = nn.Linear(c.d_model, c.n_classes)
        self.mlm_head = nn.Linear(c.d_model, c.vocab_size)
        init_weights(self)
        self.mlm_head.weight = self.embed.embedding.weight  # tied: logits = h E^T + b

    def encode(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids (batch, seq) -> (batch, seq, d_model), every position seeing all others."""
        mask = self._mask(tokens, mask)
        return self.encoder(self.positional(self.embed(tokens)), mask)

    def pool(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One vector per text, (batch, d_model): h at [CLS] (position 0), or the mean over
        the positions that are not padding."""
        if self.config.pooling == "cls":
            return h[:, 0]
        return mean_pool(h, mask[:, 0, 0, :])

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None, *,
                mlm: bool = False) -> torch.Tensor:
        mask = self._mask(tokens, mask)
        h = self.encode(tokens, mask)  # (batch, seq, d_model)
        if mlm:
            return self.mlm_head(h)  # (batch, seq, vocab_size)
        return self.classifier(self.dropout(self.pool(h, mask)))  # (batch, n_classes)

    def _mask(self, tokens, mask):
        check_tokens(tokens)
        if mask is None:
            return (tokens != self.config.pad_id)[:, None, None, :]
        want = (tokens.size(0), 1, 1, tokens.size(1))
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != want:
            got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            dtype = f" {mask.dtype}" if isinstance(mask, torch.Tensor) else ""
            raise ValueError(f"mask must be a bool tensor of shape (batch, 1, 1, seq) = {want} "
                             f"(e.g. padding_mask(tokens, pad_id)), got{dtype} {got}")
        return mask



# ------------------------------------------------------------------ decoder-only (GPT-style)


@dataclass(frozen=True)
class DecoderLMConfig(BlockConfig):
    """The decoder-only language model: its block (defaults: GPT-2 small's, Radford et al.
    2019: pre-norm with a final LayerNorm, GELU), vocabulary, positions and tying."""

    d_model: int = default("d_model", 768)
    n_heads: int = default("n_heads", 12)
    d_ff: int = default("d_ff", 3072)
    n_layers: int = default("n_layers", 12)
    norm_first: bool = default("norm_first", True)
    activation: Activation = default("activation", "gelu")
    vocab_size: int = setting(MISSING, "tokens of the vocabulary", "[1, inf)")
    max_len: int = setting(1024, "positions the model has (the longest text it reads)",
                           "[1, inf)")
    positional: Positional = setting("learned", "learned positions (GPT's) or the paper's "
                                     "sinusoidal ones")
    tie_output: bool = setting(True, "output layer weight = the (target) embedding weight")
    pad_id: int = setting(PAD, "the padding id", "[0, inf)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_config(self)

    @classmethod
    def gpt2_small(cls, vocab_size: int = 50257, **overrides: Any) -> "DecoderLMConfig":
        """GPT-2 small: 12 layers, d_model 768, 12 heads, d_ff 3072, 1024 positions, byte-level
        BPE vocabulary of 50,257 tokens."""
        return cls(vocab_size, **overrides)

    @classmethod
    def tiny(cls, vocab_size: int, **overrides: Any) -> "DecoderLMConfig":
        """A model that trains in seconds on a CPU."""
        tiny = dict(d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=256)
        return cls(vocab_size, **{**tiny, **overrides})


class DecoderOnlyLayer(EncoderLayer):
    """GPT's block: masked self-attention, then the feed-forward network. It is the chapter 06
    DecoderLayer without its cross-attention, which leaves exactly the chapter 05
    EncoderLayer (the same parameters, so torch.nn.TransformerEncoderLayer maps onto it too):
    what makes it a decoder is the causal mask it is given, and the cache it can keep.

    x (batch, seq, d_model); mask bool, True = may attend (causal: see DecoderLM); cache
    None, or the layer's LayerCache: then x holds the new positions only.
    """

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                cache: LayerCache | None = None) -> torch.Tensor:
        kv = cache.self_attn if cache is not None else None
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask, cache=kv)[0])
        return self.sublayers[1](x, self.feed_forward)  # (batch, seq, d_model)


class DecoderLM(nn.Module):
    """A decoder-only language model: logits (batch, seq, vocab_size) for the next token at
    every position, each computed from the tokens up to it only.

    forward(tokens, mask=None, cache=None): tokens (batch, seq) ids. The model is causal
    whatever the mask: `mask` (bool, True = may attend, broadcastable to (batch, 1, seq,
    total)) can only hide more, e.g. left padding. Right padding needs no mask, since no
    earlier position ever looks at it. With a cache (from init_cache()), tokens are the new
    tokens only: they take positions len(cache), len(cache) + 1, ... and attend to the
    cached ones too (total = len(cache) + seq).
    """

    kind = "lm"
    config_class = DecoderLMConfig

    def __init__(self, config: DecoderLMConfig):
        super().__init__()
        check_config(type(self), config)
        c = self.config = config
        self.embed = Embeddings(c.vocab_size, c.d_model)
        self.positional = _POSITIONAL[c.positional](c.d_model, c.max_len, c.dropout)
        self.layers = nn.ModuleList(
            DecoderOnlyLayer(**c.layer_options()) for _ in range(c.n_layers)
        )
        self.norm = LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.generator = nn.Linear(c.d_model, c.vocab_size, bias=False)  # as GPT-2
        init_weights(self)
        if c.tie_output:  # after the init, so that both names hold the same tensor
            self.generator.weight = self.embed.embedding.weight

    def init_cache(self) -> Cache:
        """An empty key/value cache for generation."""
        return Cache(len(self.layers))

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None,
                cache: Cache | None = None) -> torch.Tensor:
        check_tokens(tokens)
        start = len(cache) if cache is not None else 0
        rows = cache.layers[0].self_attn.key.size(0) if start else tokens.size(0)
        if rows != tokens.size(0):
            raise ValueError(f"the cache holds a batch of {rows} rows, got tokens "
                             f"{tuple(tokens.shape)}")
        seq = tokens.size(1)
        _check_mask(mask, (tokens.size(0), 1, seq, start + seq))
        x = self.embed(tokens)  # (batch, seq, d_model)
        if self.positional is not None:  # None: positions inside attention (chapter 12's RoPE)
            x = self.positional(x, start=start)
        # Query i is position start + i: it may attend to positions 0 ... start + i.
        causal = torch.ones(seq, start + seq, dtype=torch.bool, device=tokens.device).tril(start)
        mask = causal if mask is None else mask & causal  # (..., seq, start + seq)
        caches = cache.layers if cache is not None else [None] * len(self.layers)
        for layer, layer_cache in zip(self.layers, caches, strict=True):
            x = layer(x, mask, cache=layer_cache)
        return self.generator(self.norm(x))  # (batch, seq, vocab_size)
