"""The ``rehydrate`` command. The one place where logging gets configured."""

from __future__ import annotations

from rehydrate.cli._main import main

__all__ = ["main"]
