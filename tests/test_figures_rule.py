"""Figures live in one place: ``docs/benchmarks.md``.

The README is a newcomer's page that states what holds, as ratios, and links to the benchmarks;
code comments say why. A date, a time stamped UTC or a commit hash in either is a measurement
that has leaked out of the page that keeps them (with the command that made it), and goes stale
the day it is written. These checks keep the rule after it was made.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The most the README may have: one screen's worth of reading for a newcomer.
README_MAX_LINES = 250

#: A calendar date, a clock time stamped UTC, a short or long commit hash in backticks or after
#: "at", and a machine's load: the marks of a measurement taken on a day.
STAMP = re.compile(
    r"\b20\d\d-[01]\d-[0-3]\d\b"
    r"|\b\d{1,2}:\d\d(?:-\d{1,2}:\d\d)? UTC\b"
    r"|`(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}`"
    r"|\bat (?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
    r"|\bload average\b",
    re.IGNORECASE,
)


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: move detail to docs/"
    )


def test_readme_carries_no_stamps() -> None:
    found = [
        f"README.md:{number}: {match.group(0)!r} in {line.strip()!r}"
        for number, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1)
        for match in STAMP.finditer(line)
    ]
    assert not found, "dated figures belong in docs/benchmarks.md:\n" + "\n".join(found)


def test_readme_links_to_the_benchmarks() -> None:
    assert "(docs/benchmarks.md" in README.read_text(encoding="utf-8")


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """A module's comments and docstrings (and other bare string statements), line by line."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for offset, line in enumerate(node.value.value.splitlines()):
                yield node.lineno + offset, line


def _modules() -> list[Path]:
    return sorted(
        p for folder in ("rehydrate", "examples", "tools", "tests") for p in (ROOT / folder).rglob("*.py")
    )


def test_the_prose_reader_sees_comments_and_docstrings() -> None:
    """The check below reads what it must: a stamp in a comment or a docstring, not in code."""
    sample = ROOT / "tests" / "test_figures_rule.py"
    lines = [text for _, text in _prose(sample)]
    assert any("Figures live in one place" in text for text in lines)  # the module's docstring
    assert any(text.startswith("#: The most the README may have") for text in lines)  # a comment
    assert not any("README_MAX_LINES = 250" in text for text in lines)  # code is not prose


def test_comments_carry_no_stamps() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r} in {text.strip()!r}"
        for path in _modules()
        for number, text in _prose(path)
        for match in STAMP.finditer(text)
    ]
    assert not found, (
        "comments say why; the figures, their dates and commits go to docs/benchmarks.md:\n"
        + "\n".join(found)
    )
