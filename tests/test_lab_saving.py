"""What a learner's saved notebook keeps: progress bars as text lines, widgets as their text
(tfcourse.progress, tfcourse.lab). The browser test reopens a run and saved notebook."""

import io
import json

import nbformat
import pytest

from tfcourse import progress
from tfcourse.lab import WIDGET_VIEW, freeze_widgets, pre_save


def bar_notebook():
    state = {
        "box": {"state": {"_model_name": "HBoxModel",
                          "children": ["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]}},
        "l": {"state": {"_model_name": "HTMLModel", "value": "copy:\u2007100%"}},
        "p": {"state": {"_model_name": "FloatProgressModel", "value": 400.0, "max": 400.0}},
        "r": {"state": {"_model_name": "HTMLModel", "value": "\u2007400/400\u2007[00:11&lt;00:00]"}},
        "other": {"state": {"_model_name": "VBoxModel", "children": []}},
    }
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    cell = nbformat.v4.new_code_cell("train()")
    cell.outputs = [
        nbformat.v4.new_output("display_data", {WIDGET_VIEW: {"model_id": "box"}, "text/plain": "copy: 0%"}),
        nbformat.v4.new_output("display_data", {WIDGET_VIEW: {"model_id": "other"}, "text/plain": "mine"}),
    ]
    nb.cells = [cell]
    return nb


FROZEN = [{"text/plain": "copy: 100%|██████████| 400/400 [00:11<00:00]"}, {"text/plain": "mine"}]


def test_make_notebooks_stores_a_progress_bar_as_its_last_line():
    nb = freeze_widgets(bar_notebook())
    assert [o["data"] for o in nb.cells[0].outputs] == FROZEN
    assert "widgets" not in nb.metadata


def test_make_lab_saves_a_notebook_with_its_widgets_frozen():
    """The server's pre-save hook gets the notebook as JSON (plain dicts); other files pass."""
    model = {"type": "notebook", "format": "json", "content": json.loads(json.dumps(bar_notebook()))}
    pre_save(model=model, path="notebooks/08_decoding.ipynb", contents_manager=None)
    assert [o["data"] for o in model["content"]["cells"][0]["outputs"]] == FROZEN
    assert "widgets" not in model["content"]["metadata"]
    text = {"type": "file", "format": "text", "content": "print(1)"}
    pre_save(model=text, path="x.py", contents_manager=None)
    assert text["content"] == "print(1)"


def test_a_notebook_bar_is_one_output_that_each_refresh_replaces(monkeypatch):
    import IPython.display

    shown, updates = [], []

    class Handle:
        def update(self, obj, raw=False):
            assert raw
            updates.append(obj["text/plain"])

    def display(obj, raw=False, display_id=None):
        assert raw and display_id
        shown.append(obj["text/plain"])
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    bar = progress.tqdm(total=4, desc="dates", mininterval=0)
    assert isinstance(bar, progress.NotebookBar)
    for _ in range(4):
        bar.update(1)
    bar.set_postfix(loss="0.712")
    bar.close()
    assert len(shown) == 1 and shown[0].startswith("dates:   0%|          | 0/4")
    assert updates[-1].startswith("dates: 100%|██████████| 4/4 [") and updates[-1].endswith("loss=0.712]")
    assert stderr.getvalue() == ""  # no stray line beside the bar


def test_outside_a_notebook_the_bar_is_tqdms_own(monkeypatch):
    from tqdm.std import tqdm

    bar = progress.tqdm(total=2, file=io.StringIO())
    assert type(bar) is tqdm and not progress.in_notebook()
    bar.close()


def test_a_disabled_bar_shows_nothing(monkeypatch):
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: pytest.fail("shown"))
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    bar = progress.tqdm(total=3, disable=True)
    bar.update(3)
    bar.close()
