"""The model interface: what the training loop, evaluation, decoding and checkpoints rely
on. They never ask which kind of model they run. Three kinds plug in: the encoder-decoder
Transformer ("seq2seq", chapters 06-08), and chapter 09's encoder classifier ("classifier")
and decoder-only language model ("lm").

Where each job lives:
    tfcourse.vocab        characters <-> ids, the special tokens
    tfcourse.tokens       byte-level BPE (chapter 11): text <-> ids with Vocab's interface
    tfcourse.batches      every kind's batch, side by side (BatchLike)
    tfcourse.data         the seq2seq tasks (copy, reverse, dates); tfcourse.corpora chapter
                          09's (language identification, masked LM, Python source LM)
    tfcourse.losses       label smoothing, the language model's loss
    tfcourse.schedules    learning-rate schedules
    tfcourse.optim        AdamW, clipping by the global norm, the parameter groups (chapter 13)
    tfcourse.training     TrainConfig, train_step, the loop, validation
    tfcourse.inference    using a trained model: predict, classify, complete, ...
    tfcourse.decoding     greedy, beam search, sampling: one token-by-token loop, generate()
    tfcourse.checkpoint   save, load, and the registry of model kinds (register())
    tfcourse.hf           a Llama-style checkpoint as the folder transformers reads, and back
    tfcourse.device       the device and the CPU threads
    tfcourse.recipes      per task: the model and the training settings the course uses
    tfcourse.cli          the `tfcourse` command, a thin layer over these
"""

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from tfcourse.vocab import Vocab


@runtime_checkable
class ModelLike(Protocol):
    """An nn.Module with a ``kind`` (the name checkpoints record: "seq2seq", ...), a
    ``config_class`` (a dataclass: the model is cls(config_class(**fields))) and its
    ``config`` (config.d_model sets the paper's schedule). Its forward has its chapter's own
    signature (Transformer: src, tgt, src_mask, tgt_mask); only its batches call it. Its
    __init__ starts with tfcourse.model.check_config(type(self), config): a config of another
    class, or a model that would not fit in memory, is refused before anything is allocated.
    tfcourse.checkpoint.register(cls) makes a new kind loadable."""

    kind: ClassVar[str]
    config_class: ClassVar[type]
    config: Any

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor: ...


@runtime_checkable
class BatchLike(Protocol):
    """A batch knows which of the model's inputs it fills, and which targets count."""

    pad_id: ClassVar[int | None]  # the target value that does not count; None: all count

    def loss_inputs(self, model: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (..., C), targets (...)), calling the model through its forward (so that
        DistributedDataParallel sees the call)."""
        ...

    @property
    def n_targets(self) -> int:
        """How many targets count (validation_loss weights batches by it)."""
        ...

    def to(self, device: torch.device | str) -> "BatchLike": ...


@runtime_checkable
class TaskLike(Protocol):
    """A task makes its batches and says how a model is judged on it."""

    name: str  # what checkpoints record
    vocab: Vocab  # or a tfcourse.tokens.BPE: encode, decode, len, token, the specials' ids
    train: Sequence  # examples: whatever make_batch takes
    val: Sequence
    test: Sequence
    metric: ClassVar[str]  # what evaluate() measures
    higher_is_better: ClassVar[bool]  # and which way is better (a loss: False)

    def make_batch(self, examples: Sequence) -> BatchLike: ...

    def evaluate(self, model: Any, examples: Sequence) -> float:
        """The task's metric over ``examples``."""
        ...

    def show(self, model: Any, examples: Sequence) -> list[str]:
        """One line of text per example (`tfcourse train` prints a few)."""
        ...
