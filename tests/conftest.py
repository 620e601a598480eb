import os

# The tests use tiny tensors, for which one thread is fastest, and they must not crawl when
# the machine is busy. Notebook kernels and subprocesses started by the tests inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
