"""Pin the public surface: adding or removing a name is a deliberate act."""

from __future__ import annotations

import importlib
import pkgutil

import rehydrate

PUBLIC = {
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
    "Summary",
    "StoreNotOpenError",
    "StoreRefusedError",
    "StoreUnavailableError",
    "SyncAdmin",
    "SyncScheduler",
    "UnknownIdError",
    "UnsupportedStoreError",
    "WorkerRecord",
    "current_delivery",
    "open_store",
}
SUBMODULES = {
    "rehydrate.abc": {
        "Capabilities",
        "Clock",
        "LimitAnswer",
        "LimitInfo",
        "LimitSpec",
        "Serializer",
        "Store",
        "Subscription",
        "Wake",
    },
    "rehydrate.errors": {
        "DuplicateIdError",
        "ElementTooLargeError",
        "InvalidArgumentError",
        "InvalidTypeError",
        "LimitKeyError",
        "RehydrateError",
        "SchedulerNotRunningError",
        "SerializerMismatchError",
        "StoreNotOpenError",
        "StoreRefusedError",
        "StoreUnavailableError",
        "UnknownIdError",
        "UnsupportedStoreError",
    },
    "rehydrate.serializers": {
        "Encoded",
        "JSONSerializer",
        "MsgpackSerializer",
        "PickleSerializer",
        "get_serializer",
    },
    "rehydrate.stores": {"MemoryStore", "PostgresStore", "RedisStore", "SQLiteStore", "open_store"},
    "rehydrate.testing": {"FakeClock"},
    "rehydrate.testing.contract": {
        "BadInputContract",
        "Harness",
        "LeasesContract",
        "LifecycleContract",
        "LimitsContract",
        "RevisionsContract",
        "SerializersContract",
        "StoreContract",
        "SubscriptionsContract",
        "SummaryContract",
        "VerbsContract",
        "WorkersContract",
    },
    "rehydrate.web": {"app"},
}


def test_all_is_pinned() -> None:
    assert set(rehydrate.__all__) == PUBLIC


def test_public_modules_are_pinned() -> None:
    for name, expected in SUBMODULES.items():
        assert set(importlib.import_module(name).__all__) == expected, name


def test_every_name_in_all_exists() -> None:
    for name in rehydrate.__all__:
        assert getattr(rehydrate, name) is not None


#: Public type aliases: a union has no module of its own.
TYPE_ALIASES = {"Seconds"}


def test_public_objects_say_where_they_live() -> None:
    for name in set(rehydrate.__all__) - TYPE_ALIASES:
        module = getattr(rehydrate, name).__module__
        assert module.startswith("rehydrate"), (name, module)


def test_private_modules_are_private() -> None:
    """Implementation lives in ``_``-modules; public modules declare ``__all__``."""
    for info in pkgutil.walk_packages(rehydrate.__path__, "rehydrate."):
        leaf = info.name.rsplit(".", 1)[-1]
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        module = importlib.import_module(info.name)
        if leaf == "__main__":
            continue
        assert hasattr(module, "__all__"), info.name


def test_py_typed_ships() -> None:
    from importlib.resources import files

    assert files("rehydrate").joinpath("py.typed").is_file()


def test_seconds_is_what_durations_take() -> None:
    """``Seconds`` is the type of every ttl, delay and lease argument."""
    import inspect
    from datetime import timedelta

    assert rehydrate.Seconds == float | int | timedelta
    hints = inspect.signature(rehydrate.Scheduler.defer).parameters["delay"].annotation
    assert "Seconds" in hints
