"""Chapter 07: training. The learning-rate schedules, label smoothing, and one training loop
shared by the notebooks and the command line (and by torchrun: DistributedDataParallel).

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)       (paper, eq. 3)
    q = (1 - eps) * one_hot(y) + eps / V       (label smoothing, paper section 5.4, eps = 0.1)
"""

import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from tqdm.auto import tqdm

from tfcourse.data import BOS, EOS, PAD, Vocab, encode_sources, make_batch
from tfcourse.decoding import beam_search_decode, greedy_decode
from tfcourse.model import Transformer, TransformerConfig

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

    logits (..., V) float, target (...) ids.
    """
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits (..., V) and target (...) must agree: got logits "
                         f"{tuple(logits.shape)} and target {tuple(target.shape)}")
    # float32 at least, also under mixed precision
    log_p = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    q = smoothed_targets(target, logits.size(-1), eps, log_p.dtype)  # (..., V)
    loss = -(q * log_p).sum(-1)  # (...)
    keep = target != pad_id
    return loss[keep].mean()


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
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.schedule not in ("noam", "cosine"):
            raise ValueError(f"schedule must be 'noam' or 'cosine', got {self.schedule!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.lr <= 0 or self.clip < 0 or self.eval_every < 0:
            raise ValueError(f"need lr > 0, clip >= 0, eval_every >= 0, got lr={self.lr}, "
                             f"clip={self.clip}, eval_every={self.eval_every}")


def default_device():
    """cuda if there is one, else Apple's mps, else the cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


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

    Under DistributedDataParallel ``model`` is the wrapped model: it averages the gradients
    over the processes at every backward pass (``no_sync()`` could skip all but the last;
    left out for clarity).
    """
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for batch in batches:
        device_type = batch.src.device.type
        with torch.autocast(device_type, autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = label_smoothing_loss(logits, batch.tgt_out, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


def train(model, task, config, *, device=None, checkpoint=None, resume=False, progress=True,
          stop_at=None):
    """Train ``model`` (a Transformer) on ``task`` (a tfcourse.data.Task) in place.

    Each optimizer step (train_step) averages the gradients of ``accum_steps`` micro-batches
    of ``batch_size`` examples drawn at random from ``task.train``; under ``torchrun
    --nproc-per-node N`` each of the N processes takes its share of the same draw and
    DistributedDataParallel averages the gradients, so N processes equal one process with
    N times the accumulation. Every ``eval_every`` steps: validation loss and greedy
    exact-match accuracy on ``task.val``, a checkpoint written to ``checkpoint`` (a path),
    and an early stop once the accuracy reaches ``stop_at``. ``resume=True`` continues from
    ``checkpoint`` if it exists: an interrupted run (Ctrl-C saves the last finished step)
    ends exactly as an uninterrupted one would. The checkpoint of a finished run holds the
    model without the optimizer's state (a third of the size). Mixed precision is bfloat16
    on GPUs that support it (no loss scaling needed); float32 elsewhere. Returns the
    history: lists for plots.
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
    history = {"step": [], "loss": [], "lr": [], "val_step": [], "val_loss": [],
               "val_accuracy": []}
    step = 0
    if resume and checkpoint is not None and os.path.exists(checkpoint):
        state = torch.load(checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        step, history = state["step"], state["history"]
        if step < config.steps:
            if "optimizer" not in state:
                raise ValueError(f"{checkpoint} holds a finished run of {step} steps, without "
                                 "the optimizer's state to go on; train a new one")
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
    net = DistributedDataParallel(model) if world > 1 else model

    def save():
        if checkpoint is not None and rank == 0:
            states = {} if step >= config.steps else dict(optimizer=optimizer,
                                                          scheduler=scheduler)
            save_checkpoint(checkpoint, model, task, config, step, history, **states)

    def validate():
        val = task.val[: config.eval_size]
        history["val_step"].append(step)
        history["val_loss"].append(validation_loss(model, val, task.vocab,
                                                   config.label_smoothing))
        history["val_accuracy"].append(exact_match(model, val, task.vocab))
        model.train()
        return history["val_accuracy"][-1]

    bar = tqdm(total=config.steps, initial=step, disable=not progress or rank != 0,
               desc=task.name, dynamic_ncols=True)
    running = None
    model.train()
    try:
        while step < config.steps:
            generator = torch.Generator().manual_seed(_step_seed(config.seed, step))
            size = config.accum_steps * world * config.batch_size  # examples, all processes
            drawn = torch.randint(len(task.train), (size,), generator=generator).tolist()
            batches = []
            for k in range(config.accum_steps):  # this process's micro-batches
                first = (k * world + rank) * config.batch_size
                pairs = [task.train[i] for i in drawn[first: first + config.batch_size]]
                batches.append(make_batch(pairs, task.vocab).to(device))
            torch.manual_seed(_step_seed(config.seed, step, rank + 1))  # dropout
            loss = train_step(net, batches, optimizer, config.label_smoothing, config.clip,
                              autocast_dtype)
            history["lr"].append(scheduler.get_last_lr()[0])
            scheduler.step()
            step += 1
            history["step"].append(step)
            history["loss"].append(loss)
            running = loss if running is None else 0.9 * running + 0.1 * loss
            bar.update(1)
            bar.set_postfix(loss=f"{running:.3f}", refresh=False)
            if (config.eval_every and step % config.eval_every == 0) or step == config.steps:
                accuracy = validate()
                save()
                bar.set_postfix(loss=f"{running:.3f}", val_acc=f"{accuracy:.3f}")
                if stop_at is not None and accuracy >= stop_at:
                    break
    except KeyboardInterrupt:
        save()  # the last finished step: resume=True carries on from here
        raise
    finally:
        bar.close()
        if own_group:
            dist.destroy_process_group()
    return history


# ------------------------------------------------------------------------ evaluation


@torch.no_grad()
def validation_loss(model, pairs, vocab, eps=0.1, batch_size=500):
    """The training loss (teacher forcing, label smoothing) over ``pairs``, in eval mode."""
    model.eval()
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    for i in range(0, len(pairs), batch_size):
        batch = make_batch(pairs[i: i + batch_size], vocab).to(device)
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        total += label_smoothing_loss(logits, batch.tgt_out, eps).item() * batch.n_tokens
        tokens += batch.n_tokens
    return total / tokens


@torch.no_grad()
def predict(model, texts, vocab, max_len=64, beam=1, batch_size=500):
    """Source texts -> output texts, decoded greedily (beam=1) or with beam search, on the
    model's device."""
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


def exact_match(model, pairs, vocab, beam=1):
    """Fraction of ``pairs`` whose whole output is right, EOS included (greedy decoding)."""
    # Room for every target, its EOS and one token more: a prediction that runs on past
    # the target's length never matches.
    max_len = max(len(t) for _, t in pairs) + 2
    outputs = predict(model, [s for s, _ in pairs], vocab, max_len, beam)
    return sum(o == t for o, (_, t) in zip(outputs, pairs, strict=True)) / len(pairs)


# ---------------------------------------------------------------------- checkpoints


def save_checkpoint(path, model, task, config, step, history=None, optimizer=None,
                    scheduler=None):
    """Write a checkpoint atomically (a temporary file, then os.replace): a crash while
    saving leaves the previous checkpoint intact. Plain types and tensors only, so that
    torch.load(weights_only=True) reads it."""
    state = {
        "model": model.state_dict(),
        "model_config": asdict(model.config),
        "train_config": asdict(config),
        "task": task.name,
        "vocab": task.vocab.symbols,
        "step": step,
        "history": history or {},
    }
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is not None:
            state[name] = obj.state_dict()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, device="cpu"):
    """A checkpoint -> (model in eval mode, vocab, the checkpoint's dict).
    Raises FileNotFoundError, or ValueError for a file that is not a tfcourse checkpoint."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
        model = Transformer(TransformerConfig(**state["model_config"]))
        model.load_state_dict(state["model"])
        vocab = Vocab(state["vocab"])
    except Exception as error:  # unpickling, missing keys, wrong shapes: all say "corrupt"
        raise ValueError(f"{path} is not a readable tfcourse checkpoint "
                         f"({type(error).__name__}: {str(error).splitlines()[0][:200]})") from None
    return model.to(device).eval(), vocab, state
