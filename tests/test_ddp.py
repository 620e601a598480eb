"""The training loop under torchrun: 2 CPU processes (gloo) with DistributedDataParallel."""

import os
import socket
import subprocess
import sys

import torch

from tfcourse.data import copy_task
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.training import TrainConfig, train

CONFIG = dict(steps=4, batch_size=8, warmup=2, lr=0.5, eval_every=0, eval_size=16)

# Each of the 2 processes runs this, the same code as a single process would.
WORKER = f"""
import os, sys
import torch
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_ddp import CONFIG, TrainConfig, setup, train

task, model = setup()
train(model, task, TrainConfig(**CONFIG, accum_steps=2), device="cpu", progress=False)
torch.save(model.state_dict(), os.path.join(sys.argv[1], f"rank{{os.environ['RANK']}}.pt"))
from tfcourse.device import leave_torchrun_process
leave_torchrun_process()
"""


def setup():
    task = copy_task(seed=0, n_train=512, n_val=16, n_test=16)
    torch.manual_seed(0)
    return task, Transformer(TransformerConfig.tiny(len(task.vocab), dropout=0.0))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flat(state):
    return torch.cat([t.flatten() for t in state.values()])


def test_two_processes_equal_one_with_twice_the_accumulation(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               str(script), str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    replicas = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for name, tensor in replicas[0].items():  # DDP keeps the replicas identical, bit for bit
        assert torch.equal(tensor, replicas[1][name]), name

    # One process accumulating 4 micro-batches of 8 sees the same 32 examples per step.
    task, model = setup()
    start = flat(model.state_dict()).clone()
    train(model, task, TrainConfig(**CONFIG, accum_steps=4), device="cpu", progress=False)
    single, ddp = flat(model.state_dict()), flat(replicas[0])
    # Adam turns rounding differences in near-zero gradients into small updates: compare
    # the difference with how far training moved the weights (other examples give ~1).
    assert (ddp - single).norm() < 1e-2 * (single - start).norm()
