"""Re-execute notebooks in place, so their stored outputs are current.

    python tools/execute_notebooks.py                  # every notebook in notebooks/
    python tools/execute_notebooks.py 01_attention     # one or more, by name
    python tools/execute_notebooks.py notebooks/08_decoding.ipynb      # or by path
    python tools/execute_notebooks.py --freeze-only 07_training   # widgets as text, no run

Each runs top to bottom in a fresh `tfcourse` kernel, from its own folder, on one thread
(see below). Its time is printed, and it is written back only when every cell succeeded: a
notebook that fails keeps its stored outputs (and a learner's edits are never lost to a
failed run).

Widgets are stored as what they showed last (tfcourse.lab.freeze_widgets): a saved notebook
cannot show a widget.
"""

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tfcourse.lab import freeze_widgets

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

# One thread, as nbval runs them in `make test` (tests/conftest.py): float sums then come out
# the same on every machine, whatever its core count, and so do the stored outputs.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def execute(path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name="tfcourse",
        timeout=600,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(freeze_widgets(notebook), path)
    print(f"{path.name}: {seconds:.1f} s")
    return seconds


def main(names):
    freeze_only = "--freeze-only" in names
    names = [n for n in names if n != "--freeze-only"]
    paths = [
        Path(n).resolve() if n.endswith(".ipynb") and Path(n).exists()
        else NOTEBOOKS / f"{n.removesuffix('.ipynb')}.ipynb"
        for n in names
    ] or sorted(NOTEBOOKS.glob("*.ipynb"))
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        sys.exit(f"no such notebook: {', '.join(missing)} (in {NOTEBOOKS})")
    if freeze_only:
        for path in paths:
            nbformat.write(freeze_widgets(nbformat.read(path, as_version=4)), path)
        return
    total = sum(execute(p) for p in paths)
    print(f"total: {total:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
