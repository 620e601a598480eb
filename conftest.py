"""The suite runs in parallel (pytest-xdist, `-n auto` in pyproject.toml): each test where a
worker is free, except a notebook's cells, which share one kernel: each notebook goes whole to
one worker, its cells in order. The longest start first, so that no worker is left with one of
them at the end while the others wait. (Here, at the root, so that it holds however the tests
are chosen; the learners' `pytest exercises` has its own settings, exercises/pytest.ini.)"""

LONGEST_FIRST = ("tests/test_browser.py::test_notebook_09", "tests/test_browser.py::test_notebook_08",
                 "tests/test_shipped_checkpoint.py::test_stated_command_makes_it_again",
                 "tests/test_browser.py::test_notebook_04", "notebooks/09_", "notebooks/10_",
                 "notebooks/07_", "notebooks/04_", "notebooks/08_",
                 "tests/test_checks.py::test_pytest_", "tests/test_checks.py::test_hostile_files",
                 "tests/test_training.py::test_copy_task", "tests/test_ddp.py")


def _start(item):
    return next((n for n, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)),
                len(LONGEST_FIRST))


def pytest_collection_modifyitems(items):
    items.sort(key=_start)  # stable: a notebook's cells keep their order


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerPerNotebook(LoadScopeScheduling):
        """A notebook is one unit of work; every other test is one by itself."""

        def _split_scope(self, nodeid):
            path, _, _ = nodeid.partition("::")
            return path if path.endswith(".ipynb") else nodeid

    return OneWorkerPerNotebook(config, log)
