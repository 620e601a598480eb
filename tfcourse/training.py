"""Chapter 07: training. The learning-rate schedules, label smoothing, one training loop
shared by the notebooks, the command line and torchrun (DistributedDataParallel), its
evaluation, and checkpoints.

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)       (paper, eq. 3)
    q = (1 - eps) * one_hot(y) + eps / V       (label smoothing, paper section 5.4, eps = 0.1)

The interface: what the loop, evaluation and checkpoints rely on
----------------------------------------------------------------
They never ask which kind of model they train. Three kinds plug in: the encoder-decoder
Transformer ("seq2seq", chapters 06-08), and chapter 09's encoder classifier
("classifier") and decoder-only language model ("lm").

A model is an nn.Module with
    kind            class attribute: the name checkpoints record ("seq2seq", ...)
    config_class    class attribute: a dataclass; the model is cls(config_class(**fields))
    config          its config; config.d_model sets the paper's schedule
    forward(...)    its chapter's own signature (Transformer: src, tgt, src_mask, tgt_mask)
and its class is in MODEL_CLASSES (below), so that load_checkpoint rebuilds it.

A batch (tfcourse.data.Batch is the seq2seq one) knows which of the model's inputs it fills:
    loss_inputs(model) -> (logits (..., C), targets (...)), calling the model through its
                    forward (so DistributedDataParallel sees the call); e.g. Batch gives
                    (model(src, tgt_in, src_mask, tgt_mask), tgt_out)
    pad_id          the target value that does not count in the loss; None: every one does
    n_targets       how many targets count (validation_loss weights batches by it)
    to(device)      the batch on that device

A task (tfcourse.data.Task is the seq2seq one) makes its batches and says how it is judged:
    name, vocab     the name checkpoints record; a tfcourse.data.Vocab
    train, val, test  lists of examples, whatever make_batch takes
    make_batch(examples) -> a batch
    evaluate(model, examples) -> float, the task's metric (exact match for seq2seq)
    metric, higher_is_better    its name, and which way is better (the loss: False)
    show(model, examples) -> one line of text per example (`tfcourse train` prints a few)
    classes         optional: the names of a classifier's outputs, in order (checkpoints
                    record them; other tasks have none)

Chapter 09's (tfcourse.corpora): ClassificationTask "classify" (language identification,
accuracy) with ClassificationBatch; MaskedLMTask "mlm" (the same texts, BERT's masked-LM
objective, masked accuracy) with MaskedLMBatch; LMTask "lm" (Python source, held-out loss in
nats per character) with LMBatch.

tfcourse.recipes pairs each task with a model and training defaults; tfcourse.decoding's
generate() is the one token-by-token loop that greedy decoding, sampling and a language
model's generation share.
"""
import contextlib
import math
import os
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR

from tfcourse.data import BOS, EOS, PAD, Vocab, encode_sources, make_batch
from tfcourse.decoding import beam_search_decode, greedy_decode
from tfcourse.model import Transformer
from tfcourse.progress import tqdm
from tfcourse.variants import DecoderLM, EncoderClassifier

# ---------------------------------------------------------------- learning-rate schedules


def noam_lr(step, d_model, warmup):
    """The paper's schedule, eq. 3: linear warmup for ``warmup`` steps, then decay as
    1/sqrt(step). Steps count from 1 (step 0 would divide by zero)."""
    if step < 1:
        raise ValueError(f"step counts from 1 in the paper's schedule, got step={step}")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def cosine_lr(step, warmup, total_steps):
    """Linear warmup to 1 over ``warmup`` steps, then half a cosine down to 0 at
    ``total_steps``. A factor in [0, 1]; steps count from 1."""
    if step < 1:
        raise ValueError(f"steps count from 1, got step={step}")
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def noam_scheduler(optimizer, d_model, warmup):
    """LambdaLR: lr = optimizer's lr * noam_lr(step). The optimizer's lr (1.0 in the paper)
    is the factor in front. The scheduler counts steps from 0, the paper from 1."""
    return LambdaLR(optimizer, lambda k: noam_lr(k + 1, d_model, warmup))


def cosine_scheduler(optimizer, warmup, total_steps):
    """LambdaLR: lr = optimizer's lr (the peak) * cosine_lr(step)."""
    return LambdaLR(optimizer, lambda k: cosine_lr(k + 1, warmup, total_steps))


