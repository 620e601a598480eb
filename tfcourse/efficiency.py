"""Chapter 10: efficiency and scale. Measuring (FLOPs, tensor memory, time), attention in
blocks with an online softmax, mixed precision, activation checkpointing, and the memory
that training the paper's big model takes on one GPU and on many.

Tiled attention (the idea of FlashAttention, Dao et al. 2022): for each block B of keys,

    S     = Q K_B^T / sqrt(d_k)                        the block's scores     (q_len, |B|)
    m'    = max(m, rowmax(S))                          running maximum of each query's scores
    denom = e^(m - m') denom + rowsum(e^(S - m'))      running sum of exponentials
    numer = e^(m - m') numer + e^(S - m') V_B          running weighted sum of the values
    m     = m'

and at the end softmax(Q K^T / sqrt(d_k)) V = numer / denom, without ever holding the
q_len x k_len matrix (FlashAttention's paper calls denom l and numer O).
"""

import functools
import math
import os
import time
import weakref

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from tfcourse.attention import _broadcast, _check_inputs
from tfcourse.batches import make_batch
from tfcourse.data import copy_task
from tfcourse.device import leave_torchrun_process
from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.losses import label_smoothing_loss
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.multi_head import MultiHeadAttention
from tfcourse.training import train_step

# ----------------------------------------------------------------------------- measuring


class _LiveBytes:
    """Counts the bytes of the tensors that operations create inside the `with` block: `peak`
    is the most alive at one time, `current` what is still alive. Not counted: tensors that
    existed before the block (inputs, weights), views, results written in place, and the
    tensors that `ignore` (a function of a tensor, or None) says to leave out."""

    def __init__(self, ignore=None):
        super().__init__()
        self.current = self.peak = 0
        self._live = {}  # address of a storage made in the block -> its bytes
        self.ignore = ignore

    def _count(self, args, kwargs, out):
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            address, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or address in inputs or address in self._live:
                continue  # a view of a tensor, an in-place result, or already counted
            if self.ignore is not None and self.ignore(t):
                continue
            self._live[address] = size
            self.current += size
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._free, address)  # runs when the memory is freed
        return out

    def _free(self, address):
        self.current -= self._live.pop(address)


