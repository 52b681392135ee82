"""rehydrate: delayed delivery, reliably.

A dehydrator holds elements that arrived too early and gives them back once their time has come.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rehydrate._core._validate import Seconds
from rehydrate._version import __version__ as __version__
from rehydrate.errors import (
    DuplicateIdError,
    ElementTooLargeError,
    InvalidArgumentError,
    InvalidTypeError,
    LimitKeyError,
    RehydrateError,
    SchedulerNotRunningError,
    SerializerMismatchError,
    StoreNotOpenError,
    StoreRefusedError,
    StoreUnavailableError,
    UnknownIdError,
    UnsupportedStoreError,
)

if TYPE_CHECKING:
    from rehydrate._admin import Admin, DehydratorInfo, LimitStatus
    from rehydrate._core._dehydrator import Dehydrator
    from rehydrate._core._records import Claim, ElementInfo, Summary, WorkerRecord
    from rehydrate._core._retry import Backoff, Retry
    from rehydrate._core._triggers import Cron, Every
    from rehydrate._deliveries import DeadLetter, Delivery, Stats, current_delivery
    from rehydrate._limits import Concurrency, Limiter, Rate
    from rehydrate._scheduler import Scheduler
    from rehydrate._schedules import ScheduleInfo
    from rehydrate._sync import SyncAdmin, SyncScheduler
    from rehydrate.stores import open_store

__all__ = [
    "Admin",
    "Backoff",
    "Claim",
    "Concurrency",
    "Cron",
    "DeadLetter",
    "Dehydrator",
    "DehydratorInfo",
    "Delivery",
    "DuplicateIdError",
    "ElementTooLargeError",
    "ElementInfo",
    "Every",
    "InvalidArgumentError",
    "InvalidTypeError",
    "LimitKeyError",
    "LimitStatus",
    "Limiter",
    "Rate",
    "RehydrateError",
    "Retry",
    "ScheduleInfo",
    "Scheduler",
    "SchedulerNotRunningError",
    "Seconds",
    "SerializerMismatchError",
    "Stats",
    "StoreNotOpenError",
    "StoreRefusedError",
    "StoreUnavailableError",
    "Summary",
    "SyncAdmin",
    "SyncScheduler",
    "UnknownIdError",
    "UnsupportedStoreError",
    "WorkerRecord",
    "current_delivery",
    "open_store",
]

#: Where each name not imported above lives. They are imported on first use, so that importing
#: ``rehydrate.cli`` (a ``rehydrate push`` from a shell script) does not pay for the scheduler.
_LAZY = {
    "Admin": "rehydrate._admin",
    "DehydratorInfo": "rehydrate._admin",
    "LimitStatus": "rehydrate._admin",
    "Dehydrator": "rehydrate._core._dehydrator",
    "Claim": "rehydrate._core._records",
    "ElementInfo": "rehydrate._core._records",
    "Summary": "rehydrate._core._records",
    "WorkerRecord": "rehydrate._core._records",
    "Backoff": "rehydrate._core._retry",
    "Retry": "rehydrate._core._retry",
    "DeadLetter": "rehydrate._deliveries",
    "Delivery": "rehydrate._deliveries",
    "Stats": "rehydrate._deliveries",
    "current_delivery": "rehydrate._deliveries",
    "Scheduler": "rehydrate._scheduler",
    "Concurrency": "rehydrate._limits",
    "Limiter": "rehydrate._limits",
    "Rate": "rehydrate._limits",
    "SyncAdmin": "rehydrate._sync",
    "SyncScheduler": "rehydrate._sync",
    "Cron": "rehydrate._core._triggers",
    "Every": "rehydrate._core._triggers",
    "ScheduleInfo": "rehydrate._schedules",
    "open_store": "rehydrate.stores",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