# ------------------------------------------------------------------------- label smoothing


def smoothed_targets(target, n_classes, eps, dtype=torch.float32):
    """The distribution the model is trained towards, (..., n_classes):
    q = (1 - eps) * one_hot(target) + eps / n_classes. Each row sums to 1."""
    q = torch.full((*target.shape, n_classes), eps / n_classes, dtype=dtype, device=target.device)
    return q.scatter_add_(-1, target.unsqueeze(-1), torch.full_like(q[..., :1], 1.0 - eps))


def label_smoothing_loss(logits, target, eps=0.1, pad_id=PAD):
    """Cross entropy H(q, p) between the smoothed targets q and the model's p = softmax(logits),
    averaged over the target positions that are not padding. The same value as
    F.cross_entropy(logits.flatten(0, -2), target.flatten(), label_smoothing=eps,
    ignore_index=pad_id).

    logits (..., V) float, target (...) ids; pad_id=None: every target counts (class labels).
    """
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits (..., V) and target (...) must agree: got logits "
                         f"{tuple(logits.shape)} and target {tuple(target.shape)}")
    # float32 at least, also under mixed precision
    log_p = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    q = smoothed_targets(target, logits.size(-1), eps, log_p.dtype)  # (..., V)
    loss = -(q * log_p).sum(-1)  # (...)
    if pad_id is None:
        return loss.mean()
    return loss[target != pad_id].mean()


# ---------------------------------------------------------------------------- the loop


@dataclass
class TrainConfig:
    """How to train. A plain dataclass, stored in checkpoints as a dict."""

    steps: int = 1000  # optimizer steps
    batch_size: int = 64  # examples per micro-batch (per process under torchrun)
    accum_steps: int = 1  # micro-batches whose gradients add up to one optimizer step
    schedule: str = "noam"  # "noam" (the paper's) or "cosine"
    lr: float = 1.0  # noam: the factor in front of eq. 3; cosine: the peak learning rate
    warmup: int = 400  # warmup steps
    label_smoothing: float = 0.1
    clip: float = 1.0  # clip the gradient norm to this; 0 = no clipping
    eval_every: int = 100  # validate every so many steps (and at the end); 0 = at the end
    eval_size: int = 500  # validation examples used
    amp: bool = True  # mixed precision (bfloat16) on GPUs that support it
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "accum_steps", "warmup", "eval_size"):
            _check_int(name, getattr(self, name), 1)
        _check_int("eval_every", self.eval_every, 0)
        _check_int("seed", self.seed, 0)
        if self.schedule not in ("noam", "cosine"):
            raise ValueError(f"schedule must be 'noam' or 'cosine', got {self.schedule!r}")
        if not 0.0 <= self.label_smoothing < 1.0:  # also False for NaN
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0 < self.lr < math.inf:
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        if not 0 <= self.clip < math.inf:
            raise ValueError(f"clip must be a finite number >= 0 (0: no clipping), got {self.clip}")


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def default_device():
    """cuda if there is one, else Apple's mps, else the cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def free_cpu_cores(interval=0.2):
    """The CPU cores that other programs leave idle, measured over ``interval`` seconds
    (from /proc/stat on Linux; elsewhere all cores count as idle), at least 1. Give torch
    that many threads: a thread on a busy core runs slowly, and the others wait for it at
    every operation (with two threads on two cores, one of them busy, a training step of
    the copy task takes several times longer than with one thread)."""
    ours = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        samples = []
        for k in range(2):
            if k:
                time.sleep(interval)
            with open(_PROC_STAT) as f:  # "cpu  user nice system idle iowait irq softirq steal"
                lines = f.read().splitlines()  # then one "cpuN ..." line per core
            ticks = [int(v) for v in lines[0].split()[1:9]]
            samples.append((ticks[3] + ticks[4], sum(ticks)))
        cpus = sum(line.startswith("cpu") and line[3].isdigit() for line in lines)
    except (OSError, ValueError, IndexError):
        return ours or 1
    (idle0, total0), (idle1, total1) = samples
    idle = (idle1 - idle0) / max(1, total1 - total0) * cpus  # in cores
    return max(1, min(ours or 1, int(idle + 0.5)))


_PROC_STAT = "/proc/stat"


def _step_seed(seed, step, rank=0):
    # Everything random in a step is a function of (seed, step, rank): a resumed run repeats
    # an uninterrupted one exactly, and every process of a torchrun job draws the same batch.
    return (seed * 1_000_003 + step) * 1009 + rank


def train_step(model, batches, optimizer, label_smoothing=0.1, clip=1.0, autocast_dtype=None):
    """One optimizer step on the micro-batches ``batches`` (a list of Batch): gradients set
    to zero, then each micro-batch's loss / len(batches) backpropagated (the gradients add
    up: gradient accumulation), the gradient norm clipped to ``clip`` (0: no clipping), and
    the optimizer's step. ``autocast_dtype`` (e.g. torch.bfloat16 on a GPU) runs the forward
    pass in mixed precision. Returns the mean of the micro-batches' losses, a float.

    Each batch calls the model with the inputs it holds (batch.loss_inputs(model): for the
    encoder-decoder, model(src, tgt_in, src_mask, tgt_mask)) and names the targets. Under
    DistributedDataParallel ``model`` is the wrapped model: it averages the gradients over
    the processes at every backward pass (``no_sync()`` could skip all but the last; left
    out for clarity).
    """
    optimizer.zero_grad(set_to_none=True)
    device_type = next(model.parameters()).device.type
    total = 0.0
    for batch in batches:
        with torch.autocast(device_type, autocast_dtype, enabled=autocast_dtype is not None):
            logits, targets = batch.loss_inputs(model)
        loss = label_smoothing_loss(logits, targets, label_smoothing, batch.pad_id)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


def _check_finite(name, loss, step, lr):
    if not math.isfinite(loss):
        raise FloatingPointError(
            f"the {name} is {loss} at step {step}: training diverged (a learning rate too "
            f"high? lr={lr}); the checkpoint keeps the last good round")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during train(). ``step``: the last finished step; ``saved``: whether this run
    wrote it to the checkpoint (not when it was stopped before finishing a step)."""

    def __init__(self, step, saved):
        super().__init__(f"interrupted after step {step}")
        self.step, self.saved = step, saved


