"""The rules of worker heartbeats that every store applies alike: argument checks and the JSON form.

A heartbeat's data is kept as JSON text by every store, whatever serializer its elements use: it is
read by operators' tools (``rehydrate workers``, the dashboard) that must not need the application's
serializer, and it is small. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from rehydrate._core import _validate
from rehydrate._core._records import WorkerRecord
from rehydrate.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "MAX_WORKER_DATA",
    "WORKER_KEEP",
    "check_worker",
    "forgotten",
    "record",
    "summary",
    "worker_data",
    "worker_ttl",
]

#: Seconds an expired worker stays listed by ``Store.workers`` (then it is forgotten).
WORKER_KEEP: Final = 3600.0
#: The most bytes of JSON one heartbeat may carry.
MAX_WORKER_DATA: Final = 65_536


def check_worker(worker: object) -> str:
    """A worker id: a non-empty ``str`` of valid Unicode text, like every id."""
    return _validate.element_id(worker, "worker")


def worker_ttl(ttl: object) -> float:
    """A heartbeat's TTL: positive seconds, at most ``MAX_SECONDS``."""
    seconds = _validate.seconds(ttl, "ttl")
    if seconds <= 0:
        raise InvalidArgumentError("ttl must be positive: a heartbeat that expires at once says nothing")
    return seconds


def worker_data(data: object) -> str:
    """``data`` (a mapping with ``str`` keys, JSON values) as compact JSON text, or a bad-argument error."""
    if not isinstance(data, Mapping):
        raise InvalidTypeError(f"data must be a mapping (a JSON object), not {type(data).__name__}")
    if not all(isinstance(key, str) for key in data):
        raise InvalidTypeError("data must have str keys (a JSON object)")
    try:
        text = json.dumps(dict(data), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"data must be JSON data: {exc}") from exc
    _validate.text(text, "data")
    size = len(text.encode())
    if size > MAX_WORKER_DATA:
        raise InvalidArgumentError(f"data must be at most {MAX_WORKER_DATA} bytes of JSON, got {size}")
    return text


def record(worker: str, text: str, last_seen: float, expires: float, now: float) -> WorkerRecord:
    """The record of a worker whose data is ``text`` (JSON), as of ``now``; all times in one clock."""
    data = json.loads(text)
    return WorkerRecord(
        id=worker,
        data=data if isinstance(data, dict) else {},
        last_seen=last_seen,
        expires=expires,
        age=max(0.0, now - last_seen),
        alive=now < expires,
    )


def forgotten(expires: float, now: float) -> bool:
    """Whether a worker whose heartbeat expires at ``expires`` is no longer listed at ``now``."""
    return expires + WORKER_KEEP <= now


def summary(worker: WorkerRecord) -> dict[str, Any]:
    """A worker as ``rehydrate workers`` and the dashboard show it (JSON), from its heartbeat's data.

    Fields a heartbeat lacks (a worker of another version, another kind of worker) are ``None``.
    """
    data = worker.data
    found = data.get("totals")
    totals: dict[str, Any] = found if isinstance(found, dict) else {}
    started = data.get("started_at")
    handlers = data.get("handlers")
    return {
        "id": worker.id,
        "alive": worker.alive,
        "host": data.get("host"),
        "pid": data.get("pid"),
        "backend": data.get("backend"),
        "version": data.get("version"),
        "started_at": (
            datetime.fromtimestamp(float(started), UTC).isoformat(timespec="seconds")
            if isinstance(started, (int, float)) and not isinstance(started, bool)
            else None
        ),
        "last_seen_ago": worker.age,
        "expires_in": worker.expires - worker.last_seen - worker.age,
        "in_flight": totals.get("in_flight"),
        "lateness_p50": totals.get("lateness_p50"),
        "lateness_p99": totals.get("lateness_p99"),
        "handlers": handlers if isinstance(handlers, dict) else {},
    }
