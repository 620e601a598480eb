"""What a saved notebook keeps of its widgets: what each showed last, as text.

A widget needs a running kernel: JupyterLab cannot draw one from a saved notebook
(jupyterlab/jupyterlab#15361) and shows "Error displaying widget: model not found" in its
place, or, in a notebook it does not trust yet, the widget's first text, e.g. a progress bar's
frozen "0%| | 0/400". So `make notebooks` stores notebooks through freeze_widgets, and
`make lab` saves a learner's notebook through pre_save (its server's pre-save hook): a widget
becomes its text (the explorer's controls a line that says what they do; its figure is an
ordinary image beside them), a tqdm notebook bar its last line.
"""

import html

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def freeze_widgets(notebook: dict) -> dict:
    """Replace every widget output of a notebook (nbformat's, or its JSON as a dict) by its
    text, and drop the saved widget state (random ids that nothing can use). A progress bar
    (tqdm's) becomes its last line, e.g. "copy: 100%|██████████| 400/400 [00:11<00:00,
    loss=0.515]"; any other widget keeps the text its code gave it. Returns the notebook."""
    state = notebook["metadata"].pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).pop(WIDGET_VIEW, None)
            if view is not None:
                text = progress_bar_text(state, view.get("model_id"))
                if text is not None:
                    output["data"]["text/plain"] = text
    return notebook


def progress_bar_text(state: dict, model_id: str | None, width: int = 10) -> str | None:
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


def pre_save(model: dict, **_) -> None:
    """Jupyter server's pre-save hook (ContentsManager.pre_save_hook, set by `make lab`): a
    notebook is saved with its widgets frozen (freeze_widgets)."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        freeze_widgets(model["content"])