def train(model, task, config, *, device=None, checkpoint=None, resume=False, progress=True,
          stop_at=None):
    """Train ``model`` on ``task`` in place (any model and task of the interface in this
    module's docstring: the encoder-decoder on copy, reverse or dates, chapter 09's kinds).

    Each optimizer step (train_step) averages the gradients of ``accum_steps`` micro-batches
    of ``batch_size`` examples drawn at random from ``task.train``; under ``torchrun
    --nproc-per-node N`` each of the N processes takes its share of the same draw and
    DistributedDataParallel averages the gradients, so N processes equal one process with
    N times the accumulation. Every ``eval_every`` steps and at the end: the validation loss
    and the task's metric (task.evaluate) on ``task.val``, a checkpoint written to
    ``checkpoint`` (a path), and an early stop once the metric reaches ``stop_at``.

    ``resume=True`` continues from ``checkpoint`` if it exists: an interrupted run ends
    exactly as an uninterrupted one would. Ctrl-C saves the last finished step and raises
    Interrupted. A loss that is not finite (NaN, inf) stops the run with FloatingPointError;
    the checkpoint keeps the last good round. The checkpoint of a finished run holds the
    model without the optimizer's state (a third of the size). Mixed precision is bfloat16
    on GPUs that support it (no loss scaling needed); float32 elsewhere. With ``progress``,
    a progress bar, then one line with the result. Returns the history: lists for plots.
    """
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    own_group = world > 1 and not dist.is_initialized()
    if own_group:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")

    model.to(device)
    # fused: one kernel updates all parameters (on every device type torch supports)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=(0.9, 0.98), eps=1e-9,
                                 fused=True)
    if config.schedule == "noam":
        scheduler = noam_scheduler(optimizer, model.config.d_model, config.warmup)
    else:
        scheduler = cosine_scheduler(optimizer, config.warmup, config.steps)
    bf16 = config.amp and device.type == "cuda" and torch.cuda.is_bf16_supported()
    autocast_dtype = torch.bfloat16 if bf16 else None
    history = {"step": [], "loss": [], "lr": [], "val_step": [], "val_loss": [], "val_metric": []}
    step = 0
    if resume and checkpoint is not None and os.path.exists(checkpoint):
        state = _read(checkpoint, device)
        if state.get("task") != task.name:
            raise ValueError(f"{checkpoint} was trained on task {state.get('task')!r}, "
                             f"not {task.name!r}")
        model.load_state_dict(state["model"])
        step, history = state["step"], state["history"]
        if step < config.steps:
            if "optimizer" not in state:
                raise ValueError(f"{checkpoint} holds a finished run of {step} steps, without "
                                 "the optimizer's state to go on; train a new one")
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
    first_step = step
    net = DistributedDataParallel(model) if world > 1 else model

    def save():
        if checkpoint is not None and rank == 0:
            states = {} if step >= config.steps else dict(optimizer=optimizer,
                                                          scheduler=scheduler)
            save_checkpoint(checkpoint, model, task, config, step, history, **states)

    def due():  # a validation round at this step that has not happened yet
        planned = (config.eval_every and step % config.eval_every == 0) or step == config.steps
        return step > 0 and planned and (not history["val_step"] or history["val_step"][-1] < step)

    def validate():
        val = task.val[: config.eval_size]
        loss = validation_loss(model, task, val, config.label_smoothing)
        _check_finite("validation loss", loss, step, config.lr)  # before it is saved
        metric = task.evaluate(model, val)
        model.train()
        for name, value in (("val_step", step), ("val_loss", loss), ("val_metric", metric)):
            history[name].append(value)  # all three or none: Ctrl-C cannot split them
        return metric

    def reached(metric):
        return stop_at is not None and (
            metric >= stop_at if task.higher_is_better else metric <= stop_at)

    bar = tqdm(total=config.steps, initial=step, disable=not progress or rank != 0,
               desc=task.name, dynamic_ncols=True)
    running = None
    started = time.perf_counter()
    model.train()
    try:
        while True:
            if due():  # also a round an interrupted run did not finish
                metric = validate()
                save()
                bar.set_postfix(loss=f"{running or history['loss'][-1]:.3f}",
                                val=f"{metric:.3f}")
                if reached(metric):
                    break
            if step >= config.steps:
                break
            generator = torch.Generator().manual_seed(_step_seed(config.seed, step))
            size = config.accum_steps * world * config.batch_size  # examples, all processes
            drawn = torch.randint(len(task.train), (size,), generator=generator).tolist()
            batches = []
            for k in range(config.accum_steps):  # this process's micro-batches
                first = (k * world + rank) * config.batch_size
                examples = [task.train[i] for i in drawn[first: first + config.batch_size]]
                batches.append(task.make_batch(examples).to(device))
            torch.manual_seed(_step_seed(config.seed, step, rank + 1))  # dropout
            loss = train_step(net, batches, optimizer, config.label_smoothing, config.clip,
                              autocast_dtype)
            _check_finite("loss", loss, step + 1, config.lr)
            history["lr"].append(scheduler.get_last_lr()[0])
            scheduler.step()
            step += 1
            history["step"].append(step)
            history["loss"].append(loss)
            running = loss if running is None else 0.9 * running + 0.1 * loss
            bar.update(1)
            bar.set_postfix(loss=f"{running:.3f}", refresh=False)
    except KeyboardInterrupt:
        saved = step > first_step and checkpoint is not None
        if saved:
            save()  # the last finished step: resume=True carries on from here
        raise Interrupted(step, saved) from None
    finally:
        bar.close()
        if own_group:
            dist.destroy_process_group()
    if progress and rank == 0 and history["val_step"]:
        print(f"{task.name}: {step} steps in {time.perf_counter() - started:.1f} s, "
              f"training loss {history['loss'][-1]:.3f}, validation loss "
              f"{history['val_loss'][-1]:.3f}, validation {task.metric} "
              f"{history['val_metric'][-1]:.3f}")
    return history


