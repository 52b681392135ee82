"""rehydrate: delayed delivery, reliably.

A dehydrator holds elements that arrived too early and gives them back once their time has come.
"""

from __future__ import annotations

from rehydrate._core._dehydrator import Dehydrator
from rehydrate._core._records import Claim, ElementInfo, Summary
from rehydrate._core._retry import Backoff, Retry
from rehydrate._core._validate import Seconds
from rehydrate._deliveries import DeadLetter, Delivery, Stats, current_delivery
from rehydrate._scheduler import Scheduler
from rehydrate._sync import SyncScheduler
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    SchedulerNotRunningError,
    SerializerMismatchError,
    StoreNotOpenError,
    StoreUnavailableError,
    UnknownIdError,
    UnsupportedStoreError,
)
from rehydrate.stores import open_store

__all__ = [
    "Backoff",
    "Claim",
    "DeadLetter",
    "Dehydrator",
    "Delivery",
    "DuplicateIdError",
    "ElementInfo",
    "InvalidArgumentError",
    "InvalidTypeError",
    "RehydrateError",
    "Retry",
    "Scheduler",
    "SchedulerNotRunningError",
    "Seconds",
    "SerializerMismatchError",
    "Stats",
    "Summary",
    "StoreNotOpenError",
    "StoreUnavailableError",
    "SyncScheduler",
    "UnknownIdError",
    "UnsupportedStoreError",
    "current_delivery",
    "open_store",
]
