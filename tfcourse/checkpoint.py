"""Checkpoints: a trained model with what rebuilds it (its kind and config), its task's
vocabulary and class names, the training settings and history. The model kinds are a
registry: the course's four are known by name, and register() adds one of your own.

    save_checkpoint("dates.pt", model, task, config, step)
    model, vocab, state = load_checkpoint("dates.pt")

A checkpoint proves it is whole, for every kind alike: save_checkpoint records
"weights_sha256", the SHA-256 of the model's tensors (weights_digest: each tensor's name,
dtype, shape and bytes, in name order), and "sha256", those of everything a load rebuilds
the model and its tokenizer from (checkpoint_digest, one per part: the kind, the model's
settings, the vocabulary, the class names, the tokenizer's merges, pattern and special
tokens, and the weights, in a canonical form); read_checkpoint recomputes them, so that a file whose
weights, settings (rope_base, max_len), vocabulary or tokenizer were damaged (flipped bytes,
an edit) is refused, naming the file. A file without the records was written before tfcourse
made them: it is read as it is, with a warning, once, when its settings go unchecked (the
shipped checkpoints have both). Every file is refused when a weight is not finite (NaN, inf), and
load_checkpoint refuses a vocabulary whose size is not the model's (vocab.check_vocab_size).
A device that is unknown or not on this machine is named as such (device.resolve_device),
never blamed on the file. While a run writes a checkpoint it holds writing(path), a lock
file beside it, so that a second run given the same path is refused instead of replacing
the first one's work.
"""

import contextlib
import glob
import hashlib
import importlib
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from tfcourse.device import resolve_device
from tfcourse.interface import ModelLike, TaskLike
from tfcourse.tokens import BPE, canonical
from tfcourse.vocab import Vocab, check_vocab_size

# kind -> "module:class", imported when a checkpoint of that kind is loaded (so that loading
# a language model does not import the encoder-decoder, and no module here imports a model).
_KINDS: dict[str, str | type] = {
    "seq2seq": "tfcourse.model:Transformer",
    "classifier": "tfcourse.variants:EncoderClassifier",
    "lm": "tfcourse.variants:DecoderLM",
    "llama": "tfcourse.modern:LlamaLM",
}


def register(cls: type) -> type:
    """Make a model class loadable from checkpoints, by its ``kind`` (a class attribute); it
    must also have ``config_class`` (a dataclass: the model is cls(config_class(**fields))).
    Usable as a decorator. Returns cls."""
    for attribute in ("kind", "config_class"):
        if not hasattr(cls, attribute):
            raise TypeError(f"{cls.__name__} has no `{attribute}`: see tfcourse.interface")
    _KINDS[cls.kind] = cls
    return cls


def model_class(kind: str) -> type:
    """The registered class of model ``kind`` (ValueError for a kind nobody registered)."""
    if kind not in _KINDS:
        raise ValueError(f"no model of kind {kind!r} is known (known: {', '.join(_KINDS)}); "
                         "tfcourse.checkpoint.register() adds one")
    cls = _KINDS[kind]
    if isinstance(cls, str):
        module, name = cls.split(":")
        cls = _KINDS[kind] = getattr(importlib.import_module(module), name)
    return cls


def kinds() -> tuple[str, ...]:
    """The model kinds a checkpoint can hold."""
    return tuple(_KINDS)


