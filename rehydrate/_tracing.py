"""OpenTelemetry spans for defers and deliveries, when the application uses OpenTelemetry.

A defer made inside a span is wrapped in a PRODUCER span, and the W3C trace context of that span
rides with the element: the element is stored as ``{"rehydrate.trace": {"traceparent": ...},
"element": element}`` (plain strings: every serializer writes it). Each delivery runs in a
CONSUMER span whose parent is that defer span, so one trace reads "deferred here, delivered 30 s
later there", every attempt in it. An element without a context (pushed by ``rehydrate push``,
deferred outside any span, filed before tracing was on, or a schedule's occurrence) is delivered
in a new trace.

Nothing here imports OpenTelemetry. It is used only when the application has imported
``opentelemetry.trace`` itself (configuring a tracer provider, or starting a span, does), or has
given the scheduler a tracer provider: without that, a defer stores the element as it is and a
delivery pays a dictionary lookup. OpenTelemetry installed but not configured (no SDK tracer
provider) records no delivery span for elements without a context.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Final

import structlog

from rehydrate._version import __version__
from rehydrate.errors import InvalidTypeError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from rehydrate._core._records import Claim

__all__ = ["KEY", "DeliverySpan", "Producer", "Tracing", "unwrap", "wrap"]

#: The key of the wrapper that carries an element's trace context.
KEY: Final = "rehydrate.trace"
_TRACE_MODULE: Final = "opentelemetry.trace"
_SYSTEM: Final = "rehydrate"
#: Seconds between two looks at whether a global tracer provider has been set.
_RECHECK: Final = 1.0

logger = structlog.get_logger("rehydrate")


def unwrap(element: Any) -> tuple[Any, dict[str, str] | None]:
    """The element a wrapper carries and its trace context; anything else as it is, and ``None``."""
    if type(element) is dict and KEY in element and len(element) == 2 and "element" in element:
        carrier = element[KEY]
        if type(carrier) is dict and all(type(k) is str and type(v) is str for k, v in carrier.items()):
            return element["element"], carrier
        return element["element"], None
    return element, None


def wrap(element: Any, carrier: object) -> Any:
    """``element`` with its trace context, as stored (as it is when there is no context)."""
    return {KEY: carrier, "element": element} if type(carrier) is dict and carrier else element


def _propagate() -> Any:
    """The ``opentelemetry.propagate`` module (the application's propagators: W3C by default).

    Imported on first use only, once the application has imported OpenTelemetry: the import is
    slow enough to matter to a command's start-up.
    """
    module = sys.modules.get("opentelemetry.propagate")
    if module is None:
        import opentelemetry.propagate as module
    return module


class Tracing:
    """A scheduler's tracing: its tracer provider (or the global one), and the spans it makes."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        if provider is not None and not callable(getattr(provider, "get_tracer", None)):
            raise InvalidTypeError(
                f"tracer_provider must be an OpenTelemetry TracerProvider, not {type(provider).__name__}"
            )
        self._provider = provider
        self._tracer: Tracer | None = None
        #: Whether a provider records (see :meth:`_recording`): known for good, or not until then.
        self._recording_until: bool | float = 0.0 if provider is None else True

    def _api(self) -> Any:
        """``opentelemetry.trace`` if the application uses it, else ``None`` (never imports it)."""
        api = sys.modules.get(_TRACE_MODULE)
        if api is None and self._provider is not None:  # pragma: no cover - a provider imports it
            import opentelemetry.trace as api
        return api

    def _get_tracer(self, api: Any) -> Tracer:
        tracer = self._tracer
        if tracer is None:
            # The global tracer is a proxy until a provider is set, then delegates to it.
            if self._provider is not None:
                tracer = self._provider.get_tracer("rehydrate", __version__)
            else:
                tracer = api.get_tracer("rehydrate", __version__)
            self._tracer = tracer
        return tracer

    def _recording(self, api: Any) -> bool:
        """Whether spans started without a parent would be recorded (a real provider is set).

        Asking OpenTelemetry costs more than the rest of this module's work per delivery, so the
        answer is kept: for good once a provider is set (OpenTelemetry sets the global provider
        once), else for a second, the time a provider set later takes to be noticed.
        """
        recording = self._recording_until
        if recording is True or recording is False:
            return recording
        if time.monotonic() < recording:
            return False
        provider = api.get_tracer_provider() if self._provider is None else self._provider
        if isinstance(provider, api.ProxyTracerProvider):
            self._recording_until = time.monotonic() + _RECHECK
            return False
        self._recording_until = not isinstance(provider, api.NoOpTracerProvider)
        return self._recording_until

    def producer(self, name: str, delay: float) -> Producer | None:
        """A PRODUCER span for a defer to ``name``, if a span is active (else ``None``: no cost).

        Only a defer made inside a span is traced: a defer from a script or a timer has nothing to
        link its delivery to, and a root span per defer would be noise.
        """
        api = self._api()
        if api is None or not api.get_current_span().get_span_context().is_valid:
            return None
        return Producer(self._get_tracer(api), api, name, delay)

    def idle(self) -> bool:
        """No span can be made: no provider given and OpenTelemetry not imported. A delivery of
        an element that carries no trace context (not a dict) then needs no :meth:`delivery`."""
        return self._provider is None and _TRACE_MODULE not in sys.modules

    def delivery(
        self, name: str, claim: Claim, element: Any, *, scheduled_for: float | None = None
    ) -> tuple[Any, DeliverySpan | None]:
        """The element to hand to the handler, and the CONSUMER span it runs in (``None`` when
        tracing is off). The span is current until :meth:`DeliverySpan.end`."""
        # On every delivery: the common cases (not wrapped, OpenTelemetry unused) call nothing.
        carrier = None
        if type(element) is dict and KEY in element:
            element, carrier = unwrap(element)
        api = sys.modules.get(_TRACE_MODULE) if self._provider is None else self._api()
        if api is None or (carrier is None and not self._recording(api)):
            return element, None
        try:
            return element, DeliverySpan(self._get_tracer(api), api, name, claim, carrier, scheduled_for)
        except Exception as exc:
            # Tracing must never cost a delivery (a broken propagator, a bad context).
            logger.warning("could not start a delivery span", dehydrator=name, id=claim.id, exc_info=exc)
            return element, None


class Producer:
    """The span around one defer: current while the element is pushed, its context in the element."""

    def __init__(self, tracer: Tracer, api: Any, name: str, delay: float) -> None:
        self._span: Span = tracer.start_span(
            f"rehydrate defer {name}",
            kind=api.SpanKind.PRODUCER,
            attributes={
                "messaging.system": _SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "defer",
                "messaging.destination.name": name,
                "rehydrate.delay": delay,
            },
        )
        self._api = api
        self._use: Any = None

    def __enter__(self) -> Producer:
        self._use = self._api.use_span(self._span, end_on_exit=True)
        self._use.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        # use_span records the exception and sets the ERROR status, then ends the span.
        self._use.__exit__(*exc_info)

    def wrap(self, element: Any) -> Any:
        """``element`` with this span's context (the current one, with any baggage)."""
        carrier: dict[str, str] = {}
        _propagate().inject(carrier)
        return wrap(element, carrier)

    def pushed(self, id: str) -> str:
        self._span.set_attribute("messaging.message.id", id)
        return id


class DeliverySpan:
    """The span one delivery runs in: child of (and linked to) the span that deferred it.

    Parent, so the delivery sits in the trace of the request that deferred it, however late it
    runs; link too, as OpenTelemetry's messaging conventions ask of a consumer, so a backend that
    draws links (or a processor that re-roots long traces) still finds the defer. Without a
    context the parent is an empty context: a new trace, never the span that happened to be
    current when the scheduler started.
    """

    def __init__(
        self,
        tracer: Tracer,
        api: Any,
        name: str,
        claim: Claim,
        carrier: dict[str, str] | None,
        scheduled_for: float | None,
    ) -> None:
        from opentelemetry import context

        parent: Context = context.Context()
        links = None
        if carrier is not None:
            parent = _propagate().extract(carrier, context=parent)
            deferred = api.get_current_span(parent).get_span_context()
            if deferred.is_valid:
                links = [api.Link(deferred)]
        attributes: dict[str, Any] = {
            "messaging.system": _SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "deliver",
            "messaging.destination.name": name,
            "messaging.message.id": claim.id,
            "rehydrate.attempt": claim.attempt,
            "rehydrate.lateness": claim.lateness,
        }
        if scheduled_for is not None:
            attributes["rehydrate.scheduled_for"] = scheduled_for
        self._api = api
        self._context = context
        self._span: Span = tracer.start_span(
            f"rehydrate deliver {name}",
            context=parent,
            kind=api.SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        )
        self._token = context.attach(api.set_span_in_context(self._span, parent))

    def end(self, outcome: str, exc: BaseException | None = None) -> None:
        """End the span with ``outcome`` (``done``, ``retried``, ``dead_lettered``...), and the
        handler's exception if it failed; the span stops being current."""
        span = self._span
        try:
            span.set_attribute("rehydrate.outcome", outcome)
            if exc is not None:
                span.record_exception(exc)
                span.set_status(self._api.Status(self._api.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            if outcome != "done":
                span.add_event(f"rehydrate.{outcome}")
        finally:
            self._context.detach(self._token)
            span.end()
