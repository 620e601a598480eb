"""The course's Llama-style model against transformers' LlamaForCausalLM on a CPU: the same
config and the same weights (tfcourse.hf.to_transformers), fused attention on both sides
(attn_impl="sdpa", attn_implementation="sdpa"), float32, no dropout. The rows are in run.py.

    step:      a training step (forward, cross-entropy, backward, AdamW step) on 8 x 128
               tokens: training tokens per CPU second
    generate:  greedy generation with the key/value cache, 1 sequence, a 16-token prompt
               then 128 new tokens: new tokens per CPU second (tfcourse.decoding.lm_generate
               against generate(do_sample=False)); both make the same tokens
    llama_gpt: the course's Llama step against its own GPT block (chapter 09's DecoderLM)
               at the same size: training tokens per CPU second

Sizes (vocabulary 1,024, as a BPE model's): "tiny" LlamaConfig.tiny (d_model 64, 2 layers,
0.2M parameters), "1M" the lm-llama recipe's block (d_model 128, 4 layers), "10M" d_model 384,
6 layers, 6 query and 2 key/value heads, SwiGLU 1,024 wide (10.2M). Each side runs with
`threads` torch threads; CPU time is process time, all threads summed, so that another
program on the machine slows the wall clock more than the count; the two sides run in turn,
five times, and each keeps its least time; a training run is STEPS[size] steps (8 of the
tiny model's: a run of 2 took 0.04 s, and its ratio moved by 5% from one pair to the next).
"""

import time

import torch
import torch.nn.functional as F

from tfcourse.decoding import lm_generate
from tfcourse.modern import LlamaConfig, LlamaLM
from tfcourse.variants import DecoderLM, DecoderLMConfig

VOCAB, BATCH, SEQ, PROMPT, NEW = 1024, 8, 128, 16, 128
SIZES = {
    "tiny": {},
    "1M": dict(d_model=128, n_heads=4, n_kv_heads=2, d_ff=392, n_layers=4),
    "10M": dict(d_model=384, n_heads=6, n_kv_heads=2, d_ff=1024, n_layers=6),
}
STEPS = {"tiny": 8, "1M": 2, "10M": 2}  # training steps per run: 0.15 s or more on one thread


def llama(size, seed=0):
    torch.manual_seed(seed)
    return LlamaLM(LlamaConfig.tiny(VOCAB, max_len=SEQ + 2 * NEW, attn_impl="sdpa",
                                    **SIZES[size]))


def _pair(size, seed):
    """(ours, theirs): the course's model and LlamaForCausalLM with its weights."""
    from tfcourse.hf import to_transformers

    ours = llama(size, seed)
    theirs = to_transformers(ours)
    theirs.config._attn_implementation = "sdpa"
    return ours, theirs


def _cpu_seconds(runs, threads, repeats=5):
    """The CPU seconds of each of ``runs`` (functions): each run once to warm up, then all of
    them in turn ``repeats`` times, the least time of each (on a shared machine the others'
    programs only ever add time)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        best = [float("inf")] * len(runs)
        for run in runs:
            run()
        for _ in range(repeats):
            for i, run in enumerate(runs):
                start = time.process_time()
                run()
                best[i] = min(best[i], time.process_time() - start)
        return best
    finally:
        torch.set_num_threads(previous)


def _steps(model, tokens, logits_of, steps):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def run():
        for _ in range(steps):
            logits = logits_of(model, tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return run


def _tokens(seed):
    return torch.randint(4, VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(seed))


def step_pair(seed, size, threads, steps=None):
    """Training tokens per CPU second: the course's LlamaLM, then LlamaForCausalLM."""
    ours, theirs = _pair(size, seed)
    tokens, steps = _tokens(seed), steps or STEPS[size]
    runs = [_steps(ours, tokens, lambda m, x: m(x), steps),
            _steps(theirs, tokens, lambda m, x: m(x).logits, steps)]
    return [steps * BATCH * SEQ / t for t in _cpu_seconds(runs, threads)]


def generate_pair(seed, size, threads):
    """New tokens per CPU second of greedy cached generation: LlamaLM (lm_generate), then
    LlamaForCausalLM (generate); the two must make the same tokens."""
    ours, theirs = _pair(size, seed)
    ours.eval(), theirs.eval()
    prompt = _tokens(seed)[:1, :PROMPT]
    made = []

    @torch.no_grad()
    def run_ours():
        made.append(lm_generate(ours, prompt, NEW, never=range(4)))

    @torch.no_grad()
    def run_theirs():
        made.append(theirs.generate(prompt, max_new_tokens=NEW, do_sample=False))

    results = [NEW / t for t in _cpu_seconds([run_ours, run_theirs], threads)]
    assert torch.equal(made[0], made[-1]), "the two models made different tokens"
    return results


def llama_gpt_pair(seed, size, threads, steps=None):
    """Training tokens per CPU second: the course's LlamaLM, then its GPT block (DecoderLM,
    learned positions, GELU FFN 4 d_model wide, the same d_model, heads and layers)."""
    ours = llama(size, seed)
    c = ours.config
    torch.manual_seed(seed)
    gpt = DecoderLM(DecoderLMConfig.tiny(VOCAB, d_model=c.d_model, n_heads=c.n_heads,
                                         d_ff=4 * c.d_model, n_layers=c.n_layers, dropout=0.0,
                                         max_len=SEQ, attn_impl="sdpa"))
    tokens, steps = _tokens(seed), steps or STEPS[size]
    runs = [_steps(model, tokens, lambda m, x: m(x), steps) for model in (ours, gpt)]
    return [steps * BATCH * SEQ / t for t in _cpu_seconds(runs, threads)]