def save_checkpoint(path: str, model: ModelLike, task: TaskLike, config: Any, step: int,
                    history: dict | None = None, optimizer: torch.optim.Optimizer | None = None,
                    scheduler: Any = None, init: dict | None = None) -> None:
    """Write a checkpoint atomically (a temporary file, then os.replace): a crash or a full
    disk while saving leaves the previous checkpoint intact and no temporary file behind
    (a temporary file left by a killed process is removed by the next save). Plain types
    and tensors only, so that torch.load(weights_only=True) reads it. Raises OSError when
    the file cannot be written. ``init`` records the checkpoint a run started from (its
    path, task, step and SHA-256; empty for a run from random weights). The file is sealed
    (seal: the digests of its weights and of all a load uses), which read_checkpoint checks."""
    state = {
        "kind": model.kind,
        "model": model.state_dict(),
        "model_config": asdict(model.config),
        "train_config": asdict(config),
        "task": task.name,
        "vocab": task.vocab.symbols,
        "classes": list(getattr(task, "classes", ())),  # a classifier's output names
        "step": step,
        "history": history or {},
        "init": init or {},
    }
    if isinstance(task.vocab, BPE):  # chapter 11: the tokenizer travels with the model
        state["tokenizer"] = task.vocab.to_dict()
    seal(state)
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is not None:
            state[name] = obj.state_dict()
    _remove_stale(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException as error:  # a full disk, a read-only place, Ctrl-C
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(error, (OSError, RuntimeError)):  # torch's writer raises RuntimeError
            raise OSError(f"cannot write the checkpoint {path}: {first_line(error)}") from None
        raise


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """Hold ``path``.lock while a run writes the checkpoint ``path``: a second run given the
    same path is refused at once (ValueError naming the process that holds it) instead of
    silently replacing the first one's checkpoint. The lock file holds the process id (made
    whole, then linked into place); one left by a process that no longer runs (killed) is
    taken over; it is removed when the run ends. (Where the file system has no hard links,
    there is no lock.)"""
    lock = f"{path}.lock"
    mine = f"{lock}{os.getpid()}"
    with open(mine, "w") as file:
        file.write(str(os.getpid()))
    held = False
    try:
        for _ in range(2):
            try:
                os.link(mine, lock)
                held = True
                break
            except FileExistsError:
                pid = _owner(lock)
                if pid is not None and _running(pid):
                    raise ValueError(f"another run (process {pid}) is writing {path}: wait "
                                     "for it to end, or choose another --out") from None
                with contextlib.suppress(OSError):  # left by a killed run
                    os.remove(lock)
            except OSError:  # no hard links here
                break
        else:
            raise ValueError(f"cannot lock {lock}: another run keeps taking it")
    finally:
        os.remove(mine)
    try:
        yield
    finally:
        if held:
            with contextlib.suppress(OSError):
                os.remove(lock)


def _owner(lock: str) -> int | None:
    """The process id in a lock file (None: gone, or not a number)."""
    try:
        with open(lock) as file:
            return int(file.read())
    except (OSError, ValueError):
        return None


def _remove_stale(path: str) -> None:
    """Remove `path`.tmpPID files of processes that no longer run (killed while saving)."""
    for tmp in glob.glob(glob.escape(path) + ".tmp*"):
        pid = tmp.rsplit(".tmp", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            with contextlib.suppress(OSError):
                os.remove(tmp)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it runs, as another user
        return True
    return True


def first_line(error: BaseException) -> str:
    """'ErrorType: the first line of its message' (at most 200 characters)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    """The SHA-256 of a state_dict: each tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        tensor = weights[name].detach().cpu().contiguous()
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# What a load rebuilds a model and its tokenizer from: each part's name in a message.
PARTS = {"kind": "model kind", "model_config": "model settings", "vocab": "vocabulary",
         "classes": "class names", "tokenizer": "tokenizer", "weights": "weights"}


def checkpoint_digest(state: dict) -> dict[str, str]:
    """Part (PARTS) -> the SHA-256 of its canonical form, the JSON (keys sorted, no spaces,
    ASCII) of: the kind, model_config, vocab, classes, the tokenizer (tokens.canonical: its
    `tokens` list, read from the merges, left out; null for a character model) and the
    weights' digest (weights_digest). A part per digest, so that a damaged file is told
    which part changed."""
    tokenizer = state.get("tokenizer")
    parts = {"kind": state.get("kind", "seq2seq"), "model_config": state.get("model_config"),
             "vocab": state.get("vocab"), "classes": state.get("classes") or [],
             "tokenizer": canonical(tokenizer) if isinstance(tokenizer, dict) else tokenizer,
             "weights": weights_digest(state["model"])}
    return {part: hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"))
                                 .encode()).hexdigest() for part, value in parts.items()}


def seal(state: dict) -> dict:
    """Record in ``state`` (a checkpoint's dict) the digests that read_checkpoint checks:
    "weights_sha256" (weights_digest) and "sha256" (checkpoint_digest). Returns state."""
    state["weights_sha256"] = weights_digest(state["model"])
    state["sha256"] = checkpoint_digest(state)
    return state


_UNCHECKED: set[str] = set()  # the files already said to be unsealed (one warning each)


def read_checkpoint(path: str, device: torch.device | str = "cpu") -> dict:
    """A checkpoint's dict, checked whole: the digests recorded at save (when there are,
    naming the part that changed or is missing) and finite weights. Raises
    FileNotFoundError, ValueError for a file that is not a tfcourse checkpoint or is
    damaged, or ValueError naming a device this machine lacks."""
    device = resolve_device(str(device))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty (0 bytes), not a tfcourse checkpoint")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # unpickling errors of every kind
        raise ValueError(f"{path} is not a readable tfcourse checkpoint "
                         f"({first_line(error)})") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path} is not a readable tfcourse checkpoint (it holds a "
                         f"{type(state).__name__}, not a dict)")
    weights = state.get("model")
    if isinstance(weights, dict) and all(isinstance(t, torch.Tensor) for t in weights.values()):
        recorded = state.get("weights_sha256")
        if recorded is not None and recorded != weights_digest(weights):
            raise ValueError(f"{path} is damaged: its weights are not those it was saved with "
                             "(their SHA-256 differs from the one recorded): use another copy")
        try:
            whole = checkpoint_digest(state)
        except (TypeError, ValueError) as error:  # settings that are no JSON: an edit
            raise ValueError(f"{path} is damaged: its settings are not those of a tfcourse "
                             f"checkpoint ({first_line(error)}): use another copy") from None
        recorded = state.get("sha256", whole)
        if not isinstance(recorded, dict) or recorded.keys() != whole.keys():
            raise ValueError(f"{path} is damaged: its record of SHA-256s is not one tfcourse "
                             "writes: use another copy")
        changed = [part for part in PARTS if recorded[part] != whole[part]]
        missing = [PARTS[p] for p in changed if p not in state and p != "weights"]
        if changed:
            names = ", ".join(PARTS[p] for p in changed)
            plural = len(missing or changed) > 1 or (missing or [names])[0].endswith("s")
            what = (f"its {' and '.join(missing)} {'are' if plural else 'is'} missing" if missing
                    else f"its {names} {'are' if plural else 'is'} not what it was saved with")
            raise ValueError(f"{path} is damaged: {what} (SHA-256 differs from the one "
                             "recorded): use another copy")
        if "sha256" not in state and "model_config" in state and path not in _UNCHECKED:
            _UNCHECKED.add(path)
            warnings.warn(f"{path} was saved before tfcourse checked a checkpoint whole: its "
                          "model settings, vocabulary and tokenizer are unchecked", stacklevel=2)
        for name, tensor in weights.items():
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise ValueError(f"{path} is damaged: its weight {name} is not finite (NaN or "
                                 "inf): use another copy, or an earlier checkpoint of the run")
    return state


