"""Batches: what each model kind is fed, side by side. Every batch knows how to feed its
model and which targets count (the interface in tfcourse.interface):

    logits, targets = batch.loss_inputs(model)

- Batch: (source, target) pairs for the encoder-decoder, teacher forcing (chapter 07)
- ClassificationBatch: texts and their classes, for the encoder classifier (chapter 09)
- MaskedLMBatch: texts with BERT's masked characters, for the same encoder's MLM head
- LMBatch: windows of a text and the same shifted by one, for the decoder-only model
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from tfcourse.masks import padding_mask, target_mask
from tfcourse.vocab import BOS, CLS, EOS, MASK, PAD, SPECIALS, Vocab


def check_tokens(tokens: torch.Tensor, name: str = "tokens") -> None:
    """``name`` must be a (batch, seq) tensor of ids with seq >= 1 (TypeError/ValueError
    naming it)."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of ids (batch, seq), got "
                        f"{type(tokens).__name__} (torch.as_tensor makes one)")
    if tokens.dim() != 2 or tokens.size(1) == 0:
        raise ValueError(f"{name} must be ids of shape (batch, seq) with seq >= 1, got "
                         f"{tuple(tokens.shape)}")


def _to(batch, device: torch.device | str):
    return type(batch)(*(getattr(batch, f).to(device) for f in batch.__dataclass_fields__))


# ------------------------------------------------------------- encoder-decoder (seq2seq)


