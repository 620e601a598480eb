"""Chapter 13's bfloat16 row: training a Llama-style LM on the CPU under bfloat16 autocast
(torch.autocast("cpu", torch.bfloat16): the matrix products in bfloat16, the weights, their
gradients and Adam's state in float32) against float32, the same steps on the same batches:
CPU seconds per step and the held-out loss after them.

Whether it pays depends on the CPU and the size: with native bfloat16 instructions
(AVX-512 BF16, AMX) the matrix products get faster once they are large enough to dominate;
at d_model 64 the casts cost more than the products save, and a CPU without such
instructions emulates bfloat16 (slower at every size). run.py prints the CPU's name.
"""

import time

import modern
import torch

from tfcourse.training import train_step

WARM = 2  # steps not timed: the first calls of a dtype's kernels


def _size(d_model):
    """The tiny Llama LM at width d_model: 4 heads, 2 key/value heads, SwiGLU ~2.75 x wide."""
    return dict(d_model=d_model, d_ff=int(2.75 * d_model) // 2 * 2)


def bf16_pair(seed, d_model=64, steps=60, batch_size=16):
    """(CPU seconds per step, held-out nats/char after `steps` steps): bfloat16 autocast,
    then float32, the same initial weights and batches (Adam at lr 3e-3, no schedule)."""
    task = modern._task()
    results = []
    for dtype in (torch.bfloat16, None):
        model = modern._model("llama", seed, **_size(d_model))
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, fused=True)
        g = torch.Generator().manual_seed(seed)
        model.train()
        seconds = 0.0
        for step in range(steps):
            drawn = torch.randint(len(task.train), (batch_size,), generator=g).tolist()
            batch = task.make_batch([task.train[i] for i in drawn])
            start = time.process_time()
            train_step(model, [batch], optimizer, 0.0, 1.0, dtype)
            seconds += (time.process_time() - start) * (step >= WARM)
        loss = task.evaluate(model, task.val[:100])
        name = "bfloat16" if dtype else "float32"
        print(f"    {name}, d_model {d_model}: {seconds / (steps - WARM) * 1e3:.0f} ms/step "
              f"(CPU), held-out loss {loss:.3f}", flush=True)
        results.append((seconds / (steps - WARM), loss))
    return results
