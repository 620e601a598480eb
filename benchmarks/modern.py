"""Chapter 12's rows: Llama's block against chapter 09's GPT block on the lm task, each of its
changes alone, and held-out loss past the trained length. The rows are in run.py
(BENCHMARKS); ``train(model, task, seed, seconds=..., steps=...)`` is its _train_lm with the
tiny LM's settings (warmup, then the peak rate).

Both models are at the size of the tiny LM rows (d_model 64, 2 layers, 4 heads, no dropout,
fused attention): DecoderLMConfig.tiny, 110,720 parameters, and LlamaConfig.tiny with 2
key/value heads and SwiGLU 206 wide, 110,528 parameters (the 2/3 rule gives 170 for the
FFN's 256; the saved key/value heads and position table pay for the rest). They train on the
same windows of 64 characters (the lm recipe's) from the same seed and are judged on the
same 100 validation windows.
"""

import functools
import time

import torch
from torch import nn

from tfcourse.corpora import lm_task
from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.modern import LlamaConfig, LlamaLM
from tfcourse.normalization import LayerNorm
from tfcourse.recipes import LM_CONTEXT
from tfcourse.variants import DecoderLM, DecoderLMConfig

STEPS = 600  # each change alone: steps, the same for both sides
EXTRAPOLATE = 256  # positions read at test time, 4 times the 64 trained
_BLOCK = dict(dropout=0.0, attn_impl="sdpa", max_len=LM_CONTEXT)


@functools.cache
def _task(block_size=LM_CONTEXT):
    return lm_task(seed=0, block_size=block_size)


def _model(kind, seed, **overrides):
    """The tiny GPT ("lm") or Llama ("llama", SwiGLU 206 wide) model, weights from `seed`."""
    torch.manual_seed(seed)
    vocab = len(_task().vocab)
    if kind == "lm":
        return DecoderLM(DecoderLMConfig.tiny(vocab, **_BLOCK, **overrides))
    return LlamaLM(LlamaConfig.tiny(vocab, **{**_BLOCK, "d_ff": 206, **overrides}))


def _xavier(module):
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
    return module


def _variant(change, seed):
    """The Llama model with one of its changes undone (GPT's part back), at its parameters
    (within 0.5%): "scaled" (the token vectors multiplied by sqrt(d_model), as GPT's and
    Gemma's), "layernorm" (LayerNorm for each RMSNorm), "gelu" (the GELU FFN, 306 wide, for
    SwiGLU 206 wide), "learned" (learned positions added to the input for RoPE, with the
    sqrt(d_model) scale added positions need; SwiGLU 195 wide: compared with "scaled", so
    that only the positions differ), "mha" (4 key/value heads for 2; SwiGLU 185 wide)."""
    if change == "scaled":
        model = _model("llama", seed)
        model.embed.scale = model.config.d_model**0.5
        return model
    if change == "learned":
        return _model("llama", seed, positions="learned", d_ff=195)
    if change == "mha":
        return _model("llama", seed, n_kv_heads=4, d_ff=185)
    model = _model("llama", seed)
    torch.manual_seed(seed)
    d = model.config.d_model
    for layer in model.layers:
        if change == "layernorm":
            for sublayer in layer.sublayers:
                sublayer.norm = LayerNorm(d)
        else:
            layer.feed_forward = _xavier(PositionWiseFeedForward(d, 306, 0.0, "gelu"))
    if change == "layernorm":
        model.norm = LayerNorm(d)
    return model


def _report(name, model, loss, steps, seconds):
    n = sum(p.numel() for p in model.parameters())
    print(f"    {name}: {n:,} parameters, {steps} steps in {seconds:.0f} CPU s, held-out loss "
          f"{loss:.3f}", flush=True)


def _trained(model, train, seed, name, seconds=None, steps=None):
    task = _task()
    start = time.process_time()
    done = train(model, task, seed, seconds=seconds, steps=steps)
    loss = task.evaluate(model, task.val[:100])
    _report(name, model, loss, done, time.process_time() - start)
    return loss, done


def llama_pair(seed, train, seconds=60.0):
    """(held-out loss in nats/char, steps) after `seconds` of training (CPU time, as
    `train` counts it): Llama, then GPT."""
    return [_trained(_model(kind, seed), train, seed, kind, seconds=seconds)
            for kind in ("llama", "lm")]


@functools.cache
def _llama_at_steps(seed, train):
    return _trained(_model("llama", seed), train, seed, "llama", steps=STEPS)[0]


def steps_pair(seed, train):
    """Held-out loss after STEPS steps (not seconds): Llama, then GPT."""
    return [_llama_at_steps(seed, train),
            _trained(_model("lm", seed), train, seed, "lm", steps=STEPS)[0]]


@functools.cache
def _changed_at_steps(seed, train, change):
    return _trained(_variant(change, seed), train, seed, f"without: {change}", steps=STEPS)[0]


def change_pair(seed, train, change):
    """Held-out loss after STEPS steps: Llama, then Llama with `change` undone. The learned
    positions come with the sqrt(d) scale: their base is the Llama block with that scale."""
    base = (_changed_at_steps(seed, train, "scaled") if change == "learned"
            else _llama_at_steps(seed, train))
    return [base, _changed_at_steps(seed, train, change)]


@functools.cache
def _beyond(seed, train, positions):
    """(loss at positions 0-63, loss at 64-255) on validation windows of 256 characters, of
    the Llama model with `positions` ("rotary", "learned" or "sinusoidal") trained STEPS steps
    on windows of 64 (max_len 256: the learned table's positions 64-255 never train)."""
    model = _model("llama", seed, positions=positions, max_len=EXTRAPOLATE)
    _trained(model, train, seed, positions, steps=STEPS)
    long = _task(EXTRAPOLATE)
    by_position = long.loss_by_position(model.eval(), long.val[:25])  # (256,)
    inside, beyond = by_position[:LM_CONTEXT].mean().item(), by_position[LM_CONTEXT:].mean().item()
    print(f"    {positions}: held-out loss {inside:.3f} at positions 0-63, {beyond:.3f} at "
          f"64-255", flush=True)
    return inside, beyond


def beyond_pair(seed, train, other):
    """Held-out loss beyond the trained length: RoPE, then `other` positions."""
    return [_beyond(seed, train, "rotary"), _beyond(seed, train, other)]
