"""The settings that every layer of a stack shares, in one frozen config.

Each model kind's config (TransformerConfig, EncoderClassifierConfig, DecoderLMConfig) is a
BlockConfig plus what only that kind has (vocabularies, positions, pooling, tying): it is
passed whole, and a stack is built from it by name, never by position
(``Encoder.from_config(config)``). The defaults are the paper's base model (Table 3).

Each field carries its help text and, for a number, the interval its value must lie in
(``setting(...)``); a choice is a Literal type. The configs check their values from these
(check_settings), and `tfcourse train` makes its command-line options from them.
"""

import dataclasses
import operator
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

Activation = Literal["relu", "gelu", "silu"]
AttnImpl = Literal["explicit", "sdpa"]


def setting(default: Any, help: str, interval: str | None = None, **kwargs: Any) -> Any:
    """A config field with its help text (what `tfcourse train --help` shows) and, for a
    number, the interval it must lie in, e.g. "[1, inf)" or "[0, 1)". A default of
    dataclasses.MISSING makes the field required."""
    return field(default=default, metadata={"help": help, "interval": interval}, **kwargs)


def check_value(name: str, kind: type, value: Any, interval: str | None) -> Any:
    """``value`` as a ``kind`` (int or float) in ``interval``; ValueError naming ``name``."""
    wanted = _describe(kind, interval)
    try:
        if isinstance(value, bool) or isinstance(value, float) and kind is int:
            raise TypeError
        value = operator.index(value) if kind is int else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {wanted}, got {value!r}") from None
    if interval:
        low, high = (float(bound) for bound in interval[1:-1].split(", "))
        above = value >= low if interval[0] == "[" else value > low
        below = value <= high if interval[-1] == "]" else value < high
        if not (above and below):  # NaN too
            raise ValueError(f"{name} must be {wanted}, got {value!r}")
    return value


def _describe(kind: type, interval: str | None) -> str:
    """"an integer >= 1", "a number > 0", "a number in [0, 1)"."""
    what = "an integer" if kind is int else "a number"
    if not interval:
        return what
    low, high = interval[1:-1].split(", ")
    if high == "inf":
        return f"{what} {'>=' if interval[0] == '[' else '>'} {low}"
    return f"{what} in {interval}"


def check_settings(config: Any) -> None:
    """Every number of ``config`` in its field's interval, every choice one of its Literal
    values (ValueError naming the field); numbers normalized (numpy's integers -> int)."""
    for f in dataclasses.fields(config):
        value, hint = getattr(config, f.name), typing.get_type_hints(type(config))[f.name]
        if typing.get_origin(hint) is Literal:
            if value not in typing.get_args(hint):
                raise ValueError(f"{f.name} must be one of "
                                 f"{', '.join(map(repr, typing.get_args(hint)))}, got {value!r}")
        elif hint in (int, float):
            set_field(config, f.name, check_value(f.name, hint, value, f.metadata.get("interval")))
        elif hint is bool and not isinstance(value, bool):
            raise ValueError(f"{f.name} must be True or False, got {value!r}")


def set_field(config: Any, name: str, value: Any) -> None:
    """Normalize a field of a config in its __post_init__, frozen or not."""
    object.__setattr__(config, name, value)


@dataclass(frozen=True, kw_only=True)
class BlockConfig:
    """One layer's settings, shared by the n_layers layers of every stack of a model."""

    d_model: int = setting(512, "width of the model (the residual stream)", "[1, inf)")
    n_heads: int = setting(8, "attention heads", "[1, inf)")
    d_ff: int = setting(2048, "inner width of the feed-forward network", "[1, inf)")
    n_layers: int = setting(6, "layers in each stack (encoder and decoder each)", "[1, inf)")
    # 1 would drop everything: a model that trains to chance level and says nothing
    dropout: float = setting(0.1, "dropout probability", "[0, 1)")
    norm_first: bool = setting(False, "pre-norm (LayerNorm before each sublayer) instead of "
                               "the paper's post-norm")
    activation: Activation = setting("relu", "the feed-forward network's activation")
    attn_impl: AttnImpl = setting("explicit", "explicit: chapter 01's attention; sdpa: "
                                  "torch's fused kernel (chapter 10)")

    def __post_init__(self) -> None:
        check_settings(self)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    def layer_options(self) -> dict[str, Any]:
        """The keyword arguments of one layer (EncoderLayer, DecoderLayer, ...)."""
        return dict(d_model=self.d_model, n_heads=self.n_heads, d_ff=self.d_ff,
                    dropout=self.dropout, norm_first=self.norm_first,
                    activation=self.activation, attn_impl=self.attn_impl)


def default(name: str, value: Any) -> Any:
    """BlockConfig's field ``name`` with another default: a model kind's own block (GPT-2's
    pre-norm, BERT's GELU), with the same help and checks. For a subclass's class body."""
    return field(default=value, metadata=BlockConfig.__dataclass_fields__[name].metadata,
                 kw_only=True)


def check_pad_id(config: Any, *vocab_sizes: int) -> None:
    """pad_id must be an id of every one of the model's vocabularies."""
    if config.pad_id >= min(vocab_sizes):
        raise ValueError(f"pad_id={config.pad_id} is not an id of the vocabulary (size "
                         f"{min(vocab_sizes)})")
