"""Reading the line logs that worker processes append to while a test watches them."""

from __future__ import annotations

from pathlib import Path


def complete_lines(log: Path) -> list[str]:
    """The lines of ``log`` that have been written out whole.

    A worker appends one line per delivery while the test reads the file. A line that straddles a
    page boundary reaches the file in two steps, so a read can end in half a line: that tail is
    left for the next read.
    """
    if not log.exists():
        return []
    text = log.read_text()
    return text[: text.rfind("\n") + 1].splitlines()
