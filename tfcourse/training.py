"""Chapter 07: training. One training loop shared by the notebooks, the command line and
torchrun (DistributedDataParallel), its settings (TrainConfig) and its validation.

It trains any model of the interface in tfcourse.interface (ModelLike, TaskLike,
BatchLike): the encoder-decoder on copy, reverse or dates, chapter 09's classifier and
language model. The loss is label smoothing's (tfcourse.losses), the schedule the paper's
or a cosine one (tfcourse.schedules), the optimizer the paper's Adam or chapter 13's AdamW
with its parameter groups and clipping (tfcourse.optim), checkpoints tfcourse.checkpoint's.
"""
import math
import os
import time
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from tfcourse.checkpoint import read_checkpoint, save_checkpoint
from tfcourse.config import check_settings, setting
from tfcourse.device import check_fits, default_device
from tfcourse.inference import eval_batches
from tfcourse.interface import BatchLike, ModelLike, TaskLike
from tfcourse.losses import label_smoothing_loss
from tfcourse.optim import AdamW, clip_grad_norm, param_groups
from tfcourse.progress import tqdm
from tfcourse.schedules import cosine_scheduler, noam_scheduler


@dataclass
class TrainConfig:
    """How to train. A plain dataclass, stored in checkpoints as a dict; each field's help
    is what `tfcourse train --help` shows."""

    steps: int = setting(1000, "optimizer steps", "[1, inf)")
    batch_size: int = setting(64, "examples per micro-batch (per process under torchrun)",
                              "[1, inf)")
    accum_steps: int = setting(1, "micro-batches whose gradients add up to one optimizer step",
                               "[1, inf)")
    schedule: Literal["noam", "cosine"] = setting(
        "noam", "learning-rate schedule: noam (the paper's) or cosine, both warm up")
    lr: float = setting(1.0, "noam: the factor in front of the paper's formula; cosine: the "
                        "peak learning rate", "(0, inf)")
    warmup: int = setting(400, "warmup steps", "[1, inf)")
    label_smoothing: float = setting(0.1, "epsilon of label smoothing", "[0, 1)")
    clip: float = setting(1.0, "clip the gradients' global norm to this; 0: no clipping",
                          "[0, inf)")
    optimizer: Literal["adam", "adamw"] = setting(
        "adam", "adam: torch's Adam as in the paper (eps 1e-9, no weight decay); adamw: "
        "chapter 13's AdamW (eps 1e-8), weight decay on the weight matrices only")
    beta2: float = setting(0.98, "decay of the squared gradients' average (the paper: 0.98, "
                           "Llama 2: 0.95)", "[0, 1)")
    weight_decay: float = setting(0.0, "adamw's decoupled weight decay (Llama 2: 0.1)", "[0, 1]")
    min_lr_ratio: float = setting(0.0, "cosine: the floor it decays to, a fraction of lr "
                                  "(Llama 2: 0.1)", "[0, 1]")
    eval_every: int = setting(100, "validate and save every so many steps (and at the end); "
                              "0: only at the end", "[0, inf)")
    eval_size: int = setting(500, "validation examples used", "[1, inf)")
    amp: bool = setting(True, "mixed precision (bfloat16) on GPUs that support it")
    amp_cpu: bool = setting(False, "bfloat16 autocast on the CPU too: twice as fast at d_model "
                            "256 on CPUs with AVX-512 BF16 or AMX, slower at d_model 64 "
                            "(benchmarks/precision.py)")
    seed: int = setting(0, "seeds the data, the initial weights and the batches",
                        "[0, 4294967296)")  # 32 bits: a step's seed is made from it

    def __post_init__(self) -> None:
        check_settings(self)
        # Today's recipe runs to the end of its schedule; the 2017 one keeps its short runs
        # (smoke tests of recipes whose warm-up is longer).
        if self.optimizer == "adamw" and self.warmup > self.steps:
            raise ValueError(f"warmup={self.warmup} is longer than the run (steps={self.steps}): "
                             "the learning rate would never reach its peak nor decay")
        if self.schedule == "noam" and self.min_lr_ratio:
            raise ValueError(f"min_lr_ratio={self.min_lr_ratio} is the cosine schedule's floor; "
                             "schedule='noam' has none")
        if self.optimizer == "adam" and self.weight_decay:
            raise ValueError(f"weight_decay={self.weight_decay} needs optimizer='adamw' (Adam's "
                             "would be an L2 penalty, not decoupled decay)")
        if self.schedule == "cosine" and self.lr * self.weight_decay >= 1:
            raise ValueError(f"lr * weight_decay = {self.lr * self.weight_decay:g} >= 1: each "
                             "step would shrink the weights by all of themselves or more")


