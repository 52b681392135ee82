"""A griffe extension for the API reference: reST markup in our docstrings, rendered as Markdown.

The docstrings are written for ``help()`` and editors, in reST's light markup: ``literals`` (which
Markdown reads as code already), roles such as :class:`~rehydrate.abc.Store`, and ``::`` before a
literal block. mkdocstrings renders docstrings as Markdown, where a role would show as
``:class:`` followed by its target. This turns each role into a code span of its target (the last
part only, with reST's ``~``), and ``text::`` into ``text:`` (the indented block after it is a
Markdown code block as it stands).
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


def markdown(text: str) -> str:
    r"""``text`` with reST roles as code spans and ``::`` markers made plain colons.

    >>> markdown("See :class:`~rehydrate.abc.Store` and :meth:`Store.claim`::")
    'See `Store` and `Store.claim`:'
    >>> markdown("Like this:\n\n::\n\n    code")
    'Like this:\n\n\n\n    code'
    """
    text = _ROLE.sub(_role, text)
    return _LITERAL_BLOCK.sub(lambda m: f"{m[1]}{m[2]}:" if m[2] else "", text)


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
