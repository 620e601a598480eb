"""Exercise 07: training. A batch for teacher forcing, the label-smoothing loss, the paper's
learning-rate schedule, and one training step with gradient accumulation.

Fill in the four functions below, then check them from the repository's root:

    pytest exercises/test_ex07_training.py

or from a notebook:

    from tfcourse.checking import check
    check("ex07_training")

The checks need no long training: train_step takes two steps of plain SGD on a small
random Transformer, so every mistake moves the weights somewhere recognisable.
"""

import math  # noqa: F401  (you will likely need these)

import torch  # noqa: F401
import torch.nn.functional as F  # noqa: F401

from tfcourse.batches import Batch, pad_sequences  # noqa: F401  (as notebook 07 imports them)
from tfcourse.masks import padding_mask, target_mask  # noqa: F401
from tfcourse.vocab import BOS, EOS, PAD  # noqa: F401


def make_batch(pairs, vocab):
    """(source, target) strings -> a Batch for teacher forcing.

    Args:
        pairs: a list of (source, target) strings, e.g. [("May 3, 1999", "1999-05-03"), ...]
        vocab: a tfcourse.vocab.Vocab; vocab.encode(text) gives one id per character and
            nothing more: no BOS, no EOS (you add them where they belong)

    Returns:
        Batch(src, tgt_in, tgt_out, src_mask, tgt_mask) with
        src      (batch, src_len)  the sources' ids, x_1 ... x_m (no BOS, no EOS: the
                                   encoder reads the whole source at once), padded
                                   with PAD on the right
        tgt_in   (batch, tgt_len)  what the decoder reads:  BOS y_1 ... y_n, padded
        tgt_out  (batch, tgt_len)  what it must predict:    y_1 ... y_n EOS, padded
        src_mask (batch, 1, 1, src_len)        True at real source tokens
        tgt_mask (batch, 1, tgt_len, tgt_len)  causal and not padding

    Hints:
        1. pad_sequences(list_of_id_lists) pads them into one LongTensor.
        2. At position t the decoder has read BOS y_1 ... y_t (the causal mask hides the
           rest) and must predict y_(t+1): tgt_out is tgt_in moved one step to the left.
           What is the last thing it must predict?
        3. padding_mask and target_mask (tfcourse.masks) build the masks from ids.
    """
    raise NotImplementedError


def label_smoothing_loss(logits, target, eps=0.1, pad_id=PAD):
    """Cross entropy against smoothed targets, averaged over the non-padding targets:

        q = (1 - eps) * one_hot(target) + eps / V        (V = logits.size(-1))
        loss = mean over positions where target != pad_id of  -sum_v q_v * log p_v

    with p = softmax(logits). It equals F.cross_entropy(logits.flatten(0, -2),
    target.flatten(), label_smoothing=eps, ignore_index=pad_id), but write it yourself
    (without F.cross_entropy).

    Args:
        logits: (..., V) floats, e.g. (batch, tgt_len, V)
        target: (...) ids, e.g. (batch, tgt_len); pad_id marks padding

    Returns:
        a 0-d tensor (keep it in torch: training backpropagates through it), float32 at
        least: compute float16 and bfloat16 logits in float32 (mixed precision's rule for
        losses).

    Hints:
        1. F.log_softmax(logits, dim=-1) is log p, computed stably.
        2. Build q with torch.full(...) and scatter (or F.one_hot). Where does the eps go?
        3. Which positions count, and what do you divide by?
        4. Write it yourself: no F.cross_entropy (use it afterwards, to check yours).
    """
    raise NotImplementedError


def noam_lr(step, d_model, warmup):
    """The paper's learning rate (section 5.3, eq. 3):

        lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

    Args:
        step: the training step, counting from 1 as in the paper
        d_model, warmup: the model width and the number of warmup steps

    Returns:
        the learning rate, a float. For step < 1 raise a ValueError: the formula divides
        by zero at step 0 (and a scheduler counting from 0 must pass step + 1).
    """
    raise NotImplementedError


def train_step(model, batches, optimizer, label_smoothing=0.1, clip=1.0, autocast_dtype=None):
    """One optimizer step on the micro-batches `batches` (gradient accumulation).

    Args:
        model: a Transformer: model(src, tgt_in, src_mask, tgt_mask) -> logits
        batches: a list of Batch (make_batch), whose gradients make ONE step together
        optimizer: e.g. torch.optim.Adam(model.parameters())
        label_smoothing: eps of the loss
        clip: clip the gradients' total norm to this; 0 means no clipping
        autocast_dtype: None (the checks), or torch.bfloat16 to run the forward pass in
            mixed precision on a GPU: with torch.autocast(device_type, dtype=autocast_dtype,
            enabled=autocast_dtype is not None)

    Returns:
        the mean of the micro-batches' losses, as a Python float.

    Hints:
        1. .backward() ADDS to every parameter's .grad. When must they be set to zero?
        2. For each micro-batch: logits, then the loss (your label_smoothing_loss, or
           F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
           label_smoothing=label_smoothing, ignore_index=PAD), which is equal); backpropagate
           it so that the accumulated gradient is the MEAN over the micro-batches.
        3. Clip (torch.nn.utils.clip_grad_norm_) after the backward passes, before
           optimizer.step().
    """
    raise NotImplementedError