def step_bytes(model: nn.Module, task: TaskLike, config: TrainConfig,
               device: torch.device) -> float:
    """About how many bytes a training step needs: four numbers per parameter (the weight,
    its gradient, Adam's two moments) and the activations that the backward pass keeps,
    counted on a few training examples and scaled to config.batch_size. Draws no random
    numbers that training would see."""
    kept = 0

    def pack(tensor):
        nonlocal kept
        kept += tensor.numel() * tensor.element_size()
        return tensor

    examples = list(task.train[: min(8, config.batch_size)])
    with torch.random.fork_rng(devices=[]), torch.autograd.graph.saved_tensors_hooks(pack, _same):
        logits, targets = task.make_batch(examples).to(device).loss_inputs(model)
        label_smoothing_loss(logits, targets, config.label_smoothing, None)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return 4 * weights + kept * config.batch_size / len(examples)


def _same(tensor):
    return tensor


def _step_seed(seed: int, step: int, rank: int = 0) -> int:
    # Everything random in a step is a function of (seed, step, rank): a resumed run repeats
    # an uninterrupted one exactly, and every process of a torchrun job draws the same batch.
    return (seed * 1_000_003 + step) * 1009 + rank


def train_step(model: nn.Module, batches: list[BatchLike], optimizer: torch.optim.Optimizer,
               label_smoothing: float = 0.1, clip: float = 1.0,
               autocast_dtype: torch.dtype | None = None) -> float:
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
        clip_grad_norm(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


def _check_finite(name: str, loss: float, step: int, lr: float, saved: int | None) -> None:
    """``saved``: the step the checkpoint holds, None when nothing was saved."""
    if not math.isfinite(loss):
        kept = ("nothing was saved" if saved is None else
                f"the checkpoint keeps the last good round (step {saved})")
        raise FloatingPointError(f"the {name} is {loss} at step {step}: training diverged (a "
                                 f"learning rate too high? lr={lr}); {kept}")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during train(). ``step``: the last finished step; ``saved``: whether this run
    wrote it to the checkpoint (not when it was stopped before finishing a step)."""

    def __init__(self, step: int, saved: bool):
        super().__init__(f"interrupted after step {step}")
        self.step, self.saved = step, saved


def train(model: ModelLike, task: TaskLike, config: TrainConfig, *,
          device: torch.device | str | None = None, checkpoint: str | None = None,
          resume: bool = False, progress: bool = True, stop_at: float | None = None,
          init: dict | None = None) -> dict:
    """Train ``model`` on ``task`` in place (any model and task of tfcourse.interface: the
    encoder-decoder on copy, reverse or dates, chapter 09's kinds).

    Each optimizer step (train_step) averages the gradients of ``accum_steps`` micro-batches
    of ``batch_size`` examples drawn at random from ``task.train``; under ``torchrun
    --nproc-per-node N`` each of the N processes takes its share of the same draw and
    DistributedDataParallel averages the gradients, so N processes equal one process with
    N times the accumulation. Every ``eval_every`` steps and at the end: the validation loss
    and the task's metric (task.evaluate) on ``task.val``, a checkpoint written to
    ``checkpoint`` (a path), and an early stop once the metric reaches ``stop_at``.

    ``resume=True`` continues from ``checkpoint`` if it exists: an interrupted run ends
    exactly as an uninterrupted one would (a run that has done ``config.steps`` already is a
    ValueError: nothing is left to do). Ctrl-C saves the last finished step and raises
    Interrupted. A loss that is not finite (NaN, inf) stops the run with FloatingPointError;
    the checkpoint keeps the last good round. The checkpoint of a finished run holds the
    model without the optimizer's state (a third of the size). Mixed precision is bfloat16
    on GPUs that support it (no loss scaling needed), on the CPU with ``amp_cpu``; float32
    elsewhere. With ``progress``, a progress bar, then one line with the result. ``init``
    (what the run started from: cli's --init) is recorded in each checkpoint. Returns the
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
    check_fits(step_bytes(model, task, config, device), f"a micro-batch of {config.batch_size} "
               f"examples (batch_size)", device, "use a smaller batch_size (accum_steps "
               "adds micro-batches up to a larger batch)")
    betas = (0.9, config.beta2)
    if config.optimizer == "adam":  # fused: one kernel updates all parameters
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=betas, eps=1e-9,
                                     fused=True)
    else:
        optimizer = AdamW(param_groups(model, config.weight_decay), lr=config.lr, betas=betas,
                          eps=1e-8)
    if config.schedule == "noam":
        scheduler = noam_scheduler(optimizer, model.config.d_model, config.warmup)
    else:
        scheduler = cosine_scheduler(optimizer, config.warmup, config.steps, config.min_lr_ratio)
    bf16 = (config.amp and device.type == "cuda" and torch.cuda.is_bf16_supported()
            or config.amp_cpu and device.type == "cpu")
    autocast_dtype = torch.bfloat16 if bf16 else None
    history = {"step": [], "loss": [], "lr": [], "val_step": [], "val_loss": [], "val_metric": []}
    step = 0
    if resume and checkpoint is not None and os.path.exists(checkpoint):
        state = read_checkpoint(checkpoint, device)
        if state.get("task") != task.name:
            raise ValueError(f"{checkpoint} was trained on task {state.get('task')!r}, "
                             f"not {task.name!r}")
        model.load_state_dict(state["model"])
        step, history, init = state["step"], state["history"], state.get("init", init)
        if step > config.steps or (step == config.steps and history["val_step"][-1:] == [step]):
            raise ValueError(f"{checkpoint} has done {step} steps already: with steps="
                             f"{config.steps} nothing is left to train")
        if step < config.steps:
            if "optimizer" not in state:
                raise ValueError(f"{checkpoint} holds a finished run of {step} steps, without "
                                 "the optimizer's state to go on; train a new one")
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
    first_step = step
    saved_step = step if step else None  # what the checkpoint holds
    net = DistributedDataParallel(model) if world > 1 else model

    def save():
        nonlocal saved_step
        if checkpoint is not None and rank == 0:
            states = {} if step >= config.steps else dict(optimizer=optimizer,
                                                          scheduler=scheduler)
            save_checkpoint(checkpoint, model, task, config, step, history, **states, init=init)
            saved_step = step

    def due():  # a validation round at this step that has not happened yet
        planned = (config.eval_every and step % config.eval_every == 0) or step == config.steps
        return step > 0 and planned and (not history["val_step"] or history["val_step"][-1] < step)

    def validate():
        val = task.val[: config.eval_size]
        loss = validation_loss(model, task, val, config.label_smoothing)
        _check_finite("validation loss", loss, step, config.lr, saved_step)  # before saving
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
            _check_finite("loss", loss, step + 1, config.lr, saved_step)
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
        if own_group:  # DDP's reducer goes before its process group (else: abort on exit)
            del net
            dist.destroy_process_group()
    if progress and rank == 0 and history["val_step"]:
        print(f"{task.name}: {step} steps in {time.perf_counter() - started:.1f} s, "
              f"training loss {history['loss'][-1]:.3f}, validation loss "
              f"{history['val_loss'][-1]:.3f}, validation {task.metric} "
              f"{history['val_metric'][-1]:.3f}")
    return history


# ------------------------------------------------------------------------ evaluation


@torch.no_grad()
def validation_loss(model: nn.Module, task: TaskLike, examples: list, eps: float = 0.1,
                    batch_size: int = 500) -> float:
    """The training loss (teacher forcing, label smoothing) over ``examples`` of ``task``,
    in eval mode: the mean over every target that counts."""
    total, count = 0.0, 0
    for device, chunk in eval_batches(model, examples, batch_size):
        batch = task.make_batch(chunk).to(device)
        logits, targets = batch.loss_inputs(model)
        total += label_smoothing_loss(logits, targets, eps, batch.pad_id).item() * batch.n_targets
        count += batch.n_targets
    return total / count
