"""Exercise checks that name the learner's mistake.

From pytest, `pytest exercises` runs exercises/test_*.py, whose tests are one line each:
`run_check(EXERCISE, "scaled_dot_product_attention")`. From a notebook:
`from tfcourse.checking import check; check("ex01_attention")` (every item of the exercise
file), or `check(my_function, "scaled_dot_product_attention")` (something written in the
notebook). Both print or fail with the same message, whose first line names what is wrong.

How it is built
---------------
core.py holds the one pipeline (`Item.check`, its order of diagnosis is in core's
docstring) and the mistakes every item shares. Each chapter declares its items and their
catalogues of mistakes as data, in chNN_topic.py:

    NO_SCALING = Mistake(
        "no_scaling", "Scores not scaled",                     # key, title
        "divide Q K^T by sqrt(d_k) before the softmax; ...",  # hint: never the answer
        (lambda q, k, v, m=None: ...,),                        # what the mistake computes
    )
    ITEM = Item("ex01_attention", "scaled_dot_product_attention", reference, CASES,
                (NO_SCALING, ...), formula="Compare each step with softmax(Q K^T / sqrt(d_k)) V.")

A mistake's `computes` take the arguments of a case (a class item's take the reference
module first, with the case's parameters) and return what a learner who makes the mistake
would return; the check names the first mistake whose computation gives the learner's
result (and the reference's result on the cases the learner passed). A computation that
raises the learner's error explains it. A mistake that shows only as an error elsewhere has
a `probe`: a version of the case on which it cannot show (see ch02's KEY_LENGTH). Keys
are unique within an item, and qualified by it: "ex02_multi_head_attention.
MultiHeadAttention.mask_heads". A duplicate key, or an item declared twice, is an error
when the module is imported.

CONTRIBUTING: adding a mistake is one entry and one buggy solution
------------------------------------------------------------------
1. Add a `Mistake` to the item's catalogue in chNN_topic.py (place matters: the first
   that matches is named, so a specific mistake goes before a general one). Write the
   computation the way the learner's code computes, whatever it looks like: the same
   mistake written in ten ways must give one result. Make it exact on every case, including
   the ones where the mistake does not show (then it must equal the reference).
2. Add one buggy solution, written as a learner would, to tests/buggy_solutions/exNN_topic.py,
   tagged with the mistake's key:

       @wrong("scaled_dot_product_attention.no_scaling")
       def no_scaling(query, key, value, mask=None):
           ...

   tests/test_checks.py finds it and proves that the check names exactly that mistake; it
   also fails while any catalogued mistake has no buggy solution. If no case makes the
   mistake show, add a case (at the end, so that stored notebook outputs keep their case).

Adding an exercise (chapter 09, 10, ...)
---------------------------------------
1. exercises/exNN_topic.py: the stub, each item with `raise NotImplementedError`.
2. tfcourse/checking/chNN_topic.py: its Items (found by name: chNN_*.py). Reuse core's
   helpers: `Case` (args, names of the inputs that must not change in place, a label; for a
   class, init and train), `gradient_case`, `randomize`, `describe`; an item's `run` when
   the learner's code is called in another way than f(*args) (several steps, a cache), its
   `after` checks for what is not a comparison (ch07's step 0), `show` for details under the
   first line (ch08's tokens). Names may repeat those of other exercises ("Encoder",
   "greedy_decode"): in a notebook, check(obj, "ex09_topic.Encoder") says which.
3. exercises/test_exNN_topic.py: one `run_check(EXERCISE, "name")` test per item.
4. tests/buggy_solutions/exNN_topic.py: a buggy solution per catalogued mistake.
The meta-test then proves the new items with no further change: the reference passes, the
stub says "Not implemented yet", every buggy solution is named.
"""

from .core import Case, CheckFailure, Item, Mistake, check, gradient_case, items, run_check

__all__ = ["Case", "CheckFailure", "Item", "Mistake", "check", "gradient_case", "items",
           "run_check"]
