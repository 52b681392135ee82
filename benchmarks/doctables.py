"""Write a benchmark's latest table into ``docs/benchmarks.md``, between marker comments.

A table that is refreshed often is written by the script that measures it (``--write-docs``), so
that the figures, the command that made them and the conditions they were made in travel
together, and nobody copies numbers by hand. The block between

    <!-- table: NAME -->
    ...
    <!-- /table -->

is replaced whole; everything outside it is left byte for byte as it was. A missing, repeated or
unterminated marker is an error, not a guess: the page is not written.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["DOCS", "END", "begin", "check_table", "conditions", "render", "replace_table", "write_table"]

#: The page the tables live in.
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
#: The line that closes a marked block.
END = "<!-- /table -->"


def begin(name: str) -> str:
    """The line that opens the block of table ``name``."""
    return f"<!-- table: {name} -->"


def replace_table(text: str, name: str, block: str) -> str:
    """``text`` with the lines between table ``name``'s markers replaced by ``block``.

    The markers themselves stay. Raises ``ValueError`` if the opening marker is missing or
    repeated, or if no closing marker follows it before another block opens.
    """
    if "\n" in name or "-->" in name or not name.strip():
        raise ValueError(f"bad table name {name!r}")
    lines = text.splitlines(keepends=True)
    opening = begin(name)
    starts = [i for i, line in enumerate(lines) if line.strip() == opening]
    if not starts:
        raise ValueError(f"no {opening} marker")
    if len(starts) > 1:
        raise ValueError(f"{opening} appears {len(starts)} times")
    start = starts[0]
    for end in range(start + 1, len(lines)):
        stripped = lines[end].strip()
        if stripped == END:
            break
        if stripped.startswith("<!-- table: "):
            raise ValueError(f"{opening} is not closed before {stripped}")
    else:
        raise ValueError(f"{opening} is not closed by {END}")
    body = block if block.endswith("\n") or not block else block + "\n"
    return "".join(lines[: start + 1]) + body + "".join(lines[end:])


def check_table(name: str, path: Path = DOCS) -> None:
    """Exit with a one-line error now if table ``name`` could not be written later.

    A benchmark checks before it runs, so that a long run does not end in a page it cannot write.
    """
    try:
        replace_table(path.read_text(encoding="utf-8"), name, "")
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--write-docs: cannot write table {name!r} into {path}: {exc}") from None


def conditions(load_before: float | None = None) -> str:
    """When and on what the table was made: the date, the cores, the load, Python."""
    load = os.getloadavg()[0]
    loads = (
        f"{load_before:.2f} at the start, {load:.2f} at the end" if load_before is not None else f"{load:.2f}"
    )
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average {loads}, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def render(command: Sequence[str], rows: Sequence[str], notes: Sequence[str] = (), *, made: str) -> str:
    """The block: the command, the conditions, the table, then any notes."""
    head = f"Written by `{shlex.join(command)}` on {made}:\n\n"
    tail = "".join(f"\n{note}\n" for note in notes)
    return head + "".join(f"{row}\n" for row in rows) + tail


def write_table(
    name: str,
    rows: Sequence[str],
    notes: Sequence[str] = (),
    *,
    load_before: float | None = None,
    command: Sequence[str] | None = None,
    path: Path = DOCS,
) -> None:
    """Replace table ``name`` in ``path`` with ``rows``, the command line and the conditions."""
    argv = command if command is not None else ["python", _script_path(sys.argv[0]), *sys.argv[1:]]
    block = render(argv, rows, notes, made=conditions(load_before))
    text = path.read_text(encoding="utf-8")
    path.write_text(replace_table(text, name, block), encoding="utf-8")
    print(f"wrote table {name!r} into {path}", file=sys.stderr)


def _script_path(argv0: str) -> str:
    """The script as run from the repository's root (``benchmarks/...``), wherever it was run from."""
    script = Path(argv0).resolve()
    try:
        return str(script.relative_to(DOCS.parent.parent))
    except ValueError:
        return argv0
