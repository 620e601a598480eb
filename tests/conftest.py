import os

# The tests use tiny tensors, for which one thread is fastest, and they must not crawl when
# the machine is busy. Notebook kernels and subprocesses started by the tests inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(autouse=True)
def short_time_limit(monkeypatch):
    """Learner code gets 2 s a call in the meta-tests (10 s for learners): the endless-loop
    solutions finish fast, and a correct one is never too slow, even on a busy machine."""
    from tfcourse.checking import sandbox

    monkeypatch.setattr(sandbox, "TIME_LIMIT", 2.0)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (minutes each: e.g. retraining the "
                     "pre-trained encoder tfcourse/checkpoints/mlm.pt)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: minutes long; run only with --slow "
                            "(make test ARGS=--slow)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow (make test ARGS=--slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