# ------------------------------------------------------------------------ evaluation


@torch.no_grad()
def validation_loss(model, task, examples, eps=0.1, batch_size=500):
    """The training loss (teacher forcing, label smoothing) over ``examples`` of ``task``,
    in eval mode: the mean over every target that counts."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for i in range(0, len(examples), batch_size):
        batch = task.make_batch(examples[i: i + batch_size]).to(device)
        logits, targets = batch.loss_inputs(model)
        total += label_smoothing_loss(logits, targets, eps, batch.pad_id).item() * batch.n_targets
        count += batch.n_targets
    return total / count


@torch.no_grad()
def predict(model, texts, vocab, max_len=64, beam=1, batch_size=500):
    """Source texts -> output texts of an encoder-decoder, decoded greedily (beam=1) or with
    beam search, on the model's device."""
    model.eval()
    device = next(model.parameters()).device
    outputs = []
    for i in range(0, len(texts), batch_size):
        src, src_mask = encode_sources(texts[i: i + batch_size], vocab)
        src, src_mask = src.to(device), src_mask.to(device)
        if beam == 1:
            ids = greedy_decode(model, src, src_mask, max_len, BOS, EOS)
        else:
            ids = beam_search_decode(model, src, src_mask, max_len, BOS, EOS, beam_size=beam)
        outputs += [vocab.decode(row) for row in ids]
    return outputs


