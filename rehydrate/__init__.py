"""rehydrate: delayed delivery, reliably.

A dehydrator holds elements that arrived too early and gives them back once their time has come.
"""

from __future__ import annotations

from rehydrate._core._dehydrator import Claim, Dehydrator, ElementInfo
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    UnknownIdError,
)

__all__ = [
    "Claim",
    "Dehydrator",
    "DuplicateIdError",
    "ElementInfo",
    "InvalidArgumentError",
    "InvalidTypeError",
    "RehydrateError",
    "UnknownIdError",
]
