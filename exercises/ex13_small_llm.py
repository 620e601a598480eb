"""Exercise 13: today's training recipe, each part by hand, and text streamed through the
tokenizer. One AdamW update (decoupled weight decay, bias correction), the cosine schedule
with warm-up and a floor, clipping by the global gradient norm, the parameter groups that say
which weights decay, and a stream that turns ids into text as they come.

Fill in the five items below, then check them from the repository's root:

    pytest exercises/test_ex13_small_llm.py
    pytest exercises/test_ex13_small_llm.py -k TextStream     (one item)

or from a notebook:

    from tfcourse.checking import check
    check("ex13_small_llm")
"""

import codecs  # noqa: F401  (you will likely need these)
import math  # noqa: F401

import torch  # noqa: F401
from torch import nn  # noqa: F401

PAD, BOS, EOS, UNK = 0, 1, 2, 3  # the special ids of every tokenizer of the course


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
               weight_decay=1e-2):
    """One AdamW update of one parameter (Loshchilov & Hutter 2019; torch.optim.AdamW):

        param      <- param - lr * weight_decay * param          (decoupled weight decay)
        exp_avg    <- beta1 * exp_avg + (1 - beta1) * grad                 (m)
        exp_avg_sq <- beta2 * exp_avg_sq + (1 - beta2) * grad^2            (v)
        param      <- param - lr * m_hat / (sqrt(v_hat) + eps)
                      m_hat = m / (1 - beta1^step),  v_hat = v / (1 - beta2^step)

    step counts from 1 (this update's number). Returns (param, exp_avg, exp_avg_sq), new
    tensors in param's dtype; leave the inputs as they are.

    Hints:
        1. Which weight does the decay shrink: the one before this update, or after?
        2. At step 1, m and v start at 0: what are m_hat and v_hat then?
        3. Where does eps go: under the square root, or after it?
    """
    raise NotImplementedError


def cosine_lr(step, warmup, total_steps, min_ratio=0.0):
    """The learning-rate factor at ``step`` (counting from 1): a linear warm-up to 1 over
    ``warmup`` steps, then half a cosine down to the floor ``min_ratio`` at ``total_steps``,
    and the floor after it:

        step / warmup                                             step <= warmup
        r + (1 - r) * (1 + cos(pi * progress)) / 2                after, r = min_ratio
        progress = (step - warmup) / (total_steps - warmup), at most 1

    Returns a Python float.

    Hints:
        1. What is the factor at step 1? It must not be 0: that update would be wasted.
        2. Past total_steps, where does cos(pi * progress) go if progress keeps growing?
        3. warmup may be 0, and may equal total_steps.
    """
    raise NotImplementedError


def clip_grad_norm(parameters, max_norm):
    """Scale every gradient of ``parameters`` (a list of tensors; some may have no .grad)
    in place, by one factor, so that the norm of all of them together is at most max_norm:

        n = sqrt(sum of |g|^2 over every gradient g)        g <- g * min(1, max_norm / (n + 1e-6))

    Returns n, the norm before clipping (a 0-d tensor), as torch.nn.utils.clip_grad_norm_.

    Hints:
        1. One norm for all the gradients, not one per tensor.
        2. What happens to gradients whose norm is already below max_norm?
    """
    raise NotImplementedError


def param_groups(model, weight_decay):
    """Two parameter groups for an optimizer, as a list of two dicts:

        [{"params": [...], "weight_decay": weight_decay},   the weights of nn.Linear layers
         {"params": [...], "weight_decay": 0.0}]            everything else

    Norms' gains, biases and embedding tables (nn.Embedding's weight, also when the output
    layer shares it) do not decay. Every parameter that requires a gradient is in exactly one
    group, once.

    Hints:
        1. model.modules() tells each parameter's layer; model.parameters() lists each
           tensor once.
        2. A tied output layer is an nn.Linear whose weight IS the embedding's.
    """
    raise NotImplementedError


class TextStream:
    """Ids -> text as a model draws them, for printing while it samples (notebook 13,
    section 10). ``tokenizer`` has token(i) -> the bytes of id i, and decode(ids) -> text.

        stream = TextStream(tokenizer)
        for i in ids:
            print(stream.push(i), end="")
        print(stream.end())

    push(i) returns the text that id i completes, a str ('' when there is none yet): a
    byte-level token holds bytes, not characters, and a character of 2, 3 or 4 bytes in UTF-8
    ('é', '日', '😀') may be cut between tokens, or a token may hold the end of one character
    and the start of the next. Hold back the bytes of an unfinished character until the token
    that completes it, and return every character as soon as its last byte has come. Bytes
    that no character can start or continue (0xff; a continuation byte with nothing before
    it) are U+FFFD, '\ufffd', where they come.

    end() returns the rest: '' when nothing is held, U+FFFD for the bytes of a character the
    ids never finish. Joined, the pieces are tokenizer.decode(ids) (chapter 11's decode:
    U+FFFD where the bytes are no text).

    Special ids: PAD and BOS give ''; EOS ends the text: it gives '', and so does every push
    after it; UNK is shown as tokenizer.decode([UNK]) shows it. ``shown``: bytes the text on
    the screen shows already (token healing backs up the prompt's last token, and the first
    new tokens start with its bytes): skip that many bytes of the first tokens' bytes.

    Every stream keeps its own state: two can be used at once.

    Hints:
        1. How many bytes does a character take? Its first byte says: 0xxxxxxx is one,
           110xxxxx two, 1110xxxx three, 11110xxx four; each byte after it is 10xxxxxx.
        2. Python's codecs module has a decoder that keeps an unfinished character's bytes
           between calls: codecs.getincrementaldecoder("utf-8")(errors=...).
        3. Print tokenizer.decode([i]) for each id of '日': why is that not a stream?
    """

    def __init__(self, tokenizer, shown=b""):
        raise NotImplementedError

    def push(self, i):
        raise NotImplementedError

    def end(self):
        raise NotImplementedError