@dataclass
class Batch:
    """A padded batch of (source, target) pairs for teacher forcing: the seq2seq batch.

    src     (batch, src_len)      source ids
    tgt_in  (batch, tgt_len)      decoder input: BOS y_1 ... y_n      (shifted right)
    tgt_out (batch, tgt_len)      what to predict: y_1 ... y_n EOS
    src_mask (batch, 1, 1, src_len), tgt_mask (batch, 1, tgt_len, tgt_len), True = may attend

    Every batch type has what the training loop uses (tfcourse.interface.BatchLike):
    loss_inputs(model), n_targets, pad_id and to(device).
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_mask: torch.Tensor
    tgt_mask: torch.Tensor
    pad_id = PAD  # the target id that does not count in the loss (a class attribute)

    to = _to

    def loss_inputs(self, model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (batch, tgt_len, vocab), targets (batch, tgt_len)): the model reads the
        source and the shifted target; tgt_out is what it must predict."""
        return model(self.src, self.tgt_in, self.src_mask, self.tgt_mask), self.tgt_out

    @property
    def n_targets(self) -> int:
        """Target tokens that count in the loss (not padding)."""
        return int((self.tgt_out != PAD).sum())


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD) -> torch.Tensor:
    """Lists of ids -> (batch, longest) LongTensor, padded on the right."""
    out = torch.full((len(seqs), max(map(len, seqs))), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def encode_sources(texts: Sequence[str], vocab: Vocab) -> tuple[torch.Tensor, torch.Tensor]:
    """Source texts -> ids (batch, src_len) and their padding mask (batch, 1, 1, src_len)."""
    src = pad_sequences([vocab.encode(t) for t in texts])
    return src, padding_mask(src, PAD)


def make_batch(pairs: Sequence[tuple[str, str]], vocab: Vocab) -> Batch:
    """(source, target) strings -> Batch. The decoder sees BOS + y and must predict y + EOS:
    at every position it is given the true previous tokens (teacher forcing) and the causal
    mask hides the rest."""
    src, src_mask = encode_sources([s for s, _ in pairs], vocab)
    y = [vocab.encode(t) for _, t in pairs]
    tgt_in = pad_sequences([[BOS, *t] for t in y])
    tgt_out = pad_sequences([[*t, EOS] for t in y])
    return Batch(src, tgt_in, tgt_out, src_mask, target_mask(tgt_in, PAD))


# ----------------------------------------------------------- encoder classifier and MLM


def mask_tokens(tokens: torch.Tensor, mask_id: int, special_ids: Iterable[int], vocab_size: int,
                rate: float = 0.15, generator: torch.Generator | None = None,
                pad_id: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption (Devlin et al. 2019, section 3.1 and appendix A.1).

    In each sequence, choose round(rate * n) of its n ordinary tokens (never one of
    special_ids, such as padding, [CLS] or [MASK]; at least one where n > 0). Of the chosen,
    80% become [MASK], 10% a random ordinary token, and 10% stay as they are: the model
    cannot tell which tokens to trust, so it must model every position.

    tokens (batch, seq) ids. Returns (inputs, targets), both (batch, seq): inputs as the
    model sees them; targets the original token at the chosen positions and pad_id
    elsewhere (the loss ignores them). Every draw comes from ``generator`` (on tokens'
    device), so a seeded generator repeats the corruption.
    """
    check_tokens(tokens)
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    special = sorted({*special_ids, pad_id, mask_id})
    if not 0 <= special[0] <= special[-1] < vocab_size:
        raise ValueError(f"special ids (with mask_id and pad_id) must be in [0, vocab_size="
                         f"{vocab_size}), got {special}")
    if tokens.numel() and not 0 <= tokens.min() <= tokens.max() < vocab_size:
        raise ValueError(f"tokens must be ids in [0, vocab_size={vocab_size}), "
                         f"got values from {tokens.min().item()} to {tokens.max().item()}")
    ordinary = torch.ones(vocab_size, dtype=torch.bool, device=tokens.device)
    ordinary[special] = False
    ordinary_ids = ordinary.nonzero()[:, 0]  # what a random replacement is drawn from
    eligible = ordinary[tokens]  # (batch, seq)
    n = eligible.sum(1)  # (batch,)
    n_chosen = (rate * n).round().long().clamp(min=1).minimum(n)
    # A random order of each row's eligible positions (the others last); take the first ones.
    scores = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    scores = scores.masked_fill(~eligible, 2.0)
    rank = scores.argsort(dim=1).argsort(dim=1)  # (batch, seq): 0 = first in the random order
    chosen = rank < n_chosen[:, None]
    draw = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    random_ids = ordinary_ids[torch.randint(len(ordinary_ids), tokens.shape, generator=generator,
                                            device=tokens.device)]
    inputs = torch.where(chosen & (draw < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)
    targets = torch.where(chosen, tokens, pad_id)
    return inputs, targets


@dataclass
class ClassificationBatch:
    """tokens (batch, seq): [CLS] + text, right-padded; mask (batch, 1, 1, seq), True = not
    padding; labels (batch,) class indices. Every label counts, class 0 too: a loss that
    ignores PAD targets must not be given labels."""

    tokens: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    pad_id = None  # every label counts, class 0 too

    to = _to

    @property
    def n_targets(self) -> int:
        return self.labels.numel()

    def loss_inputs(self, model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        return model(self.tokens, self.mask), self.labels  # (batch, n_classes), (batch,)


def encode_texts(texts: Sequence[str], vocab: Vocab) -> tuple[torch.Tensor, torch.Tensor]:
    """Texts -> [CLS] + their characters' ids, padded: (batch, seq), and its padding mask."""
    tokens = pad_sequences([[CLS, *vocab.encode(t)] for t in texts])
    return tokens, padding_mask(tokens, PAD)


def classification_batch(pairs: Sequence[tuple[str, str]], vocab: Vocab,
                         classes: Sequence[str]) -> "ClassificationBatch":
    """Pairs (text, class name) -> ClassificationBatch."""
    tokens, mask = encode_texts([t for t, _ in pairs], vocab)
    index = {c: i for i, c in enumerate(classes)}
    return ClassificationBatch(tokens, mask, torch.tensor([index[c] for _, c in pairs]))


@dataclass
class MaskedLMBatch:
    """inputs (batch, seq): [CLS] + text after mask_tokens; mask (batch, 1, 1, seq); targets
    (batch, seq): the original tokens at the chosen positions, PAD elsewhere (not counted).
    The model computes the MLM head's logits: model(inputs, mask, mlm=True)."""

    inputs: torch.Tensor
    mask: torch.Tensor
    targets: torch.Tensor
    pad_id = PAD  # the positions that were not chosen

    to = _to

    @property
    def n_targets(self) -> int:
        return int((self.targets != PAD).sum())

    def loss_inputs(self, model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        return model(self.inputs, self.mask, mlm=True), self.targets  # (b, seq, V), (b, seq)


def masked_lm_batch(texts: Sequence[str], vocab: Vocab, generator: torch.Generator | None = None,
                    rate: float = 0.15) -> "MaskedLMBatch":
    """Texts -> MaskedLMBatch: ``rate`` of the characters chosen, of those 80% [MASK],
    10% a random character, 10% unchanged (mask_tokens); [CLS], UNK and padding never."""
    tokens, mask = encode_texts(texts, vocab)
    specials = range(len(SPECIALS) + 2)  # PAD, BOS, EOS, UNK, [CLS], [MASK]
    inputs, targets = mask_tokens(tokens, MASK, specials, len(vocab), rate, generator)
    return MaskedLMBatch(inputs, mask, targets)


# ------------------------------------------------------------------- decoder-only model


@dataclass
class LMBatch:
    """inputs (batch, block) and targets (batch, block): the same text shifted by one, so that
    targets[:, t] = inputs[:, t + 1] is the next character. PAD targets do not count."""

    inputs: torch.Tensor
    targets: torch.Tensor
    pad_id = PAD

    to = _to

    @property
    def n_targets(self) -> int:
        return int((self.targets != PAD).sum())

    def loss_inputs(self, model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        return model(self.inputs), self.targets  # (batch, block, V), (batch, block)


def lm_batch(windows: Sequence[torch.Tensor]) -> "LMBatch":
    """Windows of block_size + 1 ids (TextWindows' items) -> LMBatch: every position of
    every window is a prediction to learn from."""
    windows = torch.stack(list(windows))  # (batch, block + 1)
    return LMBatch(windows[:, :-1], windows[:, 1:])
