"""A griffe extension for the API reference: ``SyncScheduler``'s blocking twins, shown as methods.

``SyncScheduler`` makes each blocking method from the async one (``defer =
_blocking(Scheduler.defer)``), so that the two cannot drift apart. Read from the source, as the
reference is, those are attributes without a docstring, and were left out: the reference showed
``stats`` alone. This turns every class attribute assigned ``_blocking(Class.method)`` into a
method with the original's parameters, return annotation and docstring, prefixed as
``_blocking`` prefixes it at run time.
"""

from __future__ import annotations

from typing import Any

import griffe

__all__ = ["BlockingTwins"]

#: The name of the factory (``rehydrate._sync._blocking``).
FACTORY = "_blocking"


def _twin_of(attribute: griffe.Attribute) -> griffe.Function | None:
    """The method ``attribute`` stands for, if it is ``_blocking(Class.method)``."""
    value = attribute.value
    if not isinstance(value, griffe.ExprCall) or str(value.function) != FACTORY:
        return None
    if len(value.arguments) != 1:
        return None
    owner, _, method = str(value.arguments[0]).rpartition(".")
    module = attribute.module
    if not owner or owner not in module.members:
        return None
    found = module.members[owner]
    cls = found.final_target if isinstance(found, griffe.Alias) else found
    original = cls.members.get(method)
    if not isinstance(original, griffe.Function):
        return None
    docstring = None
    if original.docstring is not None:
        docstring = griffe.Docstring(
            f"`{owner}.{method}`, blocking (run in the scheduler's event loop).\n\n"
            + original.docstring.value,
            parser=original.docstring.parser,
            parser_options=original.docstring.parser_options,
        )
    twin = griffe.Function(
        attribute.name,
        lineno=attribute.lineno,
        endlineno=attribute.endlineno,
        parameters=griffe.Parameters(
            *(
                griffe.Parameter(p.name, annotation=p.annotation, kind=p.kind, default=p.default)
                for p in original.parameters
            )
        ),
        returns=original.returns,
        docstring=docstring,
    )
    if docstring is not None:
        docstring.parent = twin
    return twin


def _classes(obj: griffe.Object) -> Any:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Class):
            yield member
        if isinstance(member, griffe.Module | griffe.Class):
            yield from _classes(member)


class BlockingTwins(griffe.Extension):
    """Replaces the ``_blocking(...)`` attributes of every class once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for cls in list(_classes(pkg)):
            for name, member in list(cls.members.items()):
                if isinstance(member, griffe.Attribute):
                    twin = _twin_of(member)
                    if twin is not None:
                        cls.set_member(name, twin)
