"""``rehydrate worker --metrics-port N``: one process's counters for Prometheus.

The dashboard's ``/metrics`` reads the store (what is waiting, due, dead); this endpoint reads one
worker process's scheduler (what it did): ``rehydrate_deliveries_total{name,outcome}``, the
``rehydrate_lateness_seconds{name}`` histogram, deliveries started and in flight, and for a
limited handler ``rehydrate_limit_{parked,granted,woken}_total{name}``. A collector
reads :meth:`Scheduler.stats_by_name` at each scrape, in a registry of its
own (nothing global, so several schedulers in one process or one test never collide), and
prometheus_client writes the exposition format.

It is served by a bare ASGI app under Hypercorn inside the worker's task group, on asyncio or
trio as the worker runs, so it stops with the worker (gracefully: see :func:`serve`): no thread
to leak. With ``--processes N``
each child serves its own port (``N + slot``): counters are per process, and Prometheus sums them
(``sum by (name, outcome) (rate(rehydrate_deliveries_total[5m]))``) as it does for any fleet,
which prometheus_client's multiprocess mode (files in a shared directory, wiped on restart by
hand) would only complicate for processes that are supervised and restarted independently.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from rehydrate._deliveries import LATENESS_BUCKETS
from rehydrate._version import __version__

if TYPE_CHECKING:
    from rehydrate._scheduler import Scheduler

__all__ = ["OUTCOMES", "SchedulerCollector", "app", "exposition", "serve"]

#: The outcomes of ``rehydrate_deliveries_total``: how each delivery ended (``lost``: its ack came
#: after the lease ran out and someone else claimed it).
OUTCOMES: Final = ("acked", "retried", "dead_lettered", "lost")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class SchedulerCollector(Collector):
    """The metrics of one scheduler, read at each scrape."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Any]:
        scheduler = self.scheduler
        info = GaugeMetricFamily(
            "rehydrate_worker_info",
            "1, labelled with this worker's id and version.",
            labels=["worker", "version"],
        )

        info.add_metric([scheduler.worker_id, __version__], 1.0)
        yield info
        outcomes = CounterMetricFamily(
            "rehydrate_deliveries", "Deliveries by how they ended.", labels=["name", "outcome"]
        )
        started = CounterMetricFamily(
            "rehydrate_deliveries_started",
            "Elements claimed and handed to a handler or channel.",
            labels=["name"],
        )
        in_flight = GaugeMetricFamily(
            "rehydrate_worker_in_flight", "Elements this process's handlers are running now.", labels=["name"]
        )
        lateness = HistogramMetricFamily(
            "rehydrate_lateness_seconds",
            "Seconds between an element's due time and its claim.",
            labels=["name"],
        )
        limits = {
            what: CounterMetricFamily(f"rehydrate_limit_{what}", text, labels=["name"])
            for what, text in (
                ("parked", "Elements of a limited handler parked because their limit key was full."),
                ("granted", "Slots of a handler's limits taken: deliveries allowed to run."),
                ("woken", "Parked elements this process's limit steps woke."),
            )
        }
        limited = set(scheduler.limited_handlers)
        for name, stats in scheduler.stats_by_name().items():
            if name in limited or stats.limit_granted or stats.limit_parked:
                for what, family in limits.items():
                    family.add_metric([name], float(getattr(stats, f"limit_{what}")))
            for outcome in OUTCOMES:
                outcomes.add_metric([name, outcome], float(getattr(stats, outcome)))
            started.add_metric([name], float(stats.delivered))
            in_flight.add_metric([name], float(stats.in_flight))
            if stats.lateness_histogram is not None:
                buckets, total = [], 0
                for bound, count in zip(
                    [*LATENESS_BUCKETS, float("inf")], stats.lateness_histogram, strict=True
                ):
                    total += count
                    buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
                lateness.add_metric([name], buckets, sum_value=stats.lateness_sum)
        yield outcomes
        yield started
        yield in_flight
        yield lateness
        yield from limits.values()


def exposition(scheduler: Scheduler) -> bytes:
    """The text exposition of ``scheduler``'s metrics now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(scheduler))
    return generate_latest(registry)


def app(scheduler: Scheduler) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """A bare ASGI app: ``GET /metrics`` (and ``/``) answer the exposition; anything else 404."""

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["path"] not in ("/metrics", "/"):
            status, body, kind = 404, b"not found: try /metrics\n", b"text/plain; charset=utf-8"
        elif scope["method"] not in ("GET", "HEAD"):
            status, body, kind = 405, b"method not allowed\n", b"text/plain; charset=utf-8"
        else:
            status, body, kind = 200, exposition(scheduler), CONTENT_TYPE_LATEST.encode()
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    return asgi


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``OSError`` if taken), made before anything runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


async def serve(scheduler: Scheduler, listener: socket.socket, backend: str) -> None:
    """Serve the metrics on ``listener`` (Hypercorn, on ``backend``) until cancelled.

    Cancelling it is how it stops, gracefully (``rehydrate.web._hypercorn.serve``): a
    scraper's keep-alive connection is closed, not cut under Hypercorn's own shutdown.
    """
    from hypercorn.config import Config

    from rehydrate.web._hypercorn import serve as serve_hypercorn

    scheduler.keep_lateness_histogram()
    config = Config()
    config.bind = [f"fd://{listener.detach()}"]
    config.accesslog = None
    config.loglevel = "WARNING"
    config.graceful_timeout = 1.0
    await serve_hypercorn(app(scheduler), config, backend)
