"""``/metrics``: per-dehydrator gauges for Prometheus, read from the store at each scrape.

prometheus_client collectors are synchronous and the store is not, so each scrape reads the store
first (:func:`rehydrate.web._sampling.read`) and hands the readings to a collector registered in a
registry of its own; prometheus_client writes the exposition format.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from rehydrate.web._history import Reading

__all__ = ["CONTENT_TYPE", "exposition"]

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE

_GAUGES = (
    ("rehydrate_size", "Elements held by the dehydrator: waiting, due and in flight.", "size"),
    ("rehydrate_due", "Elements due now and not yet claimed (expired leases included).", "due"),
    ("rehydrate_in_flight", "Elements under a claim that has not been acked or rescheduled.", "claimed"),
    ("rehydrate_dead_letters", "Elements that failed every attempt, kept in <name>.dead.", "dead"),
)


class StoreCollector(Collector):
    """Gauges from one scrape's readings (plus ``rehydrate_store_up``)."""

    def __init__(
        self, readings: Sequence[Reading] | None, limits: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        #: ``None`` when the store could not be read.
        self.readings = readings
        #: Each limit's keys added up (``rehydrate._admin.limit_totals``); ``None``: not read.
        self.limits = limits

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "rehydrate_store_up", "1 if the dashboard could read the store at this scrape."
        )
        up.add_metric([], 0.0 if self.readings is None else 1.0)
        yield up
        readings = self.readings or []
        for metric, text, field in _GAUGES:
            family = GaugeMetricFamily(metric, text, labels=["name"])
            for r in readings:
                family.add_metric([r.name], float(getattr(r, field)))
            yield family
        next_due = GaugeMetricFamily(
            "rehydrate_next_due_seconds",
            "Seconds until the earliest element is due; negative: how long it has been overdue.",
            labels=["name"],
        )
        for r in readings:
            if r.next_due is not None:  # an empty dehydrator has no next due: no sample
                next_due.add_metric([r.name], r.next_due)
        yield next_due
        yield from _limit_gauges(self.limits or {})


def _limit_gauges(limits: Mapping[str, Mapping[str, Any]]) -> Iterator[GaugeMetricFamily]:
    """Per limit (its keys added up: one series per limit however many keys it has)."""
    holders = GaugeMetricFamily(
        "rehydrate_limit_holders", "Slots of the limit held now, all its keys together.", labels=["limit"]
    )
    waiting = GaugeMetricFamily(
        "rehydrate_limit_waiting",
        "Elements (and hold callers) waiting for room in the limit, all its keys together.",
        labels=["limit"],
    )
    keys = GaugeMetricFamily(
        "rehydrate_limit_keys", "Keys of the limit with state (holders, starts or waiters).", labels=["limit"]
    )
    capacity = GaugeMetricFamily(
        "rehydrate_limit_capacity",
        "The concurrency of each key of the limit, as the live workers declare it.",
        labels=["limit"],
    )
    saturation = GaugeMetricFamily(
        "rehydrate_limit_saturation",
        "How full the fullest key of the limit is, 0 to 1 (1: a newcomer waits).",
        labels=["limit"],
    )
    for limit, entry in limits.items():
        holders.add_metric([limit], float(entry["holders"]))
        waiting.add_metric([limit], float(entry["waiting"]))
        keys.add_metric([limit], float(entry["keys"]))
        if entry["concurrency"] is not None:
            capacity.add_metric([limit], float(entry["concurrency"]))
        if entry["saturation"] is not None:
            saturation.add_metric([limit], float(entry["saturation"]))
    yield from (holders, waiting, keys, capacity, saturation)


def exposition(
    readings: Sequence[Reading] | None, limits: Mapping[str, Mapping[str, Any]] | None = None
) -> bytes:
    """The text exposition of these readings (and limits)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(readings, limits))
    return generate_latest(registry)
