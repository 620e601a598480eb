"""`pytest --hint=2`: stuck on a failure? a second, more concrete hint, and the section of
the notebook that teaches the step.

How the checks' results look in a terminal: the progress line, then each test's outcome in
order, a failure as its diagnosis, once, wrapped at word boundaries to the terminal's width:

    FAILED test_ex01_attention.py::test_scaled_dot_product_attention - Scores not
    scaled: divide Q K^T by sqrt(d_k) before the softmax; ...
      on query (2, 5, 8), key (2, 7, 8), value (2, 7, 6)
"""

import os
import textwrap

import pytest

_OUTCOMES = []  # each test's report, in the order the tests ran


def pytest_addoption(parser):
    parser.addoption("--hint", type=int, default=None, metavar="LEVEL",
                     help="2: with each failure, a second hint and the notebook section to read")


def pytest_configure(config):
    if config.getoption("hint") is not None:
        os.environ["TFCOURSE_HINT"] = str(config.getoption("hint"))  # read by run_check


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
