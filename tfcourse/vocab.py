"""Characters <-> ids, and the special tokens every task shares.

Ids 0..3 are PAD, BOS, EOS, UNK in every vocabulary; chapter 09's texts add [CLS] and
[MASK] as their first symbols (ids 4 and 5).
"""

from collections.abc import Iterable, Sequence, Sized
from typing import Any

import torch

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class Vocab:
    """Characters <-> ids. Ids 0..3 are PAD, BOS, EOS, UNK; the symbols follow in order."""

    def __init__(self, symbols: Iterable[str]):
        symbols = list(symbols)
        if len(set(symbols)) != len(symbols) or set(symbols) & set(SPECIALS):
            raise ValueError(f"symbols must be distinct and not specials, got {symbols}")
        self.itos = [*SPECIALS, *symbols]
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> "Vocab":
        """The sorted set of characters in ``texts``."""
        return cls(sorted(set("".join(texts))))

    @property
    def symbols(self) -> list[str]:
        return self.itos[len(SPECIALS):]

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other):
        return isinstance(other, Vocab) and self.itos == other.itos

    def token(self, i: int) -> bytes:
        """The UTF-8 bytes of id ``i``'s text (a special's name: it stands for no text)."""
        return self.itos[i].encode()

    def encode(self, text: str) -> list[int]:
        """One id per character; characters not in the vocabulary become UNK."""
        return [self.stoi.get(c, UNK) for c in text]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Ids -> text: stops at the first EOS, skips PAD and BOS, shows UNK as '?'."""
        out = []
        for i in ids.tolist() if isinstance(ids, torch.Tensor) else ids:
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out.append("?" if i == UNK else self.itos[i])
        return "".join(out)


# The fields of a model config that size an embedding or an output layer by the vocabulary.
VOCAB_SIZES = ("vocab_size", "src_vocab_size", "tgt_vocab_size")


def check_vocab_size(vocab: Sized, config: Any) -> None:
    """``vocab`` must have as many tokens as each vocabulary size of the model ``config``
    (whichever of VOCAB_SIZES it has): ValueError naming both sizes. A shorter vocabulary
    would read the ids it lacks as unknown, a longer one give ids the embedding has not."""
    for name in VOCAB_SIZES:
        size = getattr(config, name, None)
        if size is not None and size != len(vocab):
            raise ValueError(f"the vocabulary has {len(vocab)} tokens but the model's "
                             f"{name} is {size}")


CLS_TOKEN, MASK_TOKEN = "<cls>", "<mask>"
CLS, MASK = len(SPECIALS), len(SPECIALS) + 1  # their ids: the first symbols of the vocabulary
