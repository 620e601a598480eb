"""Every notebook is stored ready for nbval and for a learner: with outputs, no errors,
run top to bottom in one go, on the course's kernel, with the plan's file names."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def test_the_course_starts_with_00_and_01():
    assert [p.name for p in NOTEBOOKS][:2] == ["00_start_here.ipynb", "01_attention.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_executed(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "tfcourse"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), "re-run it top to bottom: make notebooks NB=..."
    assert any(c["outputs"] for c in code), "stored without outputs"
    errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, f"stored error output: {errors[0]['ename']}"
    ignored = [c for c in code if "nbval-ignore-output" in c["metadata"].get("tags", [])]
    assert len(ignored) <= len(code) // 3, "tag single cells whose output cannot repeat, not most"
    assert not any("nbval-skip" in c["metadata"].get("tags", []) for c in code), "no cell skipped"


def _shows_code(text: str) -> bool:
    return any(line.lstrip().startswith(("def ", "class ", "return ")) for line in text.splitlines())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_answer_is_shown_in_the_open(path):
    """An exercise's answer is never in the open: a cell that prints a reference's source
    (inspect.getsource) keeps its output collapsed, and so does a collapsed (solution) cell
    whose output shows code."""
    nb = json.loads(path.read_text())
    for n, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        collapsed = cell["metadata"].get("jupyter", {})
        shown = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                        for o in cell["outputs"])
        if collapsed.get("outputs_hidden") or not shown:
            continue
        assert "getsource(" not in "".join(cell["source"]), \
            f"cell {n} prints a reference's source in the open: collapse its output (outputs_hidden)"
        assert not (collapsed.get("source_hidden") and _shows_code(shown)), \
            f"cell {n} is collapsed but its output shows code: collapse its output too"
