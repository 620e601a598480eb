"""Wrong ways to build a teacher-forcing batch, the label-smoothing loss, the paper's
schedule and a training step, and the diagnosis each must get."""

import math
import time

import torch
import torch.nn.functional as F

from tfcourse.batches import Batch, pad_sequences
from tfcourse.masks import causal_mask, padding_mask, target_mask
from tfcourse.vocab import BOS, EOS, PAD

from . import wrong

# ------------------------------------------------------------------------------ make_batch


def _ids(pairs, vocab):
    return [vocab.encode(s) for s, _ in pairs], [vocab.encode(t) for _, t in pairs]


@wrong("make_batch.not_shifted")
def same_input_and_target(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src = pad_sequences(xs)
    tgt = pad_sequences([[BOS, *y, EOS] for y in ys])
    return Batch(src, tgt, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))


@wrong("make_batch.not_shifted")
def no_bos(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in, tgt_out = pad_sequences(xs), pad_sequences(ys), pad_sequences(
        [[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("make_batch.no_eos")
def no_eos(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([y + [PAD] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("make_batch.tgt_mask_not_causal")
def padding_only_target_mask(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), padding_mask(tgt_in, PAD))


@wrong("make_batch.tgt_mask_from_source")
def target_mask_of_the_source(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(src, PAD))  # copy-paste


@wrong("make_batch.tgt_mask_no_padding")
def causal_only_target_mask(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), causal_mask(tgt_in.size(1)))


@wrong("make_batch.src_padding")
def no_source_mask(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    everything = torch.ones(src.size(0), 1, 1, src.size(1), dtype=torch.bool)
    return Batch(src, tgt_in, tgt_out, everything, target_mask(tgt_in, PAD))


@wrong("make_batch.polarity")
def source_mask_inverted(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, (src == PAD)[:, None, None], target_mask(tgt_in, PAD))


@wrong("make_batch.wrong_type")
def returns_a_tuple(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src, tgt_in = pad_sequences(xs), pad_sequences([[BOS, *y] for y in ys])
    return src, tgt_in


# -------------------------------------------------------------------- label_smoothing_loss


def _smoothed(logits, target, eps):
    q = torch.full_like(logits, eps / logits.size(-1))
    return q.scatter_add(-1, target.unsqueeze(-1), torch.full_like(q[..., :1], 1 - eps))


@wrong("label_smoothing_loss.log_of_softmax")
def log_of_softmax(logits, target, eps=0.1, pad_id=PAD):
    log_p = torch.log(F.softmax(logits, dim=-1))
    n = logits.size(-1)
    q = torch.full_like(log_p, eps / n)
    q.scatter_(-1, target.unsqueeze(-1), 1 - eps + eps / n)
    loss = -(q * log_p).sum(dim=-1)
    keep = target != pad_id
    return (loss * keep).sum() / keep.sum()


@wrong("label_smoothing_loss.counts_padding")
def mean_over_everything(logits, target, eps=0.1, pad_id=PAD):
    q = _smoothed(logits, target, eps)
    return -(q * F.log_softmax(logits, -1)).sum(-1).mean()


@wrong("label_smoothing_loss.counts_padding")
def padding_zeroed_but_counted(logits, target, eps=0.1, pad_id=PAD):
    q = _smoothed(logits, target, eps)
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return (loss * (target != pad_id)).sum() / target.numel()


@wrong("label_smoothing_loss.true_share_overwritten")
def scatter_overwrites_the_share(logits, target, eps=0.1, pad_id=PAD):
    q = torch.full_like(logits, eps / logits.size(-1))
    q.scatter_(-1, target.unsqueeze(-1), 1 - eps)
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.onto_true_class")
def eps_back_on_true_class(logits, target, eps=0.1, pad_id=PAD):
    one_hot = F.one_hot(target, logits.size(-1)).to(logits.dtype)
    q = one_hot * (1 - eps) + eps * one_hot
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.onto_padding")
def eps_onto_padding_class(logits, target, eps=0.1, pad_id=PAD):
    log_p = F.log_softmax(logits, -1)
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll - eps * log_p[..., pad_id]
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.onto_padding")
def smoothing_at_padding_positions(logits, target, eps=0.1, pad_id=PAD):
    log_p = F.log_softmax(logits, -1)
    keep = target != pad_id
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1) * keep
    smooth = -log_p.mean(-1)  # at every position, padding included
    return ((1 - eps) * nll + eps * smooth).sum() / keep.sum()


@wrong("label_smoothing_loss.other_classes_only")
def annotated_transformer_smoothing(logits, target, eps=0.1, pad_id=PAD):
    q = torch.full_like(logits, eps / (logits.size(-1) - 2))
    q.scatter_(-1, target.unsqueeze(-1), 1 - eps)
    q[..., pad_id] = 0
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.other_classes_only")
def smoothing_over_v_minus_1(logits, target, eps=0.1, pad_id=PAD):
    q = torch.full_like(logits, eps / (logits.size(-1) - 1))
    q.scatter_(-1, target.unsqueeze(-1), 1 - eps)
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.other_classes_only")
def smoothing_over_v_minus_1_summed(logits, target, eps=0.1, pad_id=PAD):  # a real wrong solution's
    n_class = logits.size(-1)
    pred, gold = logits.reshape(-1, n_class), target.reshape(-1)
    one_hot = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
    one_hot = one_hot * (1 - eps) + (1 - one_hot) * eps / (n_class - 1)
    loss = -(one_hot * F.log_softmax(pred, dim=1)).sum(dim=1)
    return loss.masked_select(gold.ne(pad_id)).sum()


@wrong("label_smoothing_loss.other_classes_only")
def annotated_smoothing_summed(logits, target, eps=0.1, pad_id=PAD):
    q = torch.full_like(logits, eps / (logits.size(-1) - 2))
    q.scatter_(-1, target.unsqueeze(-1), 1 - eps)
    q[..., pad_id] = 0
    q = q.masked_fill((target == pad_id).unsqueeze(-1), 0)
    return -(q * F.log_softmax(logits, -1)).sum()


@wrong("label_smoothing_loss.masses_off")
def smoothing_with_where_over_v_minus_2(logits, target, eps=0.1, pad_id=PAD):
    n_classes = logits.size(-1)
    is_true = torch.arange(n_classes) == target.unsqueeze(-1)
    q = torch.where(is_true, torch.tensor(1 - eps), torch.tensor(eps / (n_classes - 2)))
    real = target != pad_id
    return -(q * logits.log_softmax(-1)).sum(-1).masked_select(real).mean()


@wrong("label_smoothing_loss.masses_off")
def smoothing_true_part_one_minus_eps_over_v(logits, target, eps=0.1, pad_id=PAD):
    log_p = F.log_softmax(logits, dim=-1)
    nll = -log_p.gather(-1, target[..., None])[..., 0]
    smooth = -log_p.sum(-1) / logits.size(-1)
    loss = (1 - eps / logits.size(-1)) * nll + eps * smooth
    real = (target != pad_id).float()
    return (loss * real).sum() / real.sum()


@wrong("label_smoothing_loss.masses_off")
def smoothing_mean_not_scaled_by_eps(logits, target, eps=0.1, pad_id=PAD):
    log_p = F.log_softmax(logits, dim=-1)
    nll = -log_p.gather(-1, target[..., None])[..., 0]
    loss = (1 - eps) * nll - log_p.mean(-1)  # 1/V onto every class
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.wrong_count")
def smoothing_divided_by_length(logits, target, eps=0.1, pad_id=PAD):
    per_token = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    per_token = per_token.masked_fill(target == pad_id, 0.0)
    return per_token.sum() / target.shape[-1]


@wrong("label_smoothing_loss.summed")
def summed(logits, target, eps=0.1, pad_id=PAD):
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].sum()


@wrong("label_smoothing_loss.pad_id_ignored")
def padding_is_zero(logits, target, eps=0.1, pad_id=PAD):
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != 0].mean()


@wrong("label_smoothing_loss.builtin")
def builtin(logits, target, eps=0.1, pad_id=PAD):
    return F.cross_entropy(logits.flatten(0, -2), target.flatten(), label_smoothing=eps,
                           ignore_index=pad_id)


@wrong("label_smoothing_loss.no_gradient")
def detached(logits, target, eps=0.1, pad_id=PAD):
    logits = logits.detach()
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.in_place")
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


@wrong("noam_lr.precedence_half")
def minus_one_half(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model ** -1/2 * min(step ** -1/2, step * warmup ** -1.5)  # noqa: E225


@wrong("noam_lr.precedence_half")
def minus_three_halves(step, d_model, warmup):  # a real wrong solution's: (warmup ** -3) / 2
    if step < 1:
        raise ValueError("step must be >= 1")
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -3 / 2)  # noqa: E225


@wrong("noam_lr.precedence_half")
def every_power_over_two(step, d_model, warmup):
    scale, fall = d_model ** -1 / 2, step ** -1 / 2  # noqa: E225
    return scale * min(fall, step * warmup ** -3 / 2)


@wrong("noam_lr.not_a_float")
def rate_as_a_tensor(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    step = torch.tensor(float(step))
    return torch.rsqrt(torch.tensor(float(d_model))) * torch.minimum(
        torch.rsqrt(step), step * warmup ** -1.5)


@wrong("noam_lr.warmup_exponent")
def warmup_square_root(step, d_model, warmup):
    return _rate(step, d_model, warmup, warm=-0.5)


@wrong("noam_lr.warmup_exponent")
def warmup_positive_exponent(step, d_model, warmup):
    return _rate(step, d_model, warmup, warm=1.5)


@wrong("noam_lr.decay_exponent")
def decay_inverse(step, d_model, warmup):
    return _rate(step, d_model, warmup, decay=-1)


@wrong("noam_lr.max")
def maximum(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model**-0.5 * max(step**-0.5, step * warmup**-1.5)


@wrong("noam_lr.d_model_factor")
def no_d_model(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return min(step**-0.5, step * warmup**-1.5)


@wrong("noam_lr.d_model_factor")
def warmup_normalized(step, d_model, warmup):  # ESPnet's WarmupLR: a peak of 1
    if step < 1:
        raise ValueError("step must be >= 1")
    return warmup**0.5 * min(step**-0.5, step * warmup**-1.5)


@wrong("noam_lr.d_model_factor")
def peak_of_one(step, d_model, warmup):  # the same, the factor folded into each branch
    if step < 1:
        raise ValueError("step must be >= 1")
    return min(math.sqrt(warmup / step), step / warmup)


@wrong("noam_lr.step_zero")
def divides_by_zero_at_step_0(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@wrong("noam_lr.step_zero")
def clamps_step_0(step, d_model, warmup):
    step = max(step, 1)  # The Annotated Transformer's way: step 0 gets step 1's rate
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@wrong("noam_lr.step_zero")
def torch_rate(step, d_model, warmup):
    step = torch.tensor(float(step))
    return (d_model**-0.5 * torch.minimum(step**-0.5, step * warmup**-1.5)).item()  # inf at 0


@wrong("noam_lr.wrong_type")
def returns_none(step, d_model, warmup):
    d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@wrong("noam_lr.too_slow")
def endless(step, d_model, warmup):
    while True:
        time.sleep(0.01)


# -------------------------------------------------------------------------------- train_step


def _loss(model, batch, eps, ignore_index=PAD):
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), label_smoothing=eps,
                           ignore_index=ignore_index)


@wrong("train_step.not_zeroed")
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


@wrong("train_step.not_zeroed")
def zeroed_through_the_model_before_use(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                                        autocast_dtype=None):
    losses = [_loss(model, batch, label_smoothing) for batch in batches]
    (sum(losses) / len(losses)).backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    model.zero_grad  # noqa: B018  (forgot the call's parentheses)
    return sum(loss.item() for loss in losses) / len(losses)


@wrong("train_step.zeroed_each")
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


@wrong("train_step.token_weighted")
def weighted_by_tokens(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                       autocast_dtype=None):
    optimizer.zero_grad()
    n_tokens = sum(int((b.tgt_out != PAD).sum()) for b in batches)
    total = 0.0
    for batch in batches:
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), reduction="sum",
                               label_smoothing=label_smoothing, ignore_index=PAD)
        (loss / n_tokens).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / n_tokens


@wrong("train_step.not_divided")
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


@wrong("train_step.clip_zero")
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


@wrong("train_step.not_clipped")
def no_clipping(model, batches, optimizer, label_smoothing=0.1, clip=1.0, autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    optimizer.step()
    return total / len(batches)


@wrong("train_step.not_clipped")
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


@wrong("train_step.counts_padding")
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


@wrong("train_step.no_smoothing")
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


@wrong("train_step.no_step")
def no_optimizer_step(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                      autocast_dtype=None):
    optimizer.zero_grad()
    losses = [_loss(model, batch, label_smoothing) for batch in batches]
    (sum(losses) / len(losses)).backward()
    return sum(loss.item() for loss in losses) / len(losses)


@wrong("train_step.loss_tensor")
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


@wrong("train_step.wrong_loss")
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


@wrong("train_step.divided_twice")
def scaled_loss_averaged_again(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                               autocast_dtype=None):
    optimizer.zero_grad()
    scaled = []
    for batch in batches:
        loss = _loss(model, batch, label_smoothing) / len(batches)  # scaled for accumulation
        loss.backward()
        scaled.append(loss.item())
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return sum(scaled) / len(scaled)


@wrong("train_step.divided_twice")
def gradient_scaled_twice(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                          autocast_dtype=None):
    optimizer.zero_grad()
    n = len(batches)
    losses = [_loss(model, batch, label_smoothing) for batch in batches]
    sum(loss / n for loss in losses).div(n).backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return sum(loss.item() for loss in losses) / n


@wrong("train_step.raised")
def prints_then_raises(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                       autocast_dtype=None):
    for _ in range(10_000):
        print("step", math.pi)
    raise RuntimeError("element 0 of tensors does not require grad")


# Mistakes found by thinking like a learner


def _pairs_ids(pairs, vocab, swap=False):
    xs, ys = _ids(pairs, vocab)
    return (ys, xs) if swap else (xs, ys)


@wrong("make_batch.eos_in_input")
def eos_in_decoder_input(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src = pad_sequences(xs)
    tgt_in = pad_sequences([[BOS, *y, EOS] for y in ys])
    tgt_out = pad_sequences([[*y, EOS, PAD] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("make_batch.swapped")
def source_and_target_swapped(pairs, vocab):
    ys, xs = _ids(pairs, vocab)
    src = pad_sequences(xs)
    tgt_in, tgt_out = pad_sequences([[BOS, *y] for y in ys]), pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("make_batch.source_wrapped")
def source_with_eos(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src = pad_sequences([[*x, EOS] for x in xs])
    tgt_in, tgt_out = pad_sequences([[BOS, *y] for y in ys]), pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("label_smoothing_loss.mass_not_taken")
def one_hot_plus_eps(logits, target, eps=0.1, pad_id=PAD):
    q = F.one_hot(target, logits.size(-1)).to(logits.dtype) + eps / logits.size(-1)
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.mass_dropped")
def eps_dropped(logits, target, eps=0.1, pad_id=PAD):
    q = (1 - eps) * F.one_hot(target, logits.size(-1)).to(logits.dtype)
    loss = -(q * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.per_sentence")
def mean_of_sentence_means(logits, target, eps=0.1, pad_id=PAD):
    keep = (target != pad_id).to(logits.dtype)
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1) * keep
    return (loss.sum(-1) / keep.sum(-1)).mean()


@wrong("label_smoothing_loss.over_vocabulary")
def mean_over_everything_kept(logits, target, eps=0.1, pad_id=PAD):
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1))
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.sign")
def sign_flipped(logits, target, eps=0.1, pad_id=PAD):
    loss = (_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.no_log_softmax")
def logits_as_log_probabilities(logits, target, eps=0.1, pad_id=PAD):
    loss = -(_smoothed(logits, target, eps) * logits).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.log_softmax_axis")
def log_softmax_over_positions(logits, target, eps=0.1, pad_id=PAD):
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, 0)).sum(-1)
    return loss[target != pad_id].mean()


@wrong("noam_lr.warmup_parentheses")
def warmup_grouped(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model**-0.5 * min(step**-0.5, (step * warmup) ** -1.5)


@wrong("noam_lr.d_model_one_branch")
def d_model_on_decay_only(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return min(d_model**-0.5 * step**-0.5, step * warmup**-1.5)


@wrong("noam_lr.step_shifted")
def counts_from_zero(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    step += 1  # "the scheduler counts from 0"
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@wrong("noam_lr.step_shifted")
def warmup_ramp_from_zero(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model**-0.5 * min(step**-0.5, (step - 1) * warmup**-1.5)  # the ramp starts at 0


@wrong("noam_lr.step_shifted")
def zero_based_index_kept_positive(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    k = max(step - 1, 1)  # a 0-based step counter, kept away from 0
    return min(1 / math.sqrt(k), k / warmup / math.sqrt(warmup)) / math.sqrt(d_model)


def _step_with(model, batches, optimizer, label_smoothing, clip, per_batch=(), target="tgt_out"):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = F.cross_entropy(logits.flatten(0, 1), getattr(batch, target).flatten(),
                               label_smoothing=label_smoothing, ignore_index=PAD)
        (loss / len(batches)).backward()
        total += loss.item()
        if "clip" in per_batch and clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if "step" in per_batch:
            optimizer.step()
    if "clip" not in per_batch and clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    if "step" not in per_batch:
        optimizer.step()
    return total / len(batches)


@wrong("train_step.clipped_each")
def clipped_per_micro_batch(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                            autocast_dtype=None):
    return _step_with(model, batches, optimizer, label_smoothing, clip, per_batch=("clip",))


@wrong("train_step.stepped_each")
def stepped_per_micro_batch(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                            autocast_dtype=None):
    return _step_with(model, batches, optimizer, label_smoothing, clip, per_batch=("clip", "step"))


@wrong("train_step.stepped_each_unclipped")
def stepped_and_zeroed_per_micro_batch(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                                       autocast_dtype=None):
    optimizer.zero_grad()
    losses = []
    for batch in batches:
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                               label_smoothing=label_smoothing, ignore_index=PAD)
        (loss / len(batches)).backward()
        losses.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
    return sum(losses) / len(losses)


@wrong("train_step.wrong_target")
def loss_against_the_input(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                           autocast_dtype=None):
    return _step_with(model, batches, optimizer, label_smoothing, clip, target="tgt_in")


@wrong("make_batch.src_mask_shape")
def source_mask_2d(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src = pad_sequences(xs)
    tgt_in, tgt_out = pad_sequences([[BOS, *y] for y in ys]), pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, src != PAD, target_mask(tgt_in, PAD))


@wrong("make_batch.src_mask_from_target")
def source_mask_from_the_target(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src = pad_sequences(xs)
    tgt_in, tgt_out = pad_sequences([[BOS, *y] for y in ys]), pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(tgt_in, PAD), target_mask(tgt_in, PAD))


@wrong("label_smoothing_loss.eps_not_divided")
def eps_not_divided(logits, target, eps=0.1, pad_id=PAD):
    q = (1 - eps) * F.one_hot(target, logits.size(-1)).to(logits.dtype) + eps
    return -(q * F.log_softmax(logits, -1)).sum(-1)[target != pad_id].mean()


@wrong("label_smoothing_loss.one_hot_width")
def one_hot_without_num_classes(logits, target, eps=0.1, pad_id=PAD):
    q = (1 - eps) * F.one_hot(target).to(logits.dtype) + eps / logits.size(-1)
    return -(q * F.log_softmax(logits, -1)).sum(-1)[target != pad_id].mean()


@wrong("label_smoothing_loss.probabilities")
def probabilities_not_log(logits, target, eps=0.1, pad_id=PAD):
    return -(_smoothed(logits, target, eps) * F.softmax(logits, -1)).sum(-1)[target != pad_id].mean()


@wrong("label_smoothing_loss.divided_by_sentences")
def divided_by_the_batch(logits, target, eps=0.1, pad_id=PAD):
    loss = -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)
    return (loss * (target != pad_id)).sum() / (target.size(0) if target.dim() > 1 else 1)


@wrong("label_smoothing_loss.pad_logit_blocked")
def padding_never_predicted(logits, target, eps=0.1, pad_id=PAD):
    logits = logits.clone()
    logits[..., pad_id] = float("-inf")
    return -(_smoothed(logits, target, eps) * F.log_softmax(logits, -1)).sum(-1)[target != pad_id].mean()


@wrong("noam_lr.warmup_swapped")
def warmup_branch_swapped(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model**-0.5 * min(step**-0.5, warmup * step**-1.5)


@wrong("train_step.zeroed_at_end")
def zeroed_after_the_step(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                          autocast_dtype=None):
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    optimizer.zero_grad()
    return total / len(batches)


@wrong("train_step.clipped_by_value")
def clipped_by_value(model, batches, optimizer, label_smoothing=0.1, clip=1.0, autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        loss = _loss(model, batch, label_smoothing)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_value_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


@wrong("make_batch.in_out_swapped")
def input_and_target_swapped(pairs, vocab):
    xs, ys = _ids(pairs, vocab)
    src = pad_sequences(xs)
    tgt_in, tgt_out = pad_sequences([[*y, EOS] for y in ys]), pad_sequences([[BOS, *y] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("label_smoothing_loss.kl_divergence")
def kl_divergence(logits, target, eps=0.1, pad_id=PAD):
    keep = target != pad_id
    q = _smoothed(logits, target, eps)
    loss = F.kl_div(F.log_softmax(logits, -1), q, reduction="none").sum(-1)
    return loss[keep].sum() / keep.sum()


@wrong("label_smoothing_loss.kl_divergence")
def annotated_kl_divergence_over_v_minus_2(logits, target, eps=0.1, pad_id=PAD):
    # the Annotated Transformer's LabelSmoothing: eps / (V - 2), padding's column zeroed, KL
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1).reshape(-1, V)
    t = target.reshape(-1)
    true_dist = torch.full_like(log_p, eps / (V - 2))
    true_dist.scatter_(1, t.unsqueeze(1), 1.0 - eps)
    true_dist[:, pad_id] = 0
    true_dist[t == pad_id] = 0
    kl = F.kl_div(log_p, true_dist, reduction="sum")
    return kl / (t != pad_id).sum()


@wrong("label_smoothing_loss.kl_divergence")
def kl_divergence_over_v_minus_1(logits, target, eps=0.1, pad_id=PAD):
    V = logits.size(-1)
    q = torch.full_like(logits, eps / (V - 1)).scatter(-1, target[..., None], 1 - eps)
    per_token = (torch.xlogy(q, q) - q * logits.log_softmax(-1)).sum(-1)
    return per_token[target != pad_id].mean()


@wrong("train_step.not_flattened")
def logits_not_flattened(model, batches, optimizer, label_smoothing=0.1, clip=1.0,
                         autocast_dtype=None):
    optimizer.zero_grad()
    total = 0.0
    for batch in batches:
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = F.cross_entropy(logits, batch.tgt_out, label_smoothing=label_smoothing,
                               ignore_index=PAD)
        (loss / len(batches)).backward()
        total += loss.item()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return total / len(batches)


@wrong("make_batch.sliced_from_padded")
def sliced_after_padding(pairs, vocab):
    """The Annotated Transformer's Batch: BOS y EOS padded together, then sliced by column."""
    xs, ys = _ids(pairs, vocab)
    src = pad_sequences(xs)
    tgt = pad_sequences([[BOS, *y, EOS] for y in ys])
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("noam_lr.scaled_by_warmup")
def warmup_in_front(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return warmup**-0.5 * min(step**-0.5, step * warmup**-1.5)


# ---------------------------------------------------------------------------------------
# Other libraries' conventions


@wrong("make_batch.eos_first")
def batch_fairseq_prev_output_tokens(pairs, vocab):
    # fairseq: prev_output_tokens is the target rolled right, with EOS moved to the front
    src = pad_sequences([vocab.encode(s) for s, _ in pairs])
    tgt_out = pad_sequences([vocab.encode(t) + [EOS] for _, t in pairs])
    tgt_in = pad_sequences([[EOS] + vocab.encode(t) for _, t in pairs])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("make_batch.hf_mask")
def batch_hugging_face_attention_mask(pairs, vocab):
    src = pad_sequences([vocab.encode(s) for s, _ in pairs])
    ys = [vocab.encode(t) for _, t in pairs]
    tgt_in, tgt_out = pad_sequences([[BOS] + y for y in ys]), pad_sequences([y + [EOS] for y in ys])
    attention_mask = (src != PAD).long()  # (batch, src_len), 1 = attend
    return Batch(src, tgt_in, tgt_out, attention_mask, target_mask(tgt_in, PAD))


@wrong("make_batch.hf_mask")
def batch_integer_mask(pairs, vocab):
    src = pad_sequences([vocab.encode(s) for s, _ in pairs])
    ys = [vocab.encode(t) for _, t in pairs]
    tgt_in, tgt_out = pad_sequences([[BOS] + y for y in ys]), pad_sequences([y + [EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD).int(), target_mask(tgt_in, PAD))


@wrong("make_batch.wrong_dtype")
def batch_additive_mask(pairs, vocab):  # the float mask of nn.MultiheadAttention
    src = pad_sequences([vocab.encode(s) for s, _ in pairs])
    ys = [vocab.encode(t) for _, t in pairs]
    tgt_in, tgt_out = pad_sequences([[BOS] + y for y in ys]), pad_sequences([y + [EOS] for y in ys])
    src_mask = torch.zeros(src.shape).masked_fill(src == PAD, float("-inf"))[:, None, None]
    return Batch(src, tgt_in, tgt_out, src_mask, target_mask(tgt_in, PAD))


@wrong("label_smoothing_loss.probabilities_clipped")
def keras_clipped(logits, target, eps, pad_id):
    p = torch.softmax(logits, dim=-1).clamp(1e-7, 1 - 1e-7)  # K.epsilon()
    q = torch.full_like(p, eps / logits.size(-1))
    q = q.scatter_add(-1, target.unsqueeze(-1), torch.full_like(p[..., :1], 1 - eps))
    loss = -(q * p.log()).sum(-1)
    return loss[target != pad_id].mean()


@wrong("label_smoothing_loss.probabilities_clipped")
def epsilon_inside_log(logits, target, eps, pad_id):
    log_p = torch.log(F.softmax(logits, dim=-1) + 1e-9)
    n = logits.size(-1)
    q = torch.full_like(log_p, eps / n).scatter(-1, target[..., None], 1 - eps + eps / n)
    keep = target != pad_id
    return -(q * log_p).sum(-1)[keep].sum() / keep.sum()


@wrong("noam_lr.step_one_refused")
def refuses_step_one(step, d_model, warmup):
    if step <= 1:
        raise ValueError(f"step must be >= 1, got {step}")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@wrong("label_smoothing_loss.log_of_softmax")
def log_sum_exp_by_hand(logits, target, eps, pad_id):
    log_p = logits - torch.log(torch.exp(logits).sum(-1, keepdim=True))  # no max subtracted
    q = torch.full_like(log_p, eps / logits.size(-1))
    q = q.scatter_add(-1, target.unsqueeze(-1), torch.full_like(q[..., :1], 1.0 - eps))
    return -(q * log_p).sum(-1)[target != pad_id].mean()


@wrong("make_batch.eos_first")
def decoder_starts_with_pad(pairs, vocab):
    src = pad_sequences([vocab.encode(s) for s, _ in pairs])
    ys = [vocab.encode(t) for _, t in pairs]
    tgt_in = pad_sequences([[PAD, *y] for y in ys])  # T5's decoder_start_token_id
    tgt_out = pad_sequences([[*y, EOS] for y in ys])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("make_batch.sliced_from_padded")
def shift_tokens_right_of_padded_labels(pairs, vocab):
    src = pad_sequences([vocab.encode(s) for s, _ in pairs])
    labels = pad_sequences([[*vocab.encode(t), EOS] for _, t in pairs])
    start = torch.full((labels.size(0), 1), PAD, dtype=torch.long)  # decoder_start_token_id
    tgt_in = torch.cat([start, labels[:, :-1]], dim=1)
    return Batch(src, tgt_in, labels, padding_mask(src, PAD), target_mask(tgt_in, PAD))


@wrong("label_smoothing_loss.low_precision_loss")
def loss_in_the_logits_dtype(logits, target, eps, pad_id):
    log_p = F.log_softmax(logits, dim=-1)  # bfloat16 logits: a bfloat16 loss
    q = torch.full_like(log_p, eps / logits.size(-1))
    q = q.scatter_add(-1, target.unsqueeze(-1), torch.full_like(q[..., :1], 1 - eps))
    return -(q * log_p).sum(-1)[target != pad_id].mean()
