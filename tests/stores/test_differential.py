"""Every store gives the model's answers to random programs.

The model is the in-process :class:`~rehydrate.Dehydrator`, behind a :class:`MemoryStore` on a
:class:`FakeClock` (the store verbs on top of it: ``replace``, ``push_many``'s checks, fenced acks).
Each store harness of ``tests/stores/harness_*.py`` runs the same program beside it, call after
call, and every answer is compared, errors included (by type). Where stores may rightly differ the
answer is normalized first: generated ids and claim tokens are store-made (a program refers to a
claim by its age, not its number), and absolute times are each store's own clock (compared as
offsets from ``now``). Revisions differ between stores too, so they are compared by what they mean:
each store's program passes back the revisions that store gave (the latest one read of an id, an
older one, or one nobody holds: the compare-and-set verbs then hit and miss alike), and a revision
read is compared as its place among those the program has seen (a new one, or the same as the
k-th seen), so a store must change the revision exactly where the model does and keep it where it
keeps it.

Limits get programs of their own (:func:`same_limit_answers`): steps of a few limit keys, each
answer compared likewise (times as offsets from ``now``, wakes in FIFO order, the listing's rows).

How many programs: the hypothesis profile (``HYPOTHESIS_PROFILE``, see ``tests/conftest.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

from rehydrate._core._limits import LimitAnswer, LimitInfo, LimitSpec
from rehydrate._occurrences import rearm
from rehydrate.abc import Store
from rehydrate.stores import MemoryStore, _sqlite
from rehydrate.stores._postgres import PostgresStore
from rehydrate.stores._sqlite import SQLiteStore
from rehydrate.testing import FakeClock
from tests.strategies import (
    REVISION_IDS,
    limit_programs,
    program_ids,
    revision_programs,
    store_programs,
)

from .harnesses import Harness

pytestmark = pytest.mark.anyio

#: A program's call, as drawn: ``(verb, *arguments)``.
Op = tuple[Any, ...]


#: A revision no element holds, in any store: the revisions a program reaches stay far below.
NOBODYS = 2**62


@attrs.define
class Seen:
    """What one store gave a program, to refer back to: its claim tokens and revisions per id,
    oldest first, and a label per revision, in the order the program first saw them."""

    tokens: dict[str, list[int]] = attrs.Factory(dict)
    revisions: dict[str, list[int]] = attrs.Factory(dict)
    labels: dict[int, int] = attrs.Factory(dict)
    #: The revision each claim (by its token) filed its element at: what a run's end compares.
    claimed: dict[int, int] = attrs.Factory(dict)

    def revision(self, id: str, revision: int) -> int:
        """Note a revision read of ``id``; its label: equal revisions, equal labels."""
        seen = self.revisions.setdefault(id, [])
        if revision not in seen:
            seen.append(revision)
        return self.labels.setdefault(revision, len(self.labels))

    def pick_revision(self, id: str, k: int) -> int:
        """The ``k``-th latest revision seen of ``id``, or one nobody holds."""
        seen = self.revisions.get(id, [])
        return seen[-1 - k] if k < len(seen) else NOBODYS


def _pick(tokens: dict[str, list[int]], id: str, k: int) -> int:
    """The ``k``-th latest token this store issued for ``id``, or one nobody holds."""
    issued = tokens.get(id, [])
    return issued[-1 - k] if k < len(issued) else 1


def _known(ids: list[str]) -> list[str]:
    return [id if id in program_ids else "gen" for id in ids]


def _offset(t: float | None, now: float) -> float | None:
    return None if t is None else round(t - now, 3)


async def apply(store: Store, advance: Callable[[float], Any], name: str, op: Op, n: int, seen: Seen) -> Any:
    """Run call ``n`` of a program; return an answer comparable between stores.

    ``seen``: the claim tokens and revisions this store gave the program so far.
    """
    tokens = seen.tokens
    verb, *args = op
    now = store.clock()
    try:
        match verb:
            case "push":
                return await store.push(name, f"{args[0]}#{n}", ttl=args[1], id=args[0])
            case "push_replace":
                return await store.push(name, f"{args[0]}#{n}", ttl=args[1], id=args[0], replace=True)
            case "push_gen":
                return _known([await store.push(name, f"gen#{n}", ttl=args[0])])
            case "push_many":
                return _known(await store.push_many(name, [(f"{id}#{n}", ttl, id) for id, ttl in args[0]]))
            case "pull":
                return await store.pull(name, args[0])
            case "poll":
                return await store.poll(name, limit=args[0])
            case "xpoll":
                return _known(await store.xpoll(name, limit=args[0]))
            case "xack":
                return await store.xack(name, *args[0], attempt=args[1])
            case "xack_token":
                return await store.xack(name, args[0], token=_pick(tokens, args[0], args[1]))
            case "claim":
                claims = await store.claim(name, lease=args[0], limit=args[1])
                for c in claims:
                    tokens.setdefault(c.id, []).append(c.token)
                    seen.claimed[c.token] = c.revision
                return [
                    (
                        c.element,
                        c.attempt,
                        _offset(c.lease_until, now),
                        _offset(c.due, now),
                        seen.revision(c.id, c.revision),
                    )
                    for c in claims
                ]
            case "ack":
                return await store.ack(name, [(id, _pick(tokens, id, k)) for id, k in args[0]])
            case "reschedule":
                return await store.reschedule(name, args[0], ttl=args[1], attempt=args[2])
            case "reschedule_token":
                token = _pick(tokens, args[0], args[2])
                return await store.reschedule(name, args[0], ttl=args[1], token=token)
            case "hand_back":
                items = [(id, _pick(tokens, id, k), ttl) for id, k, ttl in args[0]]
                return await store.hand_back(name, items)
            case "extend":
                token = _pick(tokens, args[0], args[2])
                return _offset(await store.extend(name, args[0], lease=args[1], token=token), now)
            case "update":
                return await store.update(name, args[0], f"{args[0]}@{n}")
            case "update_token":
                token = _pick(tokens, args[0], args[1])
                return await store.update(name, args[0], f"{args[0]}&{n}", token=token)
            case "rearm":
                # A run's end, through the scheduling layer (on the store's compare-and-set).
                token = _pick(tokens, args[0], args[1])
                ended = (args[0], token, seen.claimed.get(token, NOBODYS), None, f"{args[0]}^{n}", args[2])
                return await rearm(store, name, [ended])
            case "look":
                return await store.look(name, args[0])
            case "info":
                info = await store.info(name, args[0])
                if info is None:
                    return None
                label = seen.revision(args[0], info.revision)
                return (_offset(info.due, now), info.ttl, info.attempt, info.claimed, label)
            case "read":
                found = await store.read(name, args[0])
                if found is None:
                    return None
                element, info = found
                label = seen.revision(args[0], info.revision)
                return (element, _offset(info.due, now), info.ttl, info.attempt, info.claimed, label)
            case "replace_if":
                replaces = [(id, seen.pick_revision(id, k), f"{id}!{n}", ttl) for id, k, ttl in args[0]]
                done = await store.replace_if(name, replaces)
                answers = zip(replaces, done, strict=True)
                return [None if rev is None else seen.revision(id, rev) for (id, *_), rev in answers]
            case "update_if":
                revision = seen.pick_revision(args[0], args[1])
                rev = await store.update_if(name, args[0], revision, f"{args[0]}%{n}")
                return None if rev is None else seen.revision(args[0], rev)
            case "pull_if":
                return await store.pull_if(name, args[0], seen.pick_revision(args[0], args[1]))
            case "advance":
                advance(args[0])
                return None
            case "ttn":
                return _offset(await store.ttn(name), 0)
            case "ids":
                return _known(await store.ids(name, limit=args[0]))
            case "size":
                return await store.size(name)
            case "summary":
                s = await store.summary(name)
                return (s.size, s.due, s.claimed, _offset(s.ttn, 0))
    except Exception as exc:
        return type(exc).__name__
    raise AssertionError(f"no such verb in a program: {verb!r}")


async def same_answers(
    store: Store,
    advance: Callable[[float], Any],
    program: list[Op],
    *,
    check: Callable[[str], Awaitable[None]] | None = None,
    observe: tuple[str, ...] = (),
) -> None:
    """Run ``program`` on ``store`` (its time moved by ``advance``) and on the model, side by side,
    on a dehydrator name of its own; assert every answer is the model's. ``check(name)``, if given,
    runs after every call (a store's own invariants, seen from outside); so does a ``read`` of
    each id of ``observe``, compared too (every call's effect on those elements, their revisions
    included, is then seen at once)."""
    name = f"fuzz-{uuid.uuid4().hex[:12]}"
    clock = FakeClock(1000.0)
    async with MemoryStore(clock=clock) as model:
        model_seen, store_seen = Seen(), Seen()
        for n, op in enumerate(program):
            expected = await apply(model, clock.advance, name, op, n, model_seen)
            got = await apply(store, advance, name, op, n, store_seen)
            assert got == expected, (n, op)
            for id in observe:
                read = ("read", id)
                expected = await apply(model, clock.advance, name, read, n, model_seen)
                assert await apply(store, advance, name, read, n, store_seen) == expected, (n, op, read)
            if check is not None:
                await check(name)
        assert _known(await store.ids(name)) == _known(await model.ids(name))
        assert (name in await store.names()) == (name in await model.names())
        # Leave nothing behind for the next program on the same store.
        for id in await store.ids(name):
            await store.pull(name, id)
        assert await store.size(name) == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=store_programs)
async def test_same_answers_as_the_model(harness: Harness, program: list[Op]) -> None:
    """Random programs give the model's answers on every store.

    One store per test, shared by its examples (the harness fixture is opened once): each program
    works on a dehydrator of its own and empties it at the end. On asyncio only, and not in its
    debug mode: the contract suite runs every verb on trio and in debug mode already, and here the
    programs are what costs (debug mode makes them about four times slower on Redis).
    """
    await same_answers(harness.store, harness.advance, program)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=revision_programs)
async def test_revisions_mean_what_the_models_mean(harness: Harness, program: list[Op]) -> None:
    """Programs on two ids, of writes, reads and compare-and-sets: every store changes an
    element's revision where the model does (each write), keeps it where it keeps it (a
    renewal, a read, a write fenced out), and its conditional writes hit and miss alike."""
    await same_answers(harness.store, harness.advance, program, observe=REVISION_IDS)


# -- limits --------------------------------------------------------------------------------------------


def _answer(a: LimitAnswer) -> Any:
    """A step's answer (its times are durations already, from the step's ``now``); ``wake`` in
    its order (the FIFO's, which the contract defines: one woken per slot freed, head first)."""
    return (
        a.granted,
        _offset(a.retry_in, 0),
        _offset(a.parked_in, 0),
        [(w.name, w.id, w.attempt, _offset(w.ttl, 0)) for w in a.wake],
        [_offset(p, 0) for p in a.parked],
    )


def _row(info: LimitInfo, label: str, now: float, waiting: int) -> Any:
    holders = sorted((h, _offset(until, now)) for h, until in info.holders.items())
    return (label, info.key, holders, info.starts, waiting)


def _leaves_out_stale_waiters(store: Store) -> bool:
    """Whether ``store``'s listing leaves out the waiters past their horizon (as ``Store.limits``
    says, a waiter more than a horizon past its time is forgotten: the SQL stores' listing reads
    only the rows not yet to be forgotten, while the memory store and Redis forget them when a
    step walks past them, and count them until then). A key left with nothing but such waiters
    is then not listed at all. Only this field and that row may differ."""
    return isinstance(store, (SQLiteStore, PostgresStore))


def _live_waiters(model: MemoryStore, limit: str, key: str) -> int:
    """How many of the model's waiters of a key are within a horizon of their time."""
    entry = model._limits.get((limit, key))
    if entry is None:
        return 0
    state, _, horizon = entry
    now = model.clock()
    return sum(1 for w in state.waiters.values() if w.until + horizon > now)


def _no_sweep(store: Store) -> None:
    """Start ``store``'s count of limit steps afresh, so that no sweep falls within a program.

    Every so many steps (1024 in memory, 512 on SQL; Redis has none: a TTL instead) a step also
    forgets every waiter past its horizon, of every key, where a step of the model forgets only
    those it walks past: a waiter forgotten so and parked again joins the FIFO's tail, where the
    model's keeps its place; both are the rule (it was forgotten either way), one the model cannot
    tell. The harness's store is shared by the examples; a program is far shorter than a sweep's
    period."""
    if isinstance(store, MemoryStore):
        store._limit_steps = 0
    elif isinstance(store, SQLiteStore):
        _sqlite._LIMITS._steps = 0  # (one for every SQLite store of the process)
    elif isinstance(store, PostgresStore):
        store._limit_sql._steps = 0


async def apply_limit(
    store: Store,
    advance: Callable[[float], Any],
    names: list[str],
    specs: list[LimitSpec],
    op: Op,
    *,
    model: MemoryStore | None = None,
    live_only: bool = False,
) -> Any:
    """Run a limit step; return an answer comparable between stores. ``names[i]`` is the program's
    limit ``i``, of spec ``specs[i]``. A listing is filtered to the program's limits and labelled
    by index; on the model (``model``, with ``live_only``: the store under test leaves out the
    waiters past their horizon) its ``waiting`` counts those within it, and keys with nothing
    else are left out, as such a store's."""
    verb, *args = op
    now = store.clock()
    try:
        match verb:
            case "acquire":
                i, key, holder, waiter = args
                answer = await store.limit_acquire(names[i], key, holder, specs[i], waiter=waiter)
                return _answer(answer)
            case "park":
                i, key, waiters = args
                return _answer(await store.limit_park(names[i], key, specs[i], waiters))
            case "renew":
                i, key, holder = args
                return await store.limit_renew(names[i], key, holder, specs[i])
            case "release":
                i, key, holder = args
                return _answer(await store.limit_release(names[i], key, holder, specs[i]))
            case "limits":
                listed = await store.limits(None if args[0] is None else names[args[0]])
                labels = {name: str(i) for i, name in enumerate(names)}
                rows = []
                for info in listed:
                    if info.limit not in labels:
                        continue  # (an earlier program's, on the shared store)
                    waiting = info.waiting
                    if model is not None and live_only:
                        waiting = _live_waiters(model, info.limit, info.key)
                        if not info.holders and not info.starts and not waiting:
                            continue
                    rows.append(_row(info, labels[info.limit], now, waiting))
                return rows
            case "advance":
                advance(args[0])
                return None
    except Exception as exc:
        return type(exc).__name__
    raise AssertionError(f"no such verb in a limit program: {verb!r}")


async def same_limit_answers(
    store: Store, advance: Callable[[float], Any], specs: list[LimitSpec], program: list[Op]
) -> None:
    """Run the limit ``program`` on ``store`` and on the model side by side, on limit names of its
    own; assert every answer is the model's, and so is the listing of every limit after each step
    (what every step did to each key: its holders and their leases, its starts, its waiters)."""
    run = uuid.uuid4().hex[:12]
    names = [f"lim-{run}-{i}" for i in range(len(specs))]
    live_only = _leaves_out_stale_waiters(store)
    _no_sweep(store)
    clock = FakeClock(1000.0)
    async with MemoryStore(clock=clock) as model:
        observe = [("limits", i) for i in range(len(specs))]
        for n, op in enumerate(program):
            for step in (op, *observe):
                expected = await apply_limit(
                    model, clock.advance, names, specs, step, model=model, live_only=live_only
                )
                got = await apply_limit(store, advance, names, specs, step)
                assert got == expected, (n, op, step)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=limit_programs)
async def test_limits_answer_as_the_model(harness: Harness, program: tuple[Any, list[Op]]) -> None:
    """Random programs of limit steps (acquires with and without a waiter, parks, renewals,
    releases, listings, time passing) on two limits of two keys each give the model's answers
    on every store: grants and refusals, the earliest chances, where waiters are parked, whom
    each step wakes, in order, and what the listing shows."""
    spec_args, steps = program
    specs = [LimitSpec(**args) for args in spec_args]
    await same_limit_answers(harness.store, harness.advance, specs, steps)
