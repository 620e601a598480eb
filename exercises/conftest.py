"""`pytest --hint=2`: stuck on a failure? a second, more concrete hint, and the section of
the notebook that teaches the step.

`pytest -k NAME`: one item, by the name written in the stub (`-k RMSNorm`, `-k merge`), or by
its test's name (`-k rms_norm`): a word that is an item's name selects that item only, not
every test whose name contains it (`-k merge` is not `learn_merges`); other words match as
pytest's `-k` does. A selection that matches no check says so, with the items' names.

How the checks' results look in a terminal: the progress line, then each test's outcome in
order, a failure as its diagnosis, once, wrapped at word boundaries to the terminal's width:

    FAILED test_ex01_attention.py::test_scaled_dot_product_attention - Scores not
    scaled: divide Q K^T by sqrt(d_k) before the softmax; ...
      on query (2, 5, 8), key (2, 7, 8), value (2, 7, 6)
"""

import os
import re
import textwrap

import pytest
from _pytest.mark import KeywordMatcher
from _pytest.mark.expression import Expression

_OUTCOMES = []  # each test's report, in the order the tests ran


def pytest_addoption(parser):
    parser.addoption("--hint", type=int, default=None, metavar="LEVEL",
                     help="2: with each failure, a second hint and the notebook section to read")


def pytest_configure(config):
    if config.getoption("hint") is not None:
        os.environ["TFCOURSE_HINT"] = str(config.getoption("hint"))  # read by run_check


def item_names(test) -> set[str]:
    """The names (lower case) that select `test` exactly with -k: its item's name as the stub
    writes it ("RMSNorm" for test_rms_norm in test_ex12_modern_block.py) and the test's own
    name without "test_"; empty for a test that checks no item."""
    from tfcourse.checking import entry

    exercise = re.fullmatch(r"test_(ex\d+_\w+)\.py", test.path.name)
    if exercise is None or not test.originalname.startswith("test_"):
        return set()
    own = test.originalname.removeprefix("test_")
    squashed = own.replace("_", "").lower()
    return {own.lower(), *(i.name.lower() for i in entry.items(exercise[1])
                           if i.name.replace("_", "").lower() == squashed)}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items, config):
    """-k with item names matched whole (before pytest's own -k, which it then switches off);
    a selection of nothing is remembered for pytest_terminal_summary."""
    expression = config.option.keyword.strip()
    if not expression:
        return
    try:
        compiled = Expression.compile(expression)
    except SyntaxError:
        return  # pytest's own -k says what is wrong with it
    names = {test: item_names(test) for test in items}
    every_name = set().union(*names.values())

    def matcher(test):
        fallback = KeywordMatcher.from_item(test)
        return lambda word, **kwargs: (word.lower() in names[test] if word.lower() in every_name
                                       else fallback(word, **kwargs))

    kept = [test for test in items if compiled.evaluate(matcher(test))]
    dropped = [test for test in items if test not in kept]
    config.option.keyword = ""  # done here
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if not kept and dropped:
        config.stash[_NO_MATCH] = (expression, _named_items(dropped))


_NO_MATCH = pytest.StashKey[tuple]()


def _named_items(tests) -> dict[str, list[str]]:
    """test file -> the names of its items, as the stub writes them, in the file's order."""
    from tfcourse.checking import entry

    named = {}
    for test in tests:
        exercise = test.path.name.removeprefix("test_").removesuffix(".py")
        stub = [i.name for i in entry.items(exercise) if i.name.lower() in item_names(test)]
        named.setdefault(test.path.name, []).extend(stub or [test.originalname])
    return named


def wrapped(text: str, width: int, prefix: str = "") -> list[str]:
    """`prefix` + `text` wrapped at word boundaries to `width` columns: the prefix and the
    first word stay on the first line, a line's continuations keep its indent (two more
    spaces for an indented line), a word longer than a line stays whole."""
    lines = []
    for n, line in enumerate(text.splitlines() or [""]):
        indent = line[: len(line) - len(line.lstrip())]
        lines += textwrap.wrap(line, width, initial_indent=prefix if n == 0 else "",
                               subsequent_indent=indent + "  " * bool(indent),
                               break_long_words=False, break_on_hyphens=False) or [""]
    return lines


def _message(report) -> str:
    """A failure's diagnosis (run_check's whole message), or an error's one line."""
    if isinstance(report.longrepr, str):
        return report.longrepr
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message if crash is not None else str(report.longrepr).strip()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.excinfo is not None and isinstance(call.excinfo.value, pytest.fail.Exception):
        report.longrepr = call.excinfo.value.msg  # run_check's diagnosis, without "Failed: "
    return report


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _OUTCOMES.append(report)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    width = max(config.get_terminal_writer().fullwidth - 1, 40)
    errors = [r for r in terminalreporter.stats.get("error", []) if r not in _OUTCOMES]
    reports = [*errors, *_OUTCOMES]
    _OUTCOMES.clear()
    apart = True  # a failure stands apart: a blank line before and after it
    for report in reports:
        word = ("PASSED" if report.passed else "SKIPPED" if report.skipped
                else "FAILED" if report.when == "call" else "ERROR")
        failure = word in ("FAILED", "ERROR")
        if failure:
            lines = wrapped(_message(report), width, prefix=f"{word} {report.nodeid} - ")
        else:
            lines = [f"{word} {report.nodeid}"]
        if apart or failure:
            terminalreporter.write_line("")
        apart = failure
        terminalreporter.write(word, green=word == "PASSED", yellow=word == "SKIPPED",
                               red=failure, bold=failure)
        terminalreporter.write_line(lines[0][len(word):])
        for line in lines[1:]:
            terminalreporter.write_line(line)
    if reports:
        terminalreporter.write_line("")
    if _NO_MATCH in config.stash:
        expression, named = config.stash[_NO_MATCH]
        terminalreporter.write_line(f"No check matches -k {expression!r}. The items, by the names "
                                    "in the stubs:", red=True, bold=True)
        for path, names in named.items():
            for line in wrapped(", ".join(names), width, prefix=f"  {path}: "):
                terminalreporter.write_line(line)
        example = next(iter(named.items()))
        terminalreporter.write_line(f"e.g. pytest exercises/{example[0]} -k {example[1][0]}")
