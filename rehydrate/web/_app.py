"""The dashboard as a Starlette app: pages, live samples (server-sent events), actions, ``/metrics``."""

from __future__ import annotations

import contextlib
import json
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode

import anyio
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from rehydrate._admin import Admin, limit_row, limit_totals
from rehydrate._clock import wall
from rehydrate._core import _workers
from rehydrate._schedules import ScheduleInfo, is_schedule
from rehydrate.abc import Store
from rehydrate.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    StoreUnavailableError,
)
from rehydrate.web import _metrics, _pages
from rehydrate.web._history import Reading, iso
from rehydrate.web._sampling import DEAD_SUFFIX, Sampler, dehydrator_names, read
from rehydrate.web._security import (
    COOKIE,
    Guard,
    Session,
    host_without_port,
    is_loopback_host,
    origin_refusal,
)

__all__ = ["app"]

log = structlog.get_logger("rehydrate.web")

#: Largest form body an action accepts.
_MAX_FORM = 64 * 1024
#: Largest page of elements or dead letters.
_MAX_LIMIT = 500


class _Refusal(Exception):
    """Ends a request with ``status`` and a message for people (HTML) or scripts (JSON)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def _positive(value: object, name: str) -> float:
    """A finite number of seconds above zero."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(f"{name} must be more than 0 and finite, got {value!r}")
    return float(value)


