"""A griffe extension for the API reference: reST markup in our docstrings, rendered as Markdown.

The docstrings are written for ``help()`` and editors, in reST's light markup: ``literals`` (which
Markdown reads as code already), roles such as :class:`~rehydrate.abc.Store`, and ``::`` before a
literal block. mkdocstrings renders docstrings as Markdown, where a role would show as
``:class:`` followed by its target. This turns each role into a code span of its target (the last
part only, with reST's ``~``), ``text::`` into ``text:`` (the indented block after it is a
Markdown code block as it stands), and a paragraph of doctest examples into a code block.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

__all__ = ["ReSTRoles", "markdown"]

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|exc|mod|data|obj|const):`(~?)([^`]+)`")
_LITERAL_BLOCK = re.compile(r"(?m)^([ \t]*)(.*?)[ \t]*::$")


def _role(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def _fence_doctests(text: str) -> str:
    """Each paragraph of ``>>>`` examples as a fenced ``pycon`` block (Markdown would read ``>``
    as a quote and run the lines together)."""
    paragraphs = text.split("\n\n")
    for i, paragraph in enumerate(paragraphs):
        if paragraph.lstrip().startswith(">>> "):
            paragraphs[i] = f"```pycon\n{paragraph}\n```"
    return "\n\n".join(paragraphs)


def markdown(text: str) -> str:
    r"""``text`` with reST roles as code spans, ``::`` markers made plain colons and doctest
    examples fenced as code.

    >>> markdown("See :class:`~rehydrate.abc.Store` and :meth:`Store.claim`::")
    'See `Store` and `Store.claim`:'
    >>> markdown("Like this:\n\n::\n\n    code")
    'Like this:\n\n\n\n    code'
    >>> markdown("For example:\n\n>>> 1 + 1\n2")
    'For example:\n\n```pycon\n>>> 1 + 1\n2\n```'
    """
    text = _ROLE.sub(_role, text)
    text = _LITERAL_BLOCK.sub(lambda m: f"{m[1]}{m[2]}:" if m[2] else "", text)
    return _fence_doctests(text)


class ReSTRoles(griffe.Extension):
    """Rewrites every docstring as it is loaded (see the module docstring)."""

    def on_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        obj: griffe.Object,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