def load_checkpoint(path: str, device: torch.device | str = "cpu"
                    ) -> tuple[nn.Module, Vocab | BPE, dict]:
    """A checkpoint -> (model in eval mode, vocab, the checkpoint's dict). The model's class
    is the one registered for the recorded kind (a checkpoint without one holds a
    Transformer). Raises FileNotFoundError, or ValueError for a file that is not a tfcourse
    checkpoint, is damaged (read_checkpoint) or disagrees with itself (a vocabulary of
    another size than the model's, fewer class names than outputs)."""
    device = resolve_device(str(device))
    state = read_checkpoint(path, device)
    kind = state.get("kind", "seq2seq")
    if kind not in _KINDS:
        raise ValueError(f"{path} holds a model of kind {kind!r}, which this version of "
                         f"tfcourse does not know (it knows {', '.join(_KINDS)})")
    try:
        cls = model_class(kind)
        model = cls(cls.config_class(**state["model_config"]))
        model.load_state_dict(state["model"])
        tokenizer = state.get("tokenizer")  # chapter 11: BPE; else characters
        vocab = BPE.from_dict(tokenizer, "its tokenizer") if tokenizer else Vocab(state["vocab"])
    except Exception as error:  # missing keys, wrong shapes: all say "corrupt"
        raise ValueError(f"{path} is not a readable tfcourse checkpoint "
                         f"({first_line(error)})") from None
    try:
        check_vocab_size(vocab, model.config)
    except ValueError as error:
        raise ValueError(f"{path} disagrees with itself: {error}: the file was edited or is "
                         "corrupt") from None
    classes = state.get("classes") or []
    n_classes = getattr(model.config, "n_classes", None)
    if classes and n_classes is not None and len(classes) != n_classes:
        raise ValueError(f"{path} names {len(classes)} classes for a model of {n_classes} "
                         "outputs: the file was edited or is corrupt")
    return model.to(device).eval(), vocab, state
