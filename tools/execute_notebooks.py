"""Re-execute notebooks in place, so their stored outputs are current.

    python tools/execute_notebooks.py                  # every notebook in notebooks/
    python tools/execute_notebooks.py 01_attention     # one or more, by name
    python tools/execute_notebooks.py notebooks/08_decoding.ipynb      # or by path
    python tools/execute_notebooks.py --freeze-only 07_training   # widgets as text, no run

Each runs top to bottom in a fresh `tfcourse` kernel, from its own folder, on one thread
(see below). Its time is printed, and it is written back only when every cell succeeded: a
notebook that fails keeps its stored outputs (and a learner's edits are never lost to a
failed run).

Widgets are stored as what they showed last (`freeze_widgets`): a widget needs a running
kernel, JupyterLab cannot draw one from a saved notebook (jupyterlab/jupyterlab#15361), and in
a notebook it does not trust yet (any notebook it did not save itself) it shows the widget's
text instead, which for a progress bar was its first state, a frozen "0%| | 0/400".
"""

import html
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

# One thread, as nbval runs them in `make test` (tests/conftest.py): float sums then come out
# the same on every machine, whatever its core count, and so do the stored outputs.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def freeze_widgets(notebook):
    """Replace every widget output by its text, and drop the saved widget state (random ids
    that nothing can use). A progress bar (tqdm's) becomes its last line, e.g.
    "copy: 100%|██████████| 400/400 [00:11<00:00, loss=0.515]"; any other widget keeps the
    text its code gave it (an explorer's figure is an ordinary image output beside it)."""
    state = notebook.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).pop(WIDGET_VIEW, None)
            if view is not None:
                text = progress_bar_text(state, view.get("model_id"))
                if text is not None:
                    output["data"]["text/plain"] = text
    return notebook


def progress_bar_text(state, model_id, width=10):
    """The text of tqdm's notebook bar (an HBox of HTML, FloatProgress, HTML) from its saved
    state, or None if `model_id` is not such a bar."""
    box = state.get(model_id, {}).get("state", {})
    children = [state.get(c.removeprefix("IPY_MODEL_"), {}).get("state", {})
                for c in box.get("children", [])]
    kinds = [c.get("_model_name") for c in children]
    if kinds != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, bar, right = children
    full = round(width * bar["value"] / bar["max"]) if bar.get("max") else 0
    text = f"{left['value']}|{'█' * full}{' ' * (width - full)}|{right['value']}"
    return html.unescape(text).replace("\u2007", " ")


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