class PeakMemory(_LiveBytes, TorchDispatchMode):
    """Counts the bytes of the tensors that torch operations create inside the `with` block,
    forward and backward: `peak` is the most alive at one time, `current` what is still
    alive. Deterministic (sizes of tensors, not the state of an allocator) and the same on
    every device. Not counted: tensors that existed before the block (inputs, weights), and
    scratch memory a fused kernel uses inside itself without making a tensor of it.

        with PeakMemory() as memory:
            out = attention(q, k, v)
        memory.peak  # bytes
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self._count(args, kwargs, func(*args, **(kwargs or {})))


class ForwardMemory(_LiveBytes, TorchFunctionMode):
    """PeakMemory's count at the level of torch's Python functions: the same bytes for code
    that runs forward only (no backward pass: autograd's operations are not seen), without
    the seconds that the first TorchDispatchMode of a process takes to start."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self._count(args, kwargs, func(*args, **(kwargs or {})))


def count_flops(fn, *args, **kwargs):
    """Floating-point operations of fn(*args, **kwargs), counted by torch.utils.flop_counter:
    matrix products and attention (fused or not), a multiply-add counting 2. Element-wise
    operations (softmax, LayerNorm, ReLU) are not counted: few FLOPs, if not always little
    time, since each reads and writes every number it touches."""
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


def loglog_slope(x, y):
    """The exponent k of y ~ x^k: the least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def timings(fns, repeats=5):
    """Wall times of the functions `fns` (name -> function of no arguments): each is called
    once to warm up, then `repeats` rounds call each in turn, so that a busy moment of the
    machine hits all of them alike. Returns name -> list of seconds, one per round. Compare
    two of them by the median of their per-round ratios."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _synchronize()
            start = time.perf_counter()
            fn()
            _synchronize()  # a GPU runs asynchronously: wait for it
            times[name].append(time.perf_counter() - start)
    return times


def _synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    elif torch.backends.mps.is_available():
        torch.mps.synchronize()


# ------------------------------------------------------------------------ tiled attention


def tiled_attention(query, key, value, mask=None, block_size=128):
    """softmax(Q K^T / sqrt(d_k)) V computed over blocks of `block_size` keys with an online
    softmax (module docstring): memory grows with q_len * block_size, not q_len * k_len.

    Same arguments and output as tfcourse.attention.scaled_dot_product_attention (without
    the weights, which it never holds): query (..., q_len, d_k), key (..., k_len, d_k),
    value (..., k_len, d_v), mask bool broadcastable to (..., q_len, k_len), True = may
    attend. A query whose keys are all masked gets 0, as in the reference.

    This saves memory in the forward pass. Autograd through the loop keeps every block's
    e^(S - m') for the backward pass; FlashAttention writes its own backward instead,
    recomputing the blocks from Q, K, V and the final m and denom.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive number of keys, got {block_size!r}")
    _check_inputs(query, key, value, mask)
    k_len = key.size(-2)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)  # a mask that broadcasts over the keys
    scale = 1 / math.sqrt(query.size(-1))
    lead = _broadcast(query.shape[:-2], key.shape[:-2], value.shape[:-2])  # batch, heads
    q_len, d_v = query.size(-2), value.size(-1)
    m = query.new_full((*lead, q_len, 1), -math.inf)  # running maximum
    denom = query.new_zeros((*lead, q_len, 1))  # running sum of e^(s - m)
    numer = query.new_zeros((*lead, q_len, d_v))  # running sum of e^(s - m) v
    for start in range(0, k_len, block_size):
        block = slice(start, start + block_size)
        s = query @ key[..., block, :].transpose(-2, -1) * scale  # (..., q_len, block)
        if mask is not None:
            s = s.masked_fill(~mask[..., block], -math.inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., q_len, 1)
        # A query with no allowed key yet has m_new = -inf; subtracting it would make
        # -inf - (-inf) = NaN. Shift by 0 there instead: e^(-inf - 0) = 0, as it should.
        shift = m_new.masked_fill(m_new == -math.inf, 0.0)
        p = torch.exp(s - shift)  # (..., q_len, block)
        rescale = torch.exp(m - shift)  # what was summed under the old maximum
        denom = rescale * denom + p.sum(dim=-1, keepdim=True)
        numer = rescale * numer + p @ value[..., block, :]  # (..., q_len, d_v)
        m = m_new
    return numer / denom.masked_fill(denom == 0, 1.0)  # all keys masked: 0, not 0 / 0


# ------------------------------------------------------------------------ mixed precision

PRECISIONS = ("float32", "bfloat16", "float16")


def autocast_dtype(precision, device):
    """The dtype for torch.autocast(device.type, dtype) given a `precision` name: None for
    "float32" (autocast off), torch.bfloat16, or torch.float16 (cuda only; its narrow range
    needs a torch.amp.GradScaler). Raises ValueError for a precision `device` cannot run.
    A CPU runs bfloat16 everywhere, fast only with native instructions (AVX-512 BF16, AMX)."""
    device = torch.device(device)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "float32":
        return None
    if precision == "float16" and device.type != "cuda":
        raise ValueError(f"precision='float16' (with a GradScaler) is for cuda devices, not "
                         f"{device.type}: use precision='bfloat16'")
    if precision == "bfloat16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
            raise ValueError(f"precision='bfloat16' needs a GPU that has it (compute capability "
                             f"8.0+); {torch.cuda.get_device_name(device)} has not: use "
                             "precision='float16', with a GradScaler")
        if device.type == "mps" and not torch.backends.mps.is_macos_or_newer(14, 0):
            raise ValueError("precision='bfloat16' on mps needs macOS 14 or newer: use "
                             "precision='float32'")
    return torch.bfloat16 if precision == "bfloat16" else torch.float16


# ---------------------------------------------------------------- activation checkpointing


def checkpoint_layers(model):
    """Activation checkpointing of every encoder and decoder layer of `model` (in place,
    once): a layer keeps only its inputs for the backward pass and runs again there to
    recompute what it needs (torch.utils.checkpoint; dropout draws the same masks). Same
    outputs and gradients, less memory, about one more forward pass of compute."""
    for layer in (*model.encoder.layers, *model.decoder.layers):
        layer.forward = functools.partial(checkpoint, layer.forward, use_reentrant=False)
    return model


# --------------------------------------------------------------------- memory, on paper


def training_memory(config, batch, src_len, tgt_len):
    """Bytes that training a Transformer of `config` with Adam in float32 holds, computed
    from the model itself, built on the meta device (shapes without data: no memory used,
    no arithmetic done), for one step on `batch` pairs of `src_len` source and `tgt_len`
    target tokens. Returns a dict:

        parameters          how many (a shared tensor counts once)
        weights, gradients  4 bytes per parameter each
        adam                8 bytes per parameter: Adam's running mean and mean of squares
        activations         what the forward pass keeps for the backward pass (tensors
                            saved by autograd, counted with saved_tensors_hooks)
        activations_split   the part of them inside attention and the feed-forward networks
                            (heads, scores, hidden units): what tensor parallelism divides
        largest_unit        bytes of the weights of the largest layer or embedding table
                            (FSDP gathers one such unit's weights at a time)
    """
    with torch.device("meta"):
        model = Transformer(config)

    def storage(t):  # tensors that share memory (views, reshapes) share one storage
        return t.untyped_storage()._cdata

    parameters = {storage(p) for p in model.parameters()}
    held = []  # weak references to what autograd holds for each saved tensor
    inputs_of = []  # a stack: storages of the inputs of the attention / FFN module running

    def pack(t):
        saved = _Saved(t, bool(inputs_of) and storage(t) not in inputs_of[-1])
        held.append(weakref.ref(saved))  # dies with its node when a branch of the graph does
        return saved

    def enter(module, args):
        inputs_of.append({storage(a) for a in args if isinstance(a, torch.Tensor)})

    def leave(module, args, output):
        inputs_of.pop()

    hooks = [h for m in model.modules() if isinstance(m, (MultiHeadAttention, PositionWiseFeedForward))
             for h in (m.register_forward_pre_hook(enter), m.register_forward_hook(leave))]
    src = torch.zeros(batch, src_len, dtype=torch.long, device="meta")
    tgt = torch.zeros(batch, tgt_len, dtype=torch.long, device="meta")
    src_mask = torch.ones(batch, 1, 1, src_len, dtype=torch.bool, device="meta")
    tgt_mask = torch.ones(batch, 1, tgt_len, tgt_len, dtype=torch.bool, device="meta")

    def embed(embeddings, ids):  # Embeddings.forward without its check of the ids' values
        return model.positional(embeddings.embedding(ids) * math.sqrt(config.d_model))

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved.tensor):
        memory = model.encoder(embed(model.src_embed, src), src_mask)
        logits = model.generator(model.decoder(embed(model.tgt_embed, tgt), memory, src_mask,
                                               tgt_mask))
        loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), label_smoothing=0.1)
    for hook in hooks:
        hook.remove()
    kept = {}  # storage -> (bytes, split) of the tensors the graph of `loss` still holds
    for saved in filter(None, (ref() for ref in held)):
        if storage(saved.tensor) not in parameters:
            kept.setdefault(storage(saved.tensor), (saved.tensor.untyped_storage().nbytes(),
                                                    saved.split))
    del loss
    n = sum(p.numel() for p in model.parameters())
    units = [*model.encoder.layers, *model.decoder.layers, model.src_embed, model.tgt_embed,
             model.generator]
    return {
        "parameters": n,
        "weights": 4 * n,
        "gradients": 4 * n,
        "adam": 8 * n,
        "activations": sum(size for size, _ in kept.values()),
        "activations_split": sum(size for size, split in kept.values() if split),
        "largest_unit": max(4 * sum(p.numel() for p in u.parameters()) for u in units),
    }


class _Saved:
    __slots__ = ("tensor", "split", "__weakref__")

    def __init__(self, tensor, split):
        self.tensor, self.split = tensor, split


def memory_per_gpu(memory, n_gpus):
    """Bytes per GPU when n_gpus train on the batch of `memory` (from training_memory):

    - ddp: DistributedDataParallel. Every GPU holds the whole model, its gradients and
      Adam's state; each runs 1/n of the batch, and the gradients are averaged.
    - fsdp: FullyShardedDataParallel (ZeRO-3). Weights, gradients and Adam's state are cut
      into n shards, one per GPU; each unit's weights are gathered for its turn in the
      forward and backward pass, then dropped. Each GPU runs 1/n of the batch.
    - tensor parallel (Megatron-LM): every weight matrix of attention and feed-forward cut
      into n parts (heads, hidden units), the embeddings too; all n GPUs run the whole
      batch together: what is inside attention and the feed-forward networks is split,
      the rest (layer inputs, residuals, LayerNorm) is on every GPU.

    Returns {scheme: {part: bytes}}; small replicated parameters (LayerNorm, biases) are
    counted as split, a slight underestimate.
    """
    state = {k: memory[k] for k in ("weights", "gradients", "adam")}
    activations, split = memory["activations"], memory["activations_split"]
    return {
        "ddp": {**state, "activations": activations / n_gpus},
        "fsdp": {**{k: v / n_gpus for k, v in state.items()},
                 "gathered unit": memory["largest_unit"], "activations": activations / n_gpus},
        "tensor parallel": {**{k: v / n_gpus for k, v in state.items()},
                            "activations": split / n_gpus + (activations - split)},
    }


# ---------------------------------------------------------- DistributedDataParallel, shown


def ddp_demo(batch_size=8):
    """What DistributedDataParallel replicates and what it averages, shown by one training
    step of the tiny model in each process. Run it with

        torchrun --nproc-per-node 2 -m tfcourse.efficiency

    (gloo on a CPU, nccl on GPUs). Each process starts from different random weights and
    trains on different examples; rank 0 prints what it found."""
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    task = copy_task(seed=0, n_train=world * batch_size, n_val=1, n_test=1)
    torch.manual_seed(rank)  # on purpose: every process draws different weights
    model = Transformer(TransformerConfig.tiny(len(task.vocab), dropout=0.0))

    def flat(tensors):
        return torch.cat([t.detach().flatten() for t in tensors])

    def same_everywhere(x):  # max |x - x on rank 0|, over all processes
        x0 = x.clone()
        dist.broadcast(x0, src=0)
        gap = (x - x0).abs().max()
        dist.all_reduce(gap, op=dist.ReduceOp.MAX)
        return gap.item()

    report = [f"processes: {world}, parameters: {flat(model.parameters()).numel():,}"]
    report.append(f"weights differ before DDP: max |difference| = "
                  f"{same_everywhere(flat(model.parameters())):.3f}")
    ddp = DistributedDataParallel(model)  # copies rank 0's weights to every process
    report.append(f"weights after DistributedDataParallel(model): max |difference| = "
                  f"{same_everywhere(flat(model.parameters())):.3f}")

    sent = {"bytes": 0}

    def count_and_average(state, bucket):  # DDP's own all-reduce, counting what it sends
        state["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
        return default_hooks.allreduce_hook(None, bucket)

    ddp.register_comm_hook(sent, count_and_average)
    batch = make_batch(task.train[rank * batch_size: (rank + 1) * batch_size], task.vocab)

    def backward():
        model.zero_grad(set_to_none=True)
        logits = ddp(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        label_smoothing_loss(logits, batch.tgt_out).backward()
        return flat(p.grad for p in model.parameters())

    with ddp.no_sync():  # this process's own gradient, not averaged
        local = backward()
    averaged = backward()
    mean = local.clone()
    dist.all_reduce(mean)
    mean /= world
    report.append(f"gradients of the {world} processes' own examples differ: max |difference| = "
                  f"{same_everywhere(local):.3f}")
    report.append(f"after backward() under DDP, the gradients: max |difference| = "
                  f"{same_everywhere(averaged):.3f}; max |gradient - mean of the processes' "
                  f"own gradients| = {(averaged - mean).abs().max().item():.1e}")
    report.append(f"sent by all-reduce in one backward pass: {sent['bytes']:,} bytes "
                  f"= 4 bytes x {sent['bytes'] // 4:,} gradients")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):  # the course's training step, as tfcourse.training.train runs it
        train_step(ddp, [batch], optimizer)
    report.append(f"after 3 training steps, each process on its own examples: weights max "
                  f"|difference| = {same_everywhere(flat(model.parameters())):.3f}")
    if rank == 0:
        print("\n".join(report), flush=True)
    # DDP's reducer holds the process group and threads of its own: let it go before the
    # group, or a process can abort on exit ("terminate called without an active exception").
    ddp = optimizer = None
    dist.barrier()  # and no process leaves while another still talks to it
    dist.destroy_process_group()



if __name__ == "__main__" and "LOCAL_RANK" in os.environ:
    ddp_demo()
    leave_torchrun_process()
