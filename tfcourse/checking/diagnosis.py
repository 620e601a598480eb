"""What a failed check found, as data (`Diagnosis`), and how it is shown: as one text
(`Diagnosis.text`, the same in pytest and in a notebook), whose first line names the
mistake."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnosis:
    """One failed check.

    key: the mistake's key ("in_place", or "no_scaling" for a catalogued one), or None.
    title, hint: filled in; the first line is "title: hint" (a hint that starts with a
        newline goes under the title).
    details: the lines under the first (the case, what the result shows), each indented.
    label: the case it failed on ("" when none).
    at: the learner's line that raised, e.g. "line 12 of ex01_attention.py: `scores = ...`".
    printed: what the learner's code printed.
    more: the second hint, more concrete (shown at hint level 2).
    section: (notebook, heading) of the section that teaches the step (hint level 2).
    """

    key: str | None
    title: str
    hint: str
    details: str = ""
    label: str = ""
    at: str = ""
    printed: str = ""
    more: str = ""
    section: tuple[str, str] | None = None

    @property
    def first_line(self) -> str:
        return self.text().splitlines()[0]

    def text(self, hint: int = 1) -> str:
        """The whole report: the mistake, its hint (at `hint` level 2, then the second hint
        and the notebook section that teaches the step), the details, the learner's line and
        what the learner's code printed (trimmed)."""
        lines = [self.title + ("" if self.hint.startswith("\n") else ": ") + self.hint]
        if hint >= 2:
            lines += [f"  hint 2: {self.more}"] if self.more else []
            if self.section:
                notebook, heading = self.section
                lines.append(f"  read: notebooks/{notebook}.ipynb, section \"{heading}\"")
        if self.details:
            lines.append(self.details)
        if self.at:
            lines.append(f"  at {self.at}")
        return "\n".join(lines) + printed_report(self.printed)


def printed_report(text: str, shown: int = 5) -> str:
    """'\\n  your code printed 3 lines:' and the first `shown` of them, or ''."""
    if not text:
        return ""
    lines = text.splitlines()
    size = f"{len(lines):,} line{'s' * (len(lines) != 1)}"
    if len(text) > 2000:
        size += f", {len(text):,} characters"
    head = "\n    ".join(line[:160] + (" ..." if len(line) > 160 else "") for line in lines[:shown])
    more = f"\n    ... ({len(lines) - shown:,} more)" if len(lines) > shown else ""
    return f"\n  your code printed {size}:\n    {head}{more}"


class CheckFailure(AssertionError):
    """A failed check, carrying its `diagnosis`; its message is the diagnosis' text."""

    def __init__(self, diagnosis: Diagnosis):
        super().__init__(diagnosis.text())
        self.diagnosis = diagnosis

    @property
    def key(self) -> str | None:
        return self.diagnosis.key


def for_notebook(name: str, diagnosis: Diagnosis, hint: int = 1) -> str:
    """How check() prints a failure in a notebook: '✗ name: ' and the whole report."""
    return f"✗ {name}: {diagnosis.text(hint)}"
