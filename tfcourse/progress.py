"""Progress bars that a saved notebook keeps as their last line.

tqdm.auto's notebook bar is a widget: a notebook saved after a run holds only a reference to
it, and reopened it reads "Error displaying widget: model not found". So in a notebook the bar
here is tqdm's own text line, an ordinary output that each refresh replaces (IPython's
update_display): saved, it is the bar as it ended, e.g.
"dates: 100%|██████████| 120/120 [00:41<00:00,  2.99it/s, loss=0.712]". Elsewhere (a
terminal, a script) it is tqdm's usual bar.

    from tfcourse.progress import tqdm
    for seed in tqdm(seeds, desc="experiment 3"): ...
"""

import io

from tqdm.std import tqdm as terminal_tqdm


def in_notebook() -> bool:
    """Whether this Python is a notebook's kernel (Jupyter's, or VS Code's)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in shell.config


class NotebookBar(terminal_tqdm):
    """tqdm's text bar, shown as a notebook output that each refresh replaces."""

    def __init__(self, *args, **kwargs):
        self._handle = None  # the output, once shown
        # Nothing is written to a stream (a stray line would show as stderr); full blocks.
        super().__init__(*args, **{"ascii": False, **kwargs, "file": io.StringIO()})

    def display(self, msg=None, pos=None):
        from IPython.display import display

        line = {"text/plain": self.__str__() if msg is None else msg}
        if self._handle is None:
            self._handle = display(line, raw=True, display_id=True)
        else:
            self._handle.update(line, raw=True)
        return True


def tqdm(*args, **kwargs) -> terminal_tqdm:
    """A tqdm progress bar (same arguments): in a notebook a NotebookBar, else tqdm's own."""
    return (NotebookBar if in_notebook() else terminal_tqdm)(*args, **kwargs)
