"""An explorer of a trained model's feed-forward networks: choose the layer, the sequence and
one token; the figure shows that token's FFN from the inside (draw_ffn_weights: the weights
W_1 and W_2, the scores and what the activation passes on, the update FFN(x)).

    explorer = FFNExplorer(model, tokens, labels)   # tokens (batch, seq) of ids
    explorer   # the last line of a cell: the controls and the figure

The figure is an image output that stays in a saved notebook (the static picture for
readers without a kernel); the controls need a running kernel and ipywidgets.
"""

from collections.abc import Sequence

import torch

from tfcourse.viz.explorer import png
from tfcourse.viz.ffn import draw_ffn_weights
from tfcourse.viz.record import record


class FFNExplorer:
    """One model run on `tokens` (batch, seq), every FFN call recorded; `labels` names each
    id (labels[id] is shown for a token). select(layer=, example=, position=) changes the
    choice, as the controls do."""

    def __init__(self, model: torch.nn.Module, tokens: torch.Tensor, labels: Sequence[str], *,
                 layer: int = 0, example: int = 0, position: int = 0):
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, seq) ids, got shape {tuple(tokens.shape)}")
        with torch.no_grad(), record(model) as rec:
            model(tokens)
        if not rec.ffn:
            raise ValueError("the model ran no feed-forward network")
        self.model, self.tokens, self.labels, self.calls = model, tokens, list(labels), rec.ffn
        self.ffns = [m for m in model.modules() if hasattr(m, "linear1") and hasattr(m, "linear2")]
        self.layer = self.example = self.position = 0
        self._handle = None
        self.select(layer=layer, example=example, position=position)

    def figure(self):
        """The current choice as a Figure."""
        ffn = self.ffns[self.layer]
        call = self.calls[self.layer]
        token = self.labels[int(self.tokens[self.example, self.position])]
        activation = "gelu" if "gelu" in str(getattr(ffn, "activation", "relu")).lower() else "relu"
        return draw_ffn_weights(
            ffn.linear1.weight.detach().T, ffn.linear2.weight.detach().T,
            call.input[self.example, self.position], ffn.linear1.bias.detach(),
            ffn.linear2.bias.detach(), activation=activation,
            title=f"layer {self.layer}, sequence {self.example}: the FFN of token '{token}' "
                  f"at position {self.position}")

    def select(self, *, layer: int | None = None, example: int | None = None,
               position: int | None = None) -> None:
        """Change the choice; anything not given is kept."""
        layer = self.layer if layer is None else layer
        example = self.example if example is None else example
        position = self.position if position is None else position
        batch, seq = self.tokens.shape
        for name, value, n in (("layer", layer, len(self.calls)), ("example", example, batch),
                               ("position", position, seq)):
            if not 0 <= value < n:
                raise ValueError(f"{name} must be in [0, {n}), got {value}")
        self.layer, self.example, self.position = layer, example, position
        if self._handle is not None:
            if hasattr(self, "_widgets"):
                self._sync_positions()
            self._handle.update(self._image())

    def _image(self):
        from IPython.display import Image

        return Image(data=png(self.figure()))

    def _ipython_display_(self):
        from IPython.display import display

        try:
            controls = self._make_controls()
        except ImportError:
            print("(pip install ipywidgets for the explorer's controls; select(...) works without)")
        else:
            bundle = controls._repr_mimebundle_()
            bundle["text/plain"] = ("[FFN explorer: choose the layer, the sequence and a token "
                                    "once this cell has run]")
            display(bundle, raw=True)
        self._handle = display(self._image(), display_id=True)

    def _make_controls(self):
        import ipywidgets as w

        style = {"description_width": "initial"}
        self._widgets = c = {
            "layer": w.Dropdown(description="FFN of layer", style=style, value=self.layer,
                                options=[(str(i), i) for i in range(len(self.calls))]),
            "example": w.Dropdown(description="sequence", style=style,
                                  options=[(str(i), i) for i in range(self.tokens.size(0))],
                                  value=self.example),
            "position": w.ToggleButtons(description="token", style={"button_width": "4.5em", **style}),
            "status": w.HTML(),
        }
        self._sync_positions()

        def on(name):
            def handler(change):
                if self._syncing:
                    return
                try:
                    self.select(**{name: change["new"]})
                    c["status"].value = ""
                except Exception as error:
                    c["status"].value = f"<span style='color:#b00'>{type(error).__name__}: {error}</span>"
            c[name].observe(handler, "value")

        for name in ("layer", "example", "position"):
            on(name)
        return w.VBox([w.HBox([c["layer"], c["example"]]), c["position"], c["status"]])

    _syncing = False

    def _sync_positions(self):
        """The token buttons name the chosen sequence's tokens."""
        c = self._widgets
        self._syncing = True
        try:
            c["position"].options = [(f"{i}: {self.labels[int(t)]}", i)
                                     for i, t in enumerate(self.tokens[self.example].tolist())]
            c["position"].value = self.position
        finally:
            self._syncing = False
