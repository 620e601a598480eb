"""Exercise checks that name the learner's mistake.

From pytest, `pytest exercises` runs exercises/test_*.py, whose tests are one line each:
`run_check(EXERCISE, "scaled_dot_product_attention")`. From a notebook:
`from tfcourse.checking import check; check("ex01_attention")` (every item of the exercise
file), or `check(my_function, "scaled_dot_product_attention")` (something written in the
notebook). Both print or fail with the same message, whose first line names what is wrong.

How it is built
---------------
One module per job, each importing only those above it in this list:

    diagnosis.py    what a failed check found, as data (Diagnosis), and its text
    mistakes.py     Mistake (key, title, hint, computations) and the mistakes every item shares
    comparison.py   same / close, clone, unchanged, randomize
    sandbox.py      running learner code: time limit, no exit, prints captured, seeded, located
    errors.py       what an error tells (explain_error), a call that did not return (fail_on_error)
    explanation.py  what a wrong result tells (shape_story, structure_problem, resemblance, ...)
    sequences.py    what a wrong sequence of tokens tells (chapter 11: counts, merges, ranks, text)
    state.py        state kept between calls: the learner's module as it was, put back
    readings.py     other readings of a case a wrong result may match: float32, masks inverted, seq-first
    gradients.py    cases that backpropagate (gradient_case), no_gradient
    pipeline.py     Case, Item and the order of diagnosis (in its docstring)
    entry.py        the entry points: run_check, check, items, load_exercise

Each chapter declares its items and their catalogues of mistakes as data, in chNN_topic.py,
and exports them in a module-level `ITEMS` tuple (entry.items() collects every chapter's):

    NO_SCALING = Mistake(
        "no_scaling", "Scores not scaled",                     # key, title
        "divide Q K^T by sqrt(d_k) before the softmax; ...",  # hint: never the answer
        (lambda q, k, v, m=None: ...,),                        # what the mistake computes
    )
    ITEM = Item("ex01_attention", "scaled_dot_product_attention", reference, CASES,
                (NO_SCALING, ...), formula="Compare each step with softmax(Q K^T / sqrt(d_k)) V.",
                twin=_with())
    ITEMS = (ITEM,)

CONTRIBUTING: adding a mistake is one entry and one buggy solution
------------------------------------------------------------------
1. Add a `Mistake` to the item's catalogue in chNN_topic.py (place matters: the first
   that matches is named, so a specific mistake goes before a general one). Write the
   computation the way the learner's code computes, whatever it looks like: the same
   mistake written in ten ways must give one result. Make it exact on every case, including
   the ones where the mistake does not show (then it must equal the reference). Give it
   its second hint in the chapter's ladder table (below).
2. Add one buggy solution, written as a learner would, to tests/buggy_solutions/exNN_topic.py,
   tagged with the mistake's key:

       @wrong("scaled_dot_product_attention.no_scaling")
       def no_scaling(query, key, value, mask=None):
           ...

   tests/test_checks.py finds it and proves that the check names exactly that mistake; it
   also fails while any catalogued mistake has no buggy solution. If no case makes the
   mistake show, add a case (at the end, so that stored notebook outputs keep their case).

The hint ladder: every mistake has `more` (a second, more concrete hint, still not the
answer: what to print or try to see the mistake) and may have `section` ((notebook, heading)
that teaches the step, else the item's); level 2 (check(..., hint=2), pytest --hint=2) shows
both. Each chapter gives them in a table, key -> (section or None, second hint), applied
with mistakes.laddered(). Meta-tests check that every mistake has its own second hint and
every section is a heading of its notebook.

Adding an exercise (chapter 09, 10, ...)
---------------------------------------
1. exercises/exNN_topic.py: the stub, each item with `raise NotImplementedError`.
2. tfcourse/checking/chNN_topic.py: its Items, exported in ITEMS (found by name: chNN_*.py),
   each with its `twins` and `section`. Reuse the helpers: `Case` (args, names of the inputs
   that must not change in place, a label; for a class, init and train), `gradient_case`,
   `randomize`, `describe`; an item's `run` when the learner's code is called in another way
   than f(*args) (several steps, a cache), its `after` checks for what is not a comparison
   (ch07's step 0), `show` for details under the first line (ch08's tokens). Names may
   repeat those of other exercises ("Encoder", "greedy_decode"): in a notebook,
   check(obj, "ex09_topic.Encoder") says which.
3. exercises/test_exNN_topic.py: one `run_check(EXERCISE, "name")` test per item.
4. tests/buggy_solutions/exNN_topic.py: a buggy solution per catalogued mistake.
The meta-test then proves the new items with no further change: the reference passes, the
stub says "Not implemented yet", every buggy solution is named.
"""

from .diagnosis import CheckFailure, Diagnosis
from .entry import check, item, items, load_exercise, run_check
from .mistakes import Mistake
from .pipeline import Case, Item, gradient_case

__all__ = ["Case", "CheckFailure", "Diagnosis", "Item", "Mistake", "check", "gradient_case", "item",
           "items", "load_exercise", "run_check"]
