"""``benchmarks/doctables.py``: a benchmark's ``--write-docs`` replaces its marked block and nothing else.

The function is tested on its own (no benchmark runs here), and on the real ``docs/benchmarks.md``
whose markers the scripts rely on.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "rehydrate_bench_doctables", ROOT / "benchmarks" / "doctables.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


doctables = _load()

PAGE = """# Benchmarks

Some prose, with a table that is not marked:

| a | b |
| --- | --- |
| 1 | 2 |

<!-- table: peers -->
old peers line 1
old peers line 2
<!-- /table -->

Between the blocks.
<!-- table: instructions -->
| store | one-shot |
| --- | ---: |
| memory | 1 |
<!-- /table -->
Trailing text, no newline at the end"""


def test_replaces_exactly_the_marked_block() -> None:
    out = doctables.replace_table(PAGE, "instructions", "| store | one-shot |\n| memory | 2 |\n")
    before, _, _ = PAGE.partition("<!-- table: instructions -->\n")
    assert out.startswith(before + "<!-- table: instructions -->\n| store | one-shot |\n| memory | 2 |\n")
    assert out.endswith("<!-- /table -->\nTrailing text, no newline at the end")
    # Everything but the block's inside is byte for byte the same, the other block included.
    assert out.replace("| store | one-shot |\n| memory | 2 |\n", "") == PAGE.replace(
        "| store | one-shot |\n| --- | ---: |\n| memory | 1 |\n", ""
    )
    assert "old peers line 1\nold peers line 2\n" in out


def test_replacing_twice_is_the_same_as_once() -> None:
    once = doctables.replace_table(PAGE, "peers", "new\n")
    assert once == PAGE.replace("old peers line 1\nold peers line 2\n", "new\n")
    assert doctables.replace_table(once, "peers", "new\n") == once
    assert doctables.replace_table(PAGE, "peers", "new") == once  # a missing final newline is added


def test_first_block_of_page_and_empty_block() -> None:
    page = "<!-- table: x -->\nold\n<!-- /table -->\n"
    assert doctables.replace_table(page, "x", "") == "<!-- table: x -->\n<!-- /table -->\n"
    assert doctables.replace_table(page, "x", "a\nb\n") == "<!-- table: x -->\na\nb\n<!-- /table -->\n"


@pytest.mark.parametrize(
    ("page", "name", "message"),
    [
        (PAGE, "scheduler", "no <!-- table: scheduler --> marker"),
        (PAGE + "\n<!-- table: peers -->\n<!-- /table -->\n", "peers", "appears 2 times"),
        ("<!-- table: scheduler -->\nrows\n", "scheduler", "is not closed"),
        (
            "<!-- table: scheduler -->\nrows\n<!-- table: peers -->\n<!-- /table -->\n",
            "scheduler",
            "not closed before",
        ),
        (PAGE, "bad -->", "bad table name"),
    ],
)
def test_a_bad_page_is_refused(page: str, name: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        doctables.replace_table(page, name, "new\n")


def test_similar_names_are_not_confused() -> None:
    page = (
        "<!-- table: instructions-trio -->\ntrio\n<!-- /table -->\n"
        "<!-- table: instructions -->\nasyncio\n<!-- /table -->\n"
    )
    out = doctables.replace_table(page, "instructions", "new\n")
    assert out == page.replace("asyncio\n", "new\n")


def test_write_table_writes_the_command_and_the_conditions(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE, encoding="utf-8")
    doctables.write_table(
        "peers",
        ["| system | p99 |", "| --- | ---: |", "| rehydrate | 2.0 ms |"],
        ["A note."],
        command=["python", "benchmarks/peers/run.py", "--repeat", "3", "--write-docs"],
        path=page,
    )
    text = page.read_text(encoding="utf-8")
    block = text.split("<!-- table: peers -->\n", 1)[1].split("<!-- /table -->", 1)[0]
    assert block.startswith("Written by `python benchmarks/peers/run.py --repeat 3 --write-docs` on ")
    assert re.search(r"on 20\d\d-\d\d-\d\d \d\d:\d\d UTC, \d+ cores, load average [\d.]+, ", block)
    assert "| rehydrate | 2.0 ms |\n" in block
    assert block.endswith("\nA note.\n")
    assert text.replace(block, "") == PAGE.replace("old peers line 1\nold peers line 2\n", "")


def test_write_table_leaves_a_bad_page_alone(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE, encoding="utf-8")
    with pytest.raises(ValueError, match="no <!-- table: scheduler --> marker"):
        doctables.write_table("scheduler", ["| a |"], command=["python", "x.py"], path=page)
    assert page.read_text(encoding="utf-8") == PAGE


@pytest.mark.parametrize(
    "name", ["instructions", "instructions-trio", "limits", "limits-rate", "peers", "scheduler", "schedules"]
)
def test_the_docs_have_each_scripts_block(name: str) -> None:
    """Each ``--write-docs`` script finds its block, once, closed, with a table inside."""
    text = doctables.DOCS.read_text(encoding="utf-8")
    inside = text.split(doctables.begin(name) + "\n", 1)[1].split(doctables.END, 1)[0]
    assert "\n| --- |" in inside
    assert doctables.replace_table(text, name, inside) == text


def test_check_table_refuses_before_a_run(tmp_path: Path) -> None:
    """A benchmark asks first, so that a long run does not end in a page it cannot write."""
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE, encoding="utf-8")
    doctables.check_table("peers", page)
    with pytest.raises(SystemExit, match=r"cannot write table 'scheduler'.*no <!-- table: scheduler -->"):
        doctables.check_table("scheduler", page)
    with pytest.raises(SystemExit, match="cannot write table 'peers'"):
        doctables.check_table("peers", tmp_path / "missing.md")
    assert page.read_text(encoding="utf-8") == PAGE