@torch.no_grad()
def output_probabilities(model, pairs, vocab, batch_size=500):
    """P(target, then EOS | source) under an encoder-decoder for each (source, target) pair:
    the product of the probabilities of its tokens, read by teacher forcing. For a model's
    own output, how sure it was of the whole of it."""
    model.eval()
    device = next(model.parameters()).device
    probabilities = []
    for i in range(0, len(pairs), batch_size):
        batch = make_batch(pairs[i: i + batch_size], vocab).to(device)
        logits, targets = batch.loss_inputs(model)
        log_p = logits.float().log_softmax(-1).gather(-1, targets[..., None])[..., 0]
        probabilities += log_p.masked_fill(targets == batch.pad_id, 0.0).sum(-1).exp().tolist()
    return probabilities


def exact_match(model, pairs, vocab, beam=1):
    """Fraction of ``pairs`` whose whole output is right, EOS included (greedy decoding)."""
    # Room for every target, its EOS and one token more: a prediction that runs on past
    # the target's length never matches.
    max_len = max(len(t) for _, t in pairs) + 2
    outputs = predict(model, [s for s, _ in pairs], vocab, max_len, beam)
    return sum(o == t for o, (_, t) in zip(outputs, pairs, strict=True)) / len(pairs)


# ---------------------------------------------------------------------- checkpoints

# The model classes a checkpoint can hold, by their `kind`.
MODEL_CLASSES = (Transformer, EncoderClassifier, DecoderLM)
_MODELS = {cls.kind: cls for cls in MODEL_CLASSES}


def save_checkpoint(path, model, task, config, step, history=None, optimizer=None,
                    scheduler=None):
    """Write a checkpoint atomically (a temporary file, then os.replace): a crash or a full
    disk while saving leaves the previous checkpoint intact and no temporary file behind.
    Plain types and tensors only, so that torch.load(weights_only=True) reads it. Raises
    OSError when the file cannot be written."""
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
    }
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is not None:
            state[name] = obj.state_dict()
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException as error:  # a full disk, a read-only place, Ctrl-C
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(error, (OSError, RuntimeError)):  # torch's writer raises RuntimeError
            raise OSError(f"cannot write the checkpoint {path}: {_first_line(error)}") from None
        raise


def _first_line(error):
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__


def _read(path, device):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty (0 bytes), not a tfcourse checkpoint")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # unpickling errors of every kind
        raise ValueError(f"{path} is not a readable tfcourse checkpoint "
                         f"({_first_line(error)})") from None


def load_checkpoint(path, device="cpu"):
    """A checkpoint -> (model in eval mode, vocab, the checkpoint's dict). The model's class
    is the one of the recorded kind (a checkpoint without one holds a Transformer).
    Raises FileNotFoundError, or ValueError for a file that is not a tfcourse checkpoint."""
    state = _read(path, device)
    kind = state.get("kind", Transformer.kind) if isinstance(state, dict) else None
    if kind is not None and kind not in _MODELS:
        raise ValueError(f"{path} holds a model of kind {kind!r}, which this version of "
                         f"tfcourse does not know (it knows {', '.join(_MODELS)})")
    try:
        cls = _MODELS[kind]
        model = cls(cls.config_class(**state["model_config"]))
        model.load_state_dict(state["model"])
        vocab = Vocab(state["vocab"])
    except Exception as error:  # missing keys, wrong shapes: all say "corrupt"
        raise ValueError(f"{path} is not a readable tfcourse checkpoint "
                         f"({_first_line(error)})") from None
    return model.to(device).eval(), vocab, state
