"""OpenTelemetry tracing: a defer's trace context rides with its element to the delivery.

Each test records with its own SDK tracer provider (passed to the scheduler) into an in-memory
exporter: nothing global is configured. The current span lives in the context, as in any app.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from rehydrate import Backoff, Every, InvalidTypeError, Retry, Scheduler, SyncScheduler, current_delivery
from rehydrate._tracing import KEY, unwrap, wrap
from rehydrate.serializers import get_serializer
from rehydrate.stores import MemoryStore, SQLiteStore
from rehydrate.testing import FakeClock

NO_JITTER = Backoff(initial=1, multiplier=2, maximum=60, jitter=0)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
async def store(clock: FakeClock) -> AsyncIterator[MemoryStore]:
    async with MemoryStore(clock=clock) as store:
        yield store


@pytest.fixture
def scheduler(store: MemoryStore, provider: TracerProvider) -> Scheduler:
    return Scheduler(store=store, grace=0.5, tracer_provider=provider)


async def advance(clock: FakeClock, seconds: float) -> None:
    await wait_all_tasks_blocked()
    clock.advance(seconds)
    await wait_all_tasks_blocked()


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def attribute(span: ReadableSpan, key: str) -> object:
    assert span.attributes is not None
    return span.attributes[key]


def ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


@pytest.mark.anyio
class TestTraced:
    async def test_delivery_is_a_child_of_the_defer_and_linked_to_it(
        self,
        scheduler: Scheduler,
        store: MemoryStore,
        clock: FakeClock,
        provider: TracerProvider,
        exporter: InMemorySpanExporter,
    ) -> None:
        """The trace reads request -> defer (PRODUCER) -> deliver (CONSUMER), 30 s apart."""
        seen: list[tuple[Any, int, object]] = []

        @scheduler.handler("reminders")
        async def remind(element: Any) -> None:
            # The handler runs in the delivery span, with the baggage of the request.
            span = trace.get_current_span()
            seen.append((element, span.get_span_context().span_id, baggage.get_baggage("tenant")))

        tracer = provider.get_tracer("app")
        async with scheduler:
            token = context.attach(baggage.set_baggage("tenant", "acme"))
            try:
                with tracer.start_as_current_span("request"):
                    await scheduler.defer("reminders", {"user": 7}, delay=30, id="user-7")
            finally:
                context.detach(token)
            stored = await store.look("reminders", "user-7")
            assert stored["element"] == {"user": 7}
            assert set(stored[KEY]) >= {"traceparent", "baggage"}
            await advance(clock, 30)

        (request,) = spans(exporter, "request")
        (defer,) = spans(exporter, "rehydrate defer reminders")
        (deliver,) = spans(exporter, "rehydrate deliver reminders")
        assert defer.kind is SpanKind.PRODUCER
        assert defer.parent is not None
        assert defer.parent.span_id == ids(request)[1]
        assert defer.attributes is not None
        assert defer.attributes["messaging.message.id"] == "user-7"
        assert defer.attributes["rehydrate.delay"] == 30
        assert deliver.kind is SpanKind.CONSUMER
        assert ids(deliver)[0] == ids(defer)[0] == ids(request)[0]
        assert deliver.parent is not None
        assert deliver.parent.span_id == ids(defer)[1]
        assert [link.context.span_id for link in deliver.links] == [ids(defer)[1]]
        assert deliver.attributes == {
            "messaging.system": "rehydrate",
            "messaging.operation.type": "process",
            "messaging.operation.name": "deliver",
            "messaging.destination.name": "reminders",
            "messaging.message.id": "user-7",
            "rehydrate.attempt": 1,
            "rehydrate.lateness": 0.0,
            "rehydrate.outcome": "done",
        }
        assert deliver.start_time is not None
        assert defer.start_time is not None
        assert seen == [({"user": 7}, ids(deliver)[1], "acme")]

    async def test_a_thread_handler_runs_in_the_delivery_span(
        self, scheduler: Scheduler, clock: FakeClock, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        seen: list[int] = []

        @scheduler.handler("jobs")
        def job(element: Any) -> None:
            seen.append(trace.get_current_span().get_span_context().span_id)

        async with scheduler:
            with provider.get_tracer("app").start_as_current_span("request"):
                await scheduler.defer("jobs", 1)
            await advance(clock, 0)
        (deliver,) = spans(exporter, "rehydrate deliver jobs")
        assert seen == [ids(deliver)[1]]

    async def test_without_a_span_a_defer_stores_the_element_and_its_delivery_starts_a_trace(
        self,
        scheduler: Scheduler,
        store: MemoryStore,
        clock: FakeClock,
        provider: TracerProvider,
        exporter: InMemorySpanExporter,
    ) -> None:
        """Started inside a span, the scheduler still roots each contextless delivery anew: the
        span current at start would otherwise parent every delivery for the process's life."""
        got: list[Any] = []

        @scheduler.handler("reminders")
        async def remind(element: Any) -> None:
            got.append(element)

        with provider.get_tracer("app").start_as_current_span("startup"):
            async with scheduler:
                context.attach(context.Context())  # the defers below run outside any span
                await scheduler.defer("reminders", {"user": 7}, delay=5, id="a")
                assert await store.look("reminders", "a") == {"user": 7}
                await store.push("reminders", "pushed by rehydrate push", ttl=5, id="b")
                await advance(clock, 5)

        assert sorted(map(str, got)) == ["pushed by rehydrate push", "{'user': 7}"]
        assert spans(exporter, "rehydrate defer reminders") == []
        (startup,) = spans(exporter, "startup")
        deliveries = spans(exporter, "rehydrate deliver reminders")
        assert len(deliveries) == 2
        for deliver in deliveries:
            assert deliver.parent is None
            assert not deliver.links
            assert ids(deliver)[0] != ids(startup)[0]
        assert len({ids(deliver)[0] for deliver in deliveries}) == 2

    async def test_failures_are_errors_and_retries_and_dead_letters_stay_in_the_trace(
        self, scheduler: Scheduler, clock: FakeClock, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        calls: list[Any] = []

        @scheduler.handler("flaky", retry=Retry(attempts=2, backoff=NO_JITTER))
        async def flaky(element: Any) -> None:
            calls.append(element)
            if len(calls) <= 2:  # the first two attempts fail; the requeued one works
                raise ConnectionError(f"down ({current_delivery().attempt})")

        async with scheduler:
            with provider.get_tracer("app").start_as_current_span("request"):
                await scheduler.defer("flaky", {"n": 1}, id="x")
            await advance(clock, 0)
            await advance(clock, 1)
            (letter,) = await scheduler.dead_letters("flaky")
            assert letter.element == {"n": 1}
            # A requeued dead letter carries its trace context on.
            assert await scheduler.requeue("flaky") == ["x"]
            await advance(clock, 0)

        assert calls == [{"n": 1}] * 3
        (defer,) = spans(exporter, "rehydrate defer flaky")
        deliveries = spans(exporter, "rehydrate deliver flaky")
        assert [d.attributes and d.attributes["rehydrate.attempt"] for d in deliveries] == [1, 2, 1]
        assert [d.attributes and d.attributes["rehydrate.outcome"] for d in deliveries] == [
            "retried",
            "dead_lettered",
            "done",
        ]
        for deliver in deliveries:
            assert ids(deliver)[0] == ids(defer)[0]
            assert deliver.parent is not None
            assert deliver.parent.span_id == ids(defer)[1]
        first, second, third = deliveries
        for failed, attempt in ((first, 1), (second, 2)):
            assert failed.status.status_code is StatusCode.ERROR
            assert failed.status.description == f"ConnectionError: down ({attempt})"
            events = [event.name for event in failed.events]
            assert "exception" in events
        assert [e.name for e in first.events][-1] == "rehydrate.retried"
        assert [e.name for e in second.events][-1] == "rehydrate.dead_lettered"
        assert third.status.status_code is StatusCode.UNSET

    async def test_a_defer_that_fails_is_an_error_span(
        self, scheduler: Scheduler, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        async with scheduler:
            with provider.get_tracer("app").start_as_current_span("request"):
                await scheduler.defer("jobs", 1, id="same", delay=10)
                with pytest.raises(Exception, match="same"):
                    await scheduler.defer("jobs", 2, id="same", delay=10)
        first, second = spans(exporter, "rehydrate defer jobs")
        assert first.status.status_code is StatusCode.UNSET
        assert second.status.status_code is StatusCode.ERROR

    async def test_cancel_and_channels_hand_out_the_element_itself(
        self, scheduler: Scheduler, clock: FakeClock, provider: TracerProvider
    ) -> None:
        async with scheduler:
            with provider.get_tracer("app").start_as_current_span("request"):
                await scheduler.defer("inbox", {"a": 1}, id="a")
                await scheduler.defer("inbox", {"b": 2}, id="b", delay=60)
            assert await scheduler.cancel("inbox", "b") == {"b": 2}
            async with scheduler.channel("inbox") as deliveries:
                delivery = await deliveries.receive()
                assert delivery.element == {"a": 1}
                assert await delivery.ack()

    async def test_each_occurrence_of_a_schedule_is_a_trace_of_its_own(
        self, scheduler: Scheduler, clock: FakeClock, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        """A schedule filed in a request is not tied to that request forever."""
        ran: list[Any] = []

        @scheduler.handler("tick")
        async def tick(element: Any) -> None:
            ran.append(element)

        async with scheduler:
            with provider.get_tracer("app").start_as_current_span("request"):
                await scheduler.schedule("tick", Every(10), id="t", element="e")
            await advance(clock, 0)  # anchored where it is filed: runs at once, then every 10 s
            await advance(clock, 10)
        assert ran == ["e", "e"]
        (request,) = spans(exporter, "request")
        first, second = spans(exporter, "rehydrate deliver tick")
        assert first.parent is None
        assert second.parent is None
        assert len({ids(first)[0], ids(second)[0], ids(request)[0]}) == 3
        assert first.attributes is not None
        assert second.attributes is not None
        nominal = [attribute(span, "rehydrate.scheduled_for") for span in (first, second)]
        assert isinstance(nominal[0], float)
        assert nominal[1] == nominal[0] + 10  # each occurrence's nominal time (Unix seconds)

    @pytest.mark.parametrize("serializer", ["json", "msgpack", "pickle"])
    async def test_the_context_survives_every_serializer(
        self,
        serializer: str,
        tmp_path: Path,
        clock: FakeClock,
        provider: TracerProvider,
        exporter: InMemorySpanExporter,
    ) -> None:
        store = SQLiteStore(tmp_path / "s.db", clock=clock, serializer=serializer)
        scheduler = Scheduler(store, grace=0.5, tracer_provider=provider)
        got: list[Any] = []
        delivered = anyio.Event()

        @scheduler.handler("jobs")
        async def job(element: Any) -> None:
            got.append(element)
            delivered.set()

        async with store, scheduler:
            with provider.get_tracer("app").start_as_current_span("request"):
                await scheduler.defer("jobs", {"k": [1, 2]}, id="j")
            with anyio.fail_after(10):
                await delivered.wait()
        assert got == [{"k": [1, 2]}]
        (defer,) = spans(exporter, "rehydrate defer jobs")
        (deliver,) = spans(exporter, "rehydrate deliver jobs")
        assert deliver.parent is not None
        assert deliver.parent.span_id == ids(defer)[1]


class TestWrapper:
    def test_a_user_dict_is_never_mistaken_for_the_wrapper(self) -> None:
        for element in ({KEY: "x"}, {KEY: {}, "element": 1, "more": 2}, {"element": 1}, [KEY, 1]):
            assert unwrap(element) == (element, None)

    def test_a_malformed_context_is_dropped_not_delivered(self) -> None:
        assert unwrap({KEY: {"traceparent": 7}, "element": "e"}) == ("e", None)
        assert unwrap({KEY: "garbage", "element": "e"}) == ("e", None)

    def test_no_context_no_wrapper(self) -> None:
        assert wrap("e", None) == "e"
        assert wrap("e", {}) == "e"
        assert wrap("e", "garbage") == "e"

    @pytest.mark.parametrize("serializer", ["json", "msgpack", "pickle"])
    def test_the_wrapper_round_trips(self, serializer: str) -> None:
        codec = get_serializer(serializer)
        carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
        assert unwrap(codec.loads(codec.dumps(wrap({"x": 1}, carrier)))) == ({"x": 1}, carrier)


def test_a_tracer_provider_must_be_one() -> None:
    with pytest.raises(InvalidTypeError, match="TracerProvider"):
        Scheduler(tracer_provider=object())  # type: ignore[arg-type]


def test_without_opentelemetry_nothing_is_imported_and_wrapped_elements_are_delivered() -> None:
    """A process that never imports OpenTelemetry: rehydrate does not either, stores elements as
    they are, and delivers an element that arrived with a trace context (from a traced process)."""
    script = textwrap.dedent(
        """
        import sys
        import anyio
        from rehydrate import Scheduler
        from rehydrate.stores import MemoryStore

        async def main():
            store = MemoryStore()
            scheduler = Scheduler(store)
            got = []
            done = anyio.Event()

            @scheduler.handler("jobs")
            async def job(element):
                got.append(element)
                if len(got) == 2:
                    done.set()

            async with scheduler:
                await scheduler.defer("jobs", {"plain": 1}, delay=0.05, id="a")
                assert await store.look("jobs", "a") == {"plain": 1}
                carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
                await store.push("jobs", {"rehydrate.trace": carrier, "element": {"traced": 2}}, ttl=0)
                with anyio.fail_after(10):
                    await done.wait()
                scheduler.stop()
            assert sorted(map(str, got)) == ["{'plain': 1}", "{'traced': 2}"], got
            leaked = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
            assert not leaked, leaked
            print("ok")

        anyio.run(main)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_sync_scheduler_carries_the_callers_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The blocking portal runs the defer in the event loop's thread, in the caller's context."""
    scheduler = Scheduler(tracer_provider=provider)
    with SyncScheduler(scheduler) as sync, provider.get_tracer("app").start_as_current_span("request"):
        sync.defer("later", 1, delay=3600, id="a")
    (request,) = spans(exporter, "request")
    (defer,) = spans(exporter, "rehydrate defer later")
    assert defer.parent is not None
    assert defer.parent.span_id == ids(request)[1]


def test_the_global_tracer_provider_is_used_by_default() -> None:
    """As ``opentelemetry-instrument`` or an app's start-up sets it (once per process: so in a
    subprocess, not to leave it set for the other tests)."""
    script = textwrap.dedent(
        """
        import anyio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from rehydrate import Scheduler

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)

        async def main():
            scheduler = Scheduler()
            done = anyio.Event()

            @scheduler.handler("jobs")
            async def job(element):
                if element == 2:
                    done.set()

            async with scheduler:
                await scheduler.defer("jobs", 1)
                with trace.get_tracer("app").start_as_current_span("request"):
                    await scheduler.defer("jobs", 2, delay=0.05)
                with anyio.fail_after(10):
                    await done.wait()
                scheduler.stop()

        anyio.run(main)
        names = sorted(span.name for span in exporter.get_finished_spans())
        assert names == [
            "rehydrate defer jobs", "rehydrate deliver jobs", "rehydrate deliver jobs", "request"
        ], names
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
