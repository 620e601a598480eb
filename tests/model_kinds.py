"""Stand-ins for chapter 09's two model kinds, the smallest that follow the interface of
tfcourse.training's docstring: a decoder-only language model (kind "lm") and an encoder
classifier (kind "classifier"), each with its batch and its task. The interface tests train,
checkpoint and generate with them through the same code as the encoder-decoder."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.batches import pad_sequences
from tfcourse.encoder import Embeddings, EncoderLayer
from tfcourse.masks import padding_mask
from tfcourse.multi_head import KVCache, MultiHeadAttention
from tfcourse.positional import PositionalEncoding
from tfcourse.vocab import BOS, EOS, PAD, Vocab

# ------------------------------------------------------------------------ language model


@dataclass
class LMConfig:
    vocab_size: int
    d_model: int = 32
    n_heads: int = 2
    max_len: int = 64


class TinyLM(nn.Module):
    """One causal self-attention layer and a tied output layer. forward(tokens, mask=None,
    cache=None) -> logits (batch, seq, vocab); with a cache, tokens are the new positions."""

    kind = "lm"
    config_class = LMConfig

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.embed = Embeddings(c.vocab_size, c.d_model)
        self.positional = PositionalEncoding(c.d_model, c.max_len)
        self.attention = MultiHeadAttention(c.d_model, c.n_heads)
        self.generator = nn.Linear(c.d_model, c.vocab_size)
        self.generator.weight = self.embed.embedding.weight

    def init_cache(self):
        return KVCache()

    def forward(self, tokens, mask=None, cache=None):
        start = len(cache) if cache is not None else 0
        x = self.positional(self.embed(tokens), start=start)
        n = tokens.size(1)  # new positions, after `start` cached ones: causal over all of them
        causal = torch.ones(n, start + n, dtype=torch.bool, device=tokens.device).tril(start)
        mask = causal if mask is None else mask & causal
        return self.generator(x + self.attention(x, x, x, mask, cache=cache)[0])


@dataclass
class LMBatch:
    tokens: torch.Tensor  # (batch, seq): BOS text EOS, padded
    pad_id = PAD

    def to(self, device):
        return LMBatch(self.tokens.to(device))

    def loss_inputs(self, model):
        """Every position predicts the next token."""
        return model(self.tokens[:, :-1]), self.tokens[:, 1:]

    @property
    def n_targets(self):
        return int((self.tokens[:, 1:] != PAD).sum())


@dataclass
class LMTask:
    name: str
    vocab: Vocab
    train: list
    val: list
    test: list
    metric = "loss"  # held-out nats per token
    higher_is_better = False

    def make_batch(self, texts):
        return LMBatch(pad_sequences([[BOS, *self.vocab.encode(t), EOS] for t in texts]))

    @torch.no_grad()
    def evaluate(self, model, texts):
        model.eval()
        logits, targets = self.make_batch(texts).loss_inputs(model)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD).item()

    def show(self, model, texts):
        return [f"{t!r}: loss {self.evaluate(model, [t]):.2f}" for t in texts]


def lm_task(n=400):
    g = torch.Generator().manual_seed(0)
    texts = ["".join("abcd"[int(i)] for i in torch.randint(4, (1,), generator=g).repeat(6))
             + "e" * int(torch.randint(1, 4, (1,), generator=g)) for _ in range(n)]
    return LMTask("toy-lm", Vocab("abcde"), texts[: n - 40], texts[n - 40: n - 20], texts[n - 20:])


# ------------------------------------------------------------------------------ classifier


@dataclass
class ClassifierConfig:
    vocab_size: int
    n_classes: int
    d_model: int = 32
    n_heads: int = 2


class TinyClassifier(nn.Module):
    """One encoder layer, mean-pooled over the real tokens, then a linear layer.
    forward(tokens, mask) -> logits (batch, n_classes)."""

    kind = "classifier"
    config_class = ClassifierConfig

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.embed = Embeddings(c.vocab_size, c.d_model)
        self.layer = EncoderLayer(c.d_model, c.n_heads, 2 * c.d_model, dropout=0.0)
        self.head = nn.Linear(c.d_model, c.n_classes)

    def forward(self, tokens, mask):
        h = self.layer(self.embed(tokens), mask)  # (batch, seq, d_model)
        real = mask[:, 0, 0, :, None].float()  # (batch, seq, 1)
        return self.head((h * real).sum(1) / real.sum(1))


@dataclass
class ClassifyBatch:
    tokens: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    pad_id = None  # every label counts, class 0 too

    def to(self, device):
        return ClassifyBatch(self.tokens.to(device), self.mask.to(device), self.labels.to(device))

    def loss_inputs(self, model):
        return model(self.tokens, self.mask), self.labels

    @property
    def n_targets(self):
        return self.labels.numel()


@dataclass
class ClassifyTask:
    name: str
    vocab: Vocab
    train: list
    val: list
    test: list
    metric = "accuracy"
    higher_is_better = True

    def make_batch(self, examples):
        tokens = pad_sequences([self.vocab.encode(t) for t, _ in examples])
        labels = torch.tensor([label for _, label in examples])
        return ClassifyBatch(tokens, padding_mask(tokens, PAD), labels)

    @torch.no_grad()
    def evaluate(self, model, examples):
        model.eval()
        batch = self.make_batch(examples)
        return (model(batch.tokens, batch.mask).argmax(-1) == batch.labels).float().mean().item()

    def show(self, model, examples):
        return [f"{t!r}: class {label}" for t, label in examples]


def classify_task(n=300):
    """Which letter a text has most of: 'a' (class 0) or 'b' (class 1)."""
    g = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(n):
        label = int(torch.randint(2, (1,), generator=g))
        letters = torch.randint(3, (8,), generator=g)
        text = "".join("abc"[int(i)] for i in letters) + "ab"[label] * 4
        examples.append((text, int(text.count("b") > text.count("a"))))
    return ClassifyTask("toy-classify", Vocab("abc"), examples[:240], examples[240:270],
                        examples[270:])


KINDS = {
    "lm": (TinyLM, lambda task: LMConfig(len(task.vocab)), lm_task),
    "classifier": (TinyClassifier, lambda task: ClassifierConfig(len(task.vocab), 2),
                   classify_task),
}