def _int_param(request: Request, key: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise _Refusal(400, f"{key} must be a whole number, got {text!r}") from None
    if not low <= value <= high:
        raise _Refusal(400, f"{key} must be between {low} and {high}, got {value}")
    return value


def _required(source: dict[str, str] | Any, key: str) -> str:
    value = source.get(key)
    if not value:
        raise _Refusal(400, f"missing {key}: give the dehydrator's {key} (e.g. ?{key}=reminders)")
    return str(value)


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


class _Dashboard:
    def __init__(
        self, store: Store, *, guard: Guard, sample_interval: float, keep: int, page_size: int
    ) -> None:
        self.store = store
        #: Every action goes through it, as ``rehydrate`` verbs do: one rule for each.
        self.admin = Admin(store)
        self.guard = guard
        self.sampler = Sampler(store, interval=sample_interval, keep=keep)
        self.keep = keep
        self.page_size = page_size
        self._opened = False
        self._workers_failed = False

    async def ready(self) -> None:
        """Open the store once (``open`` is idempotent: a store the caller opened stays as it is)."""
        if not self._opened:
            await self.store.open()
            self._opened = True

    # -- the gate every request passes -----------------------------------------------------------

    def _admit(self, request: Request) -> tuple[Session | None, bool, Response | None]:
        """The visitor's session, whether it came with the token in a header, or a response that ends it."""
        host = host_without_port(request.headers.get("host", ""))
        if self.guard.token is None:
            client = request.client.host if request.client else None
            if (client is not None and not is_loopback_host(client)) or not is_loopback_host(host):
                raise _Refusal(
                    403,
                    "this dashboard has no token, so it answers only on loopback (127.0.0.1, localhost); "
                    "give it a token to serve it beyond this machine",
                )
            return self.guard.session(request.cookies.get(COOKIE)), False, None
        authorization = request.headers.get("authorization")
        if authorization is not None:
            scheme, _, given = authorization.partition(" ")
            if scheme.lower() != "bearer" or not self.guard.token_matches(given.strip()):
                raise _Refusal(403, "wrong token in the Authorization header (expected: Bearer <token>)")
            return None, True, None
        in_url = request.query_params.get("token")
        if in_url is not None:
            if not self.guard.token_matches(in_url):
                raise _Refusal(403, "wrong token")
            # Trade the token in the URL for a session cookie, and drop it from the address bar.
            fresh = self.guard.new_session(authenticated=True)
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            leaf = request.url.path.rsplit("/", 1)[-1] or "./"
            response = RedirectResponse(leaf + ("?" + rest if rest else ""), status_code=303)
            self._set_cookie(request, response, fresh)
            return fresh, False, response
        known = self.guard.session(request.cookies.get(COOKIE))
        return (known if known is not None and known.authenticated else None), False, None

    def _set_cookie(self, request: Request, response: Response, session: Session) -> None:
        response.set_cookie(
            COOKIE,
            self.guard.cookie(session),
            path=request.scope.get("root_path", "").rstrip("/") + "/",
            max_age=int(self.guard.lifetime),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def page(
        self,
        handler: Callable[[Request, Session | None], Awaitable[Response]],
        *,
        post: bool = False,
        login: bool = False,
    ) -> Callable[[Request], Awaitable[Response]]:
        """Wrap a handler in the gate, the CSRF checks, error pages and security headers."""

        async def endpoint(request: Request) -> Response:
            nonce = secrets.token_urlsafe(16)
            request.state.nonce = nonce
            issued: Session | None = None
            try:
                session, bearer, early = self._admit(request)
                if early is not None:
                    return self._harden(early, nonce)
                if self.guard.token is not None and session is None and not bearer and not login:
                    raise _Refusal(
                        401,
                        "this dashboard needs its token: open it once with ?token=..., use the form below, "
                        "or send Authorization: Bearer <token>",
                        {"WWW-Authenticate": 'Bearer realm="rehydrate"'},
                    )
                if session is None and self.guard.token is None:
                    session = issued = self.guard.new_session(authenticated=False)
                if post:
                    form = await self._form(request)
                    refusal = origin_refusal(
                        origin=request.headers.get("origin"),
                        fetch_site=request.headers.get("sec-fetch-site"),
                        host=request.headers.get("host"),
                    )
                    if refusal is not None:
                        raise _Refusal(403, refusal)
                    if not bearer and not login:
                        if issued is not None or session is None:
                            raise _Refusal(403, "missing session: load the page again, then retry")
                        if "csrf" not in form:
                            raise _Refusal(
                                403, "missing CSRF token: submit the action from the dashboard's page"
                            )
                        if not self.guard.csrf_matches(session, form["csrf"]):
                            raise _Refusal(403, "wrong CSRF token: load the page again, then retry")
                    request.state.form = form
                await self.ready()
                response = await handler(request, session)
            except _Refusal as refusal:
                response = self._refused(request, refusal, nonce)
            except (InvalidArgumentError, InvalidTypeError) as exc:
                response = self._refused(request, _Refusal(400, str(exc)), nonce)
            except StoreUnavailableError as exc:
                response = self._refused(request, _Refusal(503, f"the store is unavailable: {exc}"), nonce)
            except RehydrateError as exc:
                response = self._refused(request, _Refusal(500, f"{type(exc).__name__}: {exc}"), nonce)
            if issued is not None:
                self._set_cookie(request, response, issued)
            return self._harden(response, nonce)

        return endpoint

    def _refused(self, request: Request, refusal: _Refusal, nonce: str) -> Response:
        if _wants_json(request) or request.url.path.endswith(("/events", "/metrics")):
            return JSONResponse({"error": refusal.message}, refusal.status, headers=refusal.headers)
        if refusal.status == 401 or (refusal.status == 403 and request.url.path.endswith("/login")):
            text = _pages.login_page(message=refusal.message, nonce=nonce, keep=self.keep)
        else:
            text = _pages.error_page(
                status=refusal.status, message=refusal.message, nonce=nonce, keep=self.keep
            )
        return HTMLResponse(text, refusal.status, headers=refusal.headers)

    @staticmethod
    def _harden(response: Response, nonce: str) -> Response:
        headers = response.headers
        headers["Content-Security-Policy"] = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "connect-src 'self'; "
            "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        )
        headers["X-Content-Type-Options"] = "nosniff"
        headers["X-Frame-Options"] = "DENY"
        headers["Referrer-Policy"] = "no-referrer"
        headers.setdefault("Cache-Control", "no-store")
        return response

    @staticmethod
    async def _form(request: Request) -> dict[str, str]:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            raise _Refusal(415, "send actions as a form (application/x-www-form-urlencoded)")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM:
                raise _Refusal(413, f"form too large (more than {_MAX_FORM} bytes)")
        try:
            pairs = parse_qsl(
                body.decode("utf-8"), keep_blank_values=True, max_num_fields=20, strict_parsing=False
            )
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Refusal(400, f"malformed form: {exc}") from None
        return dict(pairs)

    def _csrf(self, session: Session | None) -> str:
        return self.guard.csrf(session) if session is not None else ""

    async def _latest(self) -> dict[str, Any]:
        # The page still renders from the store; the live status reports the trouble.
        with contextlib.suppress(RehydrateError):
            await self.sampler.refresh()
        return dict(self.sampler.history.latest())

    async def _workers(self) -> list[dict[str, Any]] | None:
        """The workers as ``rehydrate workers`` shows them; ``None`` if the store keeps none or failed."""
        try:
            found = [_workers.summary(w) for w in await self.admin.workers()]
        except (NotImplementedError, RehydrateError) as exc:
            if not self._workers_failed:  # once, not at every sample of every open page
                log.warning("dashboard could not read the workers", error=repr(exc))
            self._workers_failed = True
            return None
        self._workers_failed = False
        return found

    # -- pages -----------------------------------------------------------------------------------

    async def overview(self, request: Request, session: Session | None) -> Response:
        latest = await self._latest()
        if _wants_json(request):
            return JSONResponse({name: point.as_json() for name, point in latest.items()})
        workers = await self._workers()
        return HTMLResponse(
            _pages.overview_page(latest=latest, nonce=request.state.nonce, keep=self.keep, workers=workers)
        )

    async def workers(self, request: Request, session: Session | None) -> Response:
        """``GET /workers``: the workers as JSON (``rehydrate workers``'s rows); 501 if none are kept."""
        workers = await self._workers()
        if workers is None:
            raise _Refusal(501, "this store keeps no worker heartbeats, or they could not be read")
        return JSONResponse(workers)

    async def elements(self, request: Request, session: Session | None) -> Response:
        name = _required(request.query_params, "name")
        offset = _int_param(request, "offset", 0, 0, 10**9)
        limit = _int_param(request, "limit", self.page_size, 1, _MAX_LIMIT)
        rows = await self.admin.elements(name, offset=offset, limit=limit)
        total = await self.store.size(name)
        latest = await self._latest()
        if _wants_json(request):
            now, wall_now = self.store.clock(), wall(self.store.clock)
            return JSONResponse(
                {
                    "name": name,
                    "offset": offset,
                    "total": total,
                    "elements": [
                        {
                            "id": i.id,
                            "due_in": i.due - now,
                            "due_at": iso(wall_now + i.due - now),
                            "attempt": i.attempt,
                            "claimed": i.claimed,
                            "schedule": is_schedule(element),
                        }
                        for i, element in rows
                    ],
                }
            )
        text = _pages.elements_page(
            name=name,
            rows=rows,
            now=self.store.clock(),
            offset=offset,
            limit=limit,
            total=total,
            point=latest.get(name),
            csrf=self._csrf(session),
            nonce=request.state.nonce,
            keep=self.keep,
        )
        return HTMLResponse(text)

    async def element(self, request: Request, session: Session | None) -> Response:
        name = _required(request.query_params, "name")
        id = _required(request.query_params, "id")
        info = await self.store.info(name, id)
        if info is None:
            raise _Refusal(404, f"no element {id!r} in {name!r}: it was delivered, cancelled, or never there")
        element = await self.store.look(name, id)
        text = _pages.element_page(
            name=name,
            info=info,
            element=element,
            now=self.store.clock(),
            wall_now=wall(self.store.clock),
            csrf=self._csrf(session),
            nonce=request.state.nonce,
            keep=self.keep,
        )
        return HTMLResponse(text)

    async def dead(self, request: Request, session: Session | None) -> Response:
        name = _required(request.query_params, "name")
        offset = _int_param(request, "offset", 0, 0, 10**9)
        limit = _int_param(request, "limit", self.page_size, 1, _MAX_LIMIT)
        letters = await self.admin.dead_letters(name, limit=limit, offset=offset)
        total = await self.store.size(name + DEAD_SUFFIX)
        if _wants_json(request):
            return JSONResponse(
                {"name": name, "offset": offset, "total": total, "dead": [letter.id for letter in letters]}
            )
        text = _pages.dead_page(
            name=name,
            letters=letters,
            offset=offset,
            limit=limit,
            total=total,
            point=(await self._latest()).get(name),
            csrf=self._csrf(session),
            nonce=request.state.nonce,
            keep=self.keep,
        )
        return HTMLResponse(text)

    async def schedules(self, request: Request, session: Session | None) -> Response:
        """``GET /schedules[?name=NAME]``: the recurring schedules (of every dehydrator, or of
        ``name``), next to run first, with their state; the rows of ``rehydrate schedules``."""
        name = request.query_params.get("name") or None
        offset = _int_param(request, "offset", 0, 0, 10**9)
        limit = _int_param(request, "limit", self.page_size, 1, _MAX_LIMIT)
        names = [name] if name is not None else await self.admin.names()
        wanted = offset + limit + 1  # one more than the page: is there a later page?
        found: list[tuple[str, ScheduleInfo]] = []
        for each in names:
            if len(found) >= wanted:
                break
            found += [(each, info) for info in await self.admin.schedules(each, limit=wanted - len(found))]
        more = len(found) > offset + limit
        now, wall_now = self.store.clock(), wall(self.store.clock)
        rows = []
        for each, info in found[offset : offset + limit]:
            held = await self.store.info(each, info.id)
            if held is not None:  # (removed meanwhile)
                rows.append(_pages.ScheduleRow(name=each, info=info, held=held, now=now, wall_now=wall_now))
        if _wants_json(request):
            return JSONResponse(
                {
                    "name": name,
                    "offset": offset,
                    "more": more,
                    "schedules": [row.as_json() for row in rows],
                }
            )
        text = _pages.schedules_page(
            name=name,
            rows=rows,
            offset=offset,
            limit=limit,
            more=more,
            wall_now=wall_now,
            csrf=self._csrf(session),
            nonce=request.state.nonce,
            keep=self.keep,
        )
        return HTMLResponse(text)

    async def limits(self, request: Request, session: Session | None) -> Response:
        """``GET /limits[?limit=NAME]``: each limit key with state, fullest first; the rows of
        ``rehydrate limits``. 501 for a store without limits."""
        limit = request.query_params.get("limit") or None
        if not self.store.capabilities.limits:
            raise _Refusal(501, "this store does not implement limits")
        try:
            statuses = await self.admin.limits(limit)
        except InvalidArgumentError as exc:
            raise _Refusal(400, str(exc)) from None
        rows = [limit_row(s) for s in statuses]
        rows.sort(key=lambda r: (-(r["saturation"] or 0.0), -r["waiting"], r["limit"], r["key"]))
        if _wants_json(request):
            return JSONResponse({"limit": limit, "limits": rows})
        return HTMLResponse(
            _pages.limits_page(limit=limit, rows=rows, nonce=request.state.nonce, keep=self.keep)
        )

    # -- actions ---------------------------------------------------------------------------------

    @staticmethod
    def _done(request: Request, message: str, next: str) -> Response:
        if _wants_json(request):
            return JSONResponse({"ok": True, "message": message, "next": next})
        return RedirectResponse(next, status_code=303)

    async def requeue(self, request: Request, session: Session | None) -> Response:
        form: dict[str, str] = request.state.form
        name = _required(form, "name")
        if form.get("all"):
            moved = await self.admin.requeue(name)
            left = await self.store.size(name + DEAD_SUFFIX)
            message = f"requeued {len(moved)} dead letters into {name}"
            if left:
                message += f"; {left} stayed (their ids are live again in {name}, or arrived meanwhile)"
            return self._done(request, message, _pages.relative("dead", name=name))
        id = _required(form, "id")
        if not await self.admin.requeue(name, [id]):
            if await self.store.info(name + DEAD_SUFFIX, id) is None:
                raise _Refusal(404, f"no dead letter {id!r} in {name!r}: requeued or deleted already?")
            raise _Refusal(
                409, f"{id!r} is live again in {name!r}, so its dead letter stays: cancel that element first"
            )
        return self._done(request, f"requeued {id} into {name}, due now", _pages.relative("dead", name=name))

    async def delete(self, request: Request, session: Session | None) -> Response:
        form: dict[str, str] = request.state.form
        name, id = _required(form, "name"), _required(form, "id")
        if not await self.admin.delete_dead_letter(name, id):
            raise _Refusal(404, f"no dead letter {id!r} in {name!r}: requeued or deleted already?")
        return self._done(
            request, f"deleted the dead letter {id} of {name}", _pages.relative("dead", name=name)
        )

    async def cancel(self, request: Request, session: Session | None) -> Response:
        form: dict[str, str] = request.state.form
        name, id = _required(form, "name"), _required(form, "id")
        removed = await self.admin.remove(name, id)  # (a schedule: a run in flight ends first)
        if removed == "ending":  # (left under its last run's claim until the run ends)
            raise _Refusal(404, f"the schedule {id!r} of {name!r} is removed: its last run is ending")
        if removed == "unknown":
            raise _Refusal(404, f"no element {id!r} in {name!r}: it was delivered, cancelled, or never there")
        if removed == "schedule":
            return self._done(
                request, f"removed the schedule {id} of {name}", _pages.relative("elements", name=name)
            )
        return self._done(request, f"cancelled {id} in {name}", _pages.relative("elements", name=name))

    @staticmethod
    def _not_a_schedule(outcome: str, name: str, id: str) -> _Refusal:
        """The refusal of a pause or resume of something that is not a schedule."""
        if outcome == "one-shot":
            return _Refusal(
                409,
                f"{id!r} in {name!r} is not a schedule but one-shot work: run it now or cancel it instead",
            )
        return _Refusal(404, f"no schedule {id!r} in {name!r}: removed, or never there")

    async def pause(self, request: Request, session: Session | None) -> Response:
        """``POST /pause``: ``Admin.pause`` (a run in flight finishes; nothing runs until resumed)."""
        form: dict[str, str] = request.state.form
        name, id = _required(form, "name"), _required(form, "id")
        outcome = await self.admin.pause(name, id)
        if outcome == "unchanged":
            raise _Refusal(409, f"the schedule {id!r} of {name!r} is paused already: resume it to run it")
        if outcome != "paused":
            raise self._not_a_schedule(outcome, name, id)
        return self._done(
            request,
            f"paused the schedule {id} of {name}: it runs no more until resumed",
            _pages.relative("schedules", name=name),
        )

    async def resume(self, request: Request, session: Session | None) -> Response:
        """``POST /resume``: ``Admin.resume`` (from its next occurrence; none missed runs)."""
        form: dict[str, str] = request.state.form
        name, id = _required(form, "name"), _required(form, "id")
        outcome = await self.admin.resume(name, id)
        if outcome == "unchanged":
            raise _Refusal(409, f"the schedule {id!r} of {name!r} is not paused")
        if outcome != "resumed":
            raise self._not_a_schedule(outcome, name, id)
        message = f"resumed the schedule {id} of {name}"
        info = await self.admin.find_schedule(name, id)
        if info is not None and info.next_run is not None:
            message += f": next run {iso(info.next_run.timestamp())}"
        return self._done(request, message, _pages.relative("schedules", name=name))

    async def run_now(self, request: Request, session: Session | None) -> Response:
        form: dict[str, str] = request.state.form
        name, id = _required(form, "name"), _required(form, "id")
        # A schedule runs an extra occurrence now and keeps its next run (Admin.run_now);
        # fenced by the attempt: a worker that claims it meanwhile keeps it.
        outcome = await self.admin.run_now(name, id)
        if outcome == "unknown":
            raise _Refusal(404, f"no element {id!r} in {name!r}: it was delivered, cancelled, or never there")
        if outcome == "held":
            raise _Refusal(409, f"{id!r} is in flight: a worker holds its lease and is running it now")
        if outcome == "paused":
            raise _Refusal(409, f"{id!r} is a paused schedule: resume it to run it")
        if outcome == "changed":
            raise _Refusal(409, f"{id!r} changed meanwhile (claimed or removed): look again")
        done = f"{id} in {name} is due now"
        if outcome == "schedule":
            done = f"an extra run of the schedule {done} (its next run is unchanged)"
        return self._done(request, done, _pages.relative("element", name=name, id=id))

    async def login(self, request: Request, session: Session | None) -> Response:
        form: dict[str, str] = request.state.form
        if self.guard.token is None:
            return RedirectResponse("./", status_code=303)
        if not self.guard.token_matches(form.get("token")):
            raise _Refusal(403, "wrong token")
        response = RedirectResponse("./", status_code=303)
        self._set_cookie(request, response, self.guard.new_session(authenticated=True))
        return response

    # -- machines --------------------------------------------------------------------------------

    async def metrics(self, request: Request, session: Session | None) -> Response:
        readings: list[Reading] | None
        try:
            readings = [
                await read(self.store, name, id_set_limit=0) for name in await dehydrator_names(self.store)
            ]
        except RehydrateError as exc:  # still answer: rehydrate_store_up 0 is worth an alert
            log.warning("dashboard could not read the store for /metrics", error=repr(exc))
            readings = None
        limits: dict[str, dict[str, Any]] | None = None
        if readings is not None and self.store.capabilities.limits:
            try:
                limits = limit_totals(await self.admin.limits())
            except RehydrateError as exc:
                log.warning("dashboard could not read the limits for /metrics", error=repr(exc))
        return Response(_metrics.exposition(readings, limits), media_type=_metrics.CONTENT_TYPE)

    async def events(self, request: Request, session: Session | None) -> Response:
        return StreamingResponse(
            self._stream(), media_type="text/event-stream", headers={"X-Accel-Buffering": "no"}
        )

    async def _stream(self) -> AsyncIterator[str]:
        sampler = self.sampler
        yield "retry: 3000\n\n"
        sent: float | None = None
        while True:
            woken = sampler.sampled
            try:
                await sampler.refresh()
            except RehydrateError as exc:
                yield _event("trouble", {"error": f"{type(exc).__name__}: {exc}"})
                await anyio.sleep(sampler.interval)
                continue
            at = sampler.history.sampled_at
            stamp = None if at is None else iso(at)
            if sent is None:
                points = sampler.history.points()
                dehydrators = {n: [p.as_json() for p in ps] for n, ps in points.items()}
                workers = await self._workers()
                yield _event("history", {"at": stamp, "dehydrators": dehydrators, "workers": workers})
                sent = at
            elif at != sent:
                latest = sampler.history.latest()
                workers = await self._workers()
                yield _event(
                    "sample",
                    {
                        "at": stamp,
                        "dehydrators": {n: p.as_json() for n, p in latest.items()},
                        "workers": workers,
                    },
                )
                sent = at
            with anyio.move_on_after(sampler.due_in() + 0.05):
                await woken.wait()


def _event(kind: str, data: object) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def app(
    store: Store,
    *,
    token: str | None = None,
    secret: bytes | None = None,
    sample_interval: float = 2.0,
    history: float = 600.0,
    page_size: int = 50,
) -> Starlette:
    """The dashboard of ``store`` as an ASGI app; mount it anywhere (``Mount("/jobs", app(store))``).

    ``token``: required of every visitor when given (see ``rehydrate dashboard --token``); without
    one the app answers loopback clients only. ``secret`` signs session cookies (random per app by
    default: give one when several processes serve the same dashboard). The app samples the store
    every ``sample_interval`` seconds while it runs as a top-level app (lifespan), or while a page
    watches when mounted, and keeps ``history`` seconds of samples for its charts. It opens the
    store if needed and never closes it.
    """
    if not isinstance(store, Store):
        raise InvalidTypeError(f"store must be a rehydrate.abc.Store, not {type(store).__name__}")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise InvalidArgumentError("token must be a non-empty str (or None for a loopback-only dashboard)")
    if secret is not None and (not isinstance(secret, bytes) or len(secret) < 16):
        raise InvalidArgumentError("secret must be bytes, at least 16 of them")
    interval = _positive(sample_interval, "sample_interval")
    kept = _positive(history, "history")
    if not isinstance(page_size, int) or isinstance(page_size, bool) or not 1 <= page_size <= _MAX_LIMIT:
        raise InvalidArgumentError(f"page_size must be an int from 1 to {_MAX_LIMIT}, got {page_size!r}")
    guard = Guard(token) if secret is None else Guard(token, secret)
    board = _Dashboard(
        store, guard=guard, sample_interval=interval, keep=max(2, round(kept / interval)), page_size=page_size
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await board.ready()
        async with anyio.create_task_group() as tg:
            tg.start_soon(board.sampler.run)
            yield
            tg.cancel_scope.cancel()

    routes = [
        Route("/", board.page(board.overview)),
        Route("/elements", board.page(board.elements)),
        Route("/element", board.page(board.element)),
        Route("/dead", board.page(board.dead)),
        Route("/schedules", board.page(board.schedules)),
        Route("/limits", board.page(board.limits)),
        Route("/events", board.page(board.events)),
        Route("/metrics", board.page(board.metrics)),
        Route("/workers", board.page(board.workers)),
        Route("/requeue", board.page(board.requeue, post=True), methods=["POST"]),
        Route("/delete", board.page(board.delete, post=True), methods=["POST"]),
        Route("/cancel", board.page(board.cancel, post=True), methods=["POST"]),
        Route("/run-now", board.page(board.run_now, post=True), methods=["POST"]),
        Route("/pause", board.page(board.pause, post=True), methods=["POST"]),
        Route("/resume", board.page(board.resume, post=True), methods=["POST"]),
        Route("/login", board.page(board.login, post=True, login=True), methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
