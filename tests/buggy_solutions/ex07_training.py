"""Wrong ways to build a teacher-forcing batch, the label-smoothing loss, the paper's
schedule and a training step, and the diagnosis each must get."""

import math
import time

import torch
import torch.nn.functional as F

from tfcourse.data import BOS, EOS, PAD, Batch, pad_sequences
from tfcourse.masks import causal_mask, padding_mask, target_mask

from . import diagnosis

# ------------------------------------------------------------------------------ make_batch


def _ids(pairs, vocab):
    return [vocab.encode(s) for s, _ in pairs], [vocab.encode(t) for _, t in pairs]


@diagnosis("Decoder targets not shifted")
def same_input_and_target(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src = pad_sequences(xs)
    tgt = pad_sequences([[BOS, *y, EOS] for y in ys])
    return Batch(src, tgt, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))


@diagnosis("Decoder targets not shifted")
def no_bos(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in, tgt_out = pad_sequences(xs), pad_sequences(ys), pad_sequences(
        [[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@diagnosis("EOS missing from the targets")
def no_eos(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([y + [PAD] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@diagnosis("Target mask not causal")
def padding_only_target_mask(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), padding_mask(tgt_in, PAD))


@diagnosis("Target mask without padding")
def causal_only_target_mask(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), causal_mask(tgt_in.size(1)))


@diagnosis("Source padding not masked")
def no_source_mask(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    everything = torch.ones(src.size(0), 1, 1, src.size(1), dtype=torch.bool)
    return Batch(src, tgt_in, tgt_out, everything, target_mask(tgt_in, PAD))


@diagnosis("Mask polarity inverted")
def source_mask_inverted(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, (src == PAD)[:, None, None], target_mask(tgt_in, PAD))


@diagnosis("make_batch should return a Batch")
def returns_a_tuple(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    return src, tgt_in


# -------------------------------------------------------------------- label_smoothing_loss


def _smoothed(logits, target, eps):
    q = torch.full_like(logits, eps / logits.size(-1))
    return q.scatter_add(-1, target.unsqueeze(-1), torch.full_like(q[..., :1], 1 - eps))


@diagnosis("Loss counts padding")
def mean_over_everything(logits, target, eps=0.1, pad_id=PAD):
    q = _smoothed(logits, target, eps)
    return -(q * F.log_softmax(logits, -1)).sum(-1).mean()


@diagnosis("Loss counts padding")
def padding_zeroed_but_counted(logits, target, eps=0.1, pad_id=PAD):
    q = _smoothed(logits, target, eps)
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return (loss * (target != pad_id)).sum() / target.numel()


@diagnosis("Smoothing mass put onto the true class")
def eps_back_on_true_class(logits, target, eps=0.1, pad_id=PAD):
    one_hot = F.one_hot(target, logits.size(-1)).to(logits.dtype)
    q = one_hot * (1 - eps) + eps * one_hot
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@diagnosis("Smoothing mass put onto padding")
def eps_onto_padding_class(logits, target, eps=0.1, pad_id=PAD):
    log_p = F.log_softmax(logits, -1)
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll - eps * log_p[..., pad_id]
    return loss[target != pad_id].mean()


@diagnosis("Smoothing mass put onto padding")
def smoothing_at_padding_positions(logits, target, eps=0.1, pad_id=PAD):
    log_p = F.log_softmax(logits, -1)
    keep = target != pad_id
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1) * keep
    smooth = -log_p.mean(-1)  # at every position, padding included
    return ((1 - eps) * nll + eps * smooth).sum() / keep.sum()


@diagnosis("Smoothing spread over the other classes only")
def annotated_transformer_smoothing(logits, target, eps=0.1, pad_id=PAD):
    q = torch.full_like(logits, eps / (logits.size(-1) - 2))
    q.scatter_(-1, target.unsqueeze(-1), 1 - eps)
    q[..., pad_id] = 0
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@diagnosis("Smoothing spread over the other classes only")
def smoothing_over_v_minus_1(logits, target, eps=0.1, pad_id=PAD):
    q = torch.full_like(logits, eps / (logits.size(-1) - 1))
    q.scatter_(-1, target.unsqueeze(-1), 1 - eps)
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@diagnosis("Loss summed instead of averaged")
def summed(logits, target, eps=0.1, pad_id=PAD):
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].sum()


@diagnosis("pad_id ignored")
def padding_is_zero(logits, target, eps=0.1, pad_id=PAD):
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != 0].mean()


@diagnosis("Built-in loss called")
def builtin(logits, target, eps=0.1, pad_id=PAD):
    return F.cross_entropy(logits.flatten(0, -2), target.flatten(), label_smoothing=eps,
                           ignore_index=pad_id)


@diagnosis("No gradient flows back to the logits")
def detached(logits, target, eps=0.1, pad_id=PAD):
    logits = logits.detach()
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@diagnosis("Input modified in place")
def in_place(logits, target, eps=0.1, pad_id=PAD):
    target[target == pad_id] = pad_id  # harmless, but logits below are changed
    logits -= logits.max(-1, keepdim=True).values
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


# ----------------------------------------------------------------------------------- noam_lr


def _rate(step, d_model, warmup, warm=-1.5, decay=-0.5):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model**-0.5 * min(step**decay, step * warmup**warm)


@diagnosis("Warmup exponent wrong")
def warmup_square_root(step, d_model, warmup):
    return _rate(step, d_model, warmup, warm=-0.5)


@diagnosis("Warmup exponent wrong")
def warmup_positive_exponent(step, d_model, warmup):
    return _rate(step, d_model, warmup, warm=1.5)


@diagnosis("Decay exponent wrong")
def decay_inverse(step, d_model, warmup):
    return _rate(step, d_model, warmup, decay=-1)


@diagnosis("max instead of min")
def maximum(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model**-0.5 * max(step**-0.5, step * warmup**-1.5)


@diagnosis("d_model factor wrong")
def no_d_model(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return min(step**-0.5, step * warmup**-1.5)


@diagnosis("Step 0 not handled")
def divides_by_zero_at_step_0(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@diagnosis("Step 0 not handled")
def clamps_step_0(step, d_model, warmup):
    step = max(step, 1)  # The Annotated Transformer's way: step 0 gets step 1's rate
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@diagnosis("Step 0 not handled")
def torch_rate(step, d_model, warmup):
    step = torch.tensor(float(step))
    return d_model**-0.5 * torch.minimum(step**-0.5, step * warmup**-1.5)  # inf at 0, then 0


@diagnosis("noam_lr should return a number")
def returns_none(step, d_model, warmup):
    d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@diagnosis("Too slow")
def endless(step, d_model, warmup):
    while True:
        time.sleep(0.01)


# -------------------------------------------------------------------------------- train_step


def _loss(model, batch, eps, ignore_index=PAD):
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), label_smoothing=eps,
                           ignore_index=ignore_index)


@diagnosis("Gradients not zeroed between steps")
def never_zeroed(model, batches, optimizer, label_smoothing=0.1, clip=1.0, autocast_dtype=None):
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


@diagnosis("Gradients not zeroed between steps")
def zeroed_through_the_model_before_use(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                                        autocast_dtype=None):
    losses = [_loss(model, batch, label_smoothing) for batch in batches]
    (sum(losses) / len(losses)).backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    model.zero_grad  # noqa: B018  (forgot the call's parentheses)
    return sum(loss.item() for loss in losses) / len(losses)


@diagnosis("Gradients zeroed for every micro-batch")
def zeroed_per_micro_batch(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                           autocast_dtype=None):
    total = 0.0
    for batch in batches:
        optimizer.zero_grad()
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


@diagnosis("Micro-batch losses not divided by their number")
def summed_micro_batches(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                         autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        loss.backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


@diagnosis("clip=0 clips every gradient to 0")
def clips_to_zero(model, batches, optimizer, label_smoothing=0.1, clip=1.0, autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


@diagnosis("Gradients not clipped")
def no_clipping(model, batches, optimizer, label_smoothing=0.1, clip=1.0, autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    optimizer.step()
    return total / len(batches)


@diagnosis("Gradients not clipped")
def clipped_after_the_step(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                           autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    optimizer.step()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    return total / len(batches)


@diagnosis("Loss counts padding")
def padding_in_the_loss(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                        autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing, ignore_index=-100)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


@diagnosis("Label smoothing not used in the loss")
def plain_cross_entropy(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                        autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, 0.0)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


@diagnosis("The weights did not change")
def no_optimizer_step(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                      autocast_dtype=None):
    optimizer.zero_grad()
    losses = [_loss(model, batch, label_smoothing) for batch in batches]
    (sum(losses) / len(losses)).backward()
    return sum(loss.item() for loss in losses) / len(losses)


@diagnosis("train_step should return the loss as a Python float")
def returns_a_tensor(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                     autocast_dtype=None):
    optimizer.zero_grad()
    losses = [_loss(model, batch, label_smoothing) for batch in batches]
    loss = sum(losses) / len(losses)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss


@diagnosis("Wrong loss returned")
def returns_the_last_loss(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                          autocast_dtype=None):
    optimizer.zero_grad()
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.item() / len(batches)


@diagnosis("Raised RuntimeError")
def prints_then_raises(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                       autocast_dtype=None):
    for _ in range(10_000):
        print("step", math.pi)
    raise RuntimeError("element 0 of tensors does not require grad")
