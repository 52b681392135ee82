"""The dehydrator: ReDe's verbs on a queue-map with a heap of queue heads.

Layout (see the README's "How it works"):

* one FIFO queue per distinct TTL (and one per distinct lease length, for claimed elements).
  Elements pushed with the same TTL under a clock that never goes back are due in push order,
  so each queue is sorted by due time for free and push is an append;
* an index from id to node, so pull, look, update and ack are O(1);
* a min-heap with one entry per non-empty queue, keyed by its head's ``(due, seq)``. ``ttn`` reads
  the top; a poll that finds nothing due looks at one entry; a poll of k due elements costs
  O(k + (queues touched) log M), and a k-way merge keeps the global due order across queues.
* at most ``_QUEUES_MAX`` TTL queues at once. Past that, an element whose TTL has no queue is
  *loose*: its node goes into the heap itself, as in a plain binary heap. A queue pays for itself
  only when its TTL repeats; with all-distinct TTLs (``at=`` deliveries, jittered retries) a queue
  per element would cost an object, a dict entry and a heap entry each, twice a plain heap's push.
  After a push finds no queue and no room, the next ``_SKIP`` pushes are filed loose without
  looking their TTL up, so a TTL that has a queue may have loose nodes too: the heap orders them
  all on ``(due, seq)`` alike.
* loose nodes due within ``_HORIZON`` seconds wait outside the heap, in time slots of
  ``1 / _SLOTS_PER_SECOND`` seconds, unsorted (a push is an append). A slot is opened when the
  heap's top comes within a slot of its start: its nodes, sorted once in C, become a *run*, a
  queue with one heap entry, taken as a queue's nodes are. Elements due close together with distinct due times
  (a burst: a fan-out, a cron minute, jittered retries) are then claimed as a run, with no heap
  operation each: a heap pop per element amid 20,000 scattered nodes cost as much as the rest
  of a claim (``benchmarks/bench_scheduler.py``, the burst pattern). Slots are few (at most one
  per ``1 / _SLOTS_PER_SECOND`` of the horizon), so a sparse one costs a bounded few: nodes due
  later than the horizon go into the heap as before.

Removal from the middle of a queue is lazy: the node is marked dead (its element replaced by
``_DEAD``, so the payload is dropped at once); dead nodes are skipped when they reach the head.
A pull is a dict pop and one store: deaths are not counted, but the nodes held are (seqs drawn
less nodes gone), and a filing that finds the dead outnumbering the live sweeps every queue, so
dead nodes never take more memory than the live ones had at the last filing (amortised O(1) per
removal). Heap entries are lazy too: an entry may name a head that has since died; it is
corrected when it reaches the top.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from heapq import heapify, heappop, heappush, heapreplace
from itertools import chain, count, islice, repeat
from operator import is_, itemgetter, lt
from typing import Any, Final, final

from rehydrate._core import _fence, _validate
from rehydrate._core._records import CLAIM_SETTERS, Claim, ElementInfo, Summary
from rehydrate._core._validate import Seconds
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    UnknownIdError,
)

__all__ = ["Claim", "Dehydrator", "ElementInfo", "Summary"]

_INF: Final = float("inf")
#: The longest TTL or lease (see ``_validate.MAX_SECONDS``), as a float for the hot path's compare.
_MAX: Final = float(_validate.MAX_SECONDS)
#: Trim a queue's taken prefix once it is longer than this and than the rest of the queue.
_COMPACT_MIN = 32
#: Sweep the dead nodes out of every queue once they outnumber the live ones by this much.
_SWEEP_SLACK = 1024
#: At most this many TTL queues at once; a push whose TTL has none past that is filed loose in the
#: heap. Large enough for every TTL of a scheduler's routes and retries, small enough that looking
#: a TTL up stays in the cache.
_QUEUES_MAX = 1024
#: A push that finds no queue for its TTL and no room for one files the next this many pushes loose
#: without looking their TTLs up. With TTLs that do not repeat (``at=`` deliveries, jittered
#: retries) the lookup always misses and costs as much as the heappush (benchmarks/
#: bench_push_floor.py); a TTL that repeats is back in its queue within this many pushes.
_SKIP = 63
#: A poll of everything due pops this many heap entries, and a 32nd of the heap, one by one
#: before it takes the due entries in one pass over the heap.
_BULK_MIN = 8
#: Loose nodes due within this many seconds of their filing wait in a time slot (see above); later
#: ones go into the heap. Bounds the slots, hence the memory of slots holding one node each.
_HORIZON = 64.0
#: Slots per second: a slot's nodes are sorted in one go when the heap's top reaches it, so a slot
#: is short enough for that sort to be no pause (a 64th of a second holds about 156 nodes at
#: 10,000 deliveries a second, a sort far shorter than a timer's precision) and long enough to
#: hold a burst whole.
_SLOTS_PER_SECOND = 64
#: An opened slot with fewer live nodes than this files them loose in the heap, not as a run.
_RUN_MIN = 3


def _opening(slot: float) -> float:
    """When a slot opens: a heap top due at or past this. Every node of slot ``s`` is due after
    ``(s - 1) / _SLOTS_PER_SECOND`` (the slot is its due time's floor in slots, and a floor is
    less than 1 below), so a top due before that sorts before all of them."""
    return (slot - 1) / _SLOTS_PER_SECOND


#: A node's ``attempt`` slot holds its claim stamp (see ``_fence``): the attempt in the low bits,
#: a claim number never repeated in this dehydrator above them. The stamp is the fencing token.
_STAMP: Final = _fence.STAMP
_ATTEMPTS: Final = _fence.ATTEMPTS
#: A dead node's element. Marking the element, not clearing the node's queue, keeps a pull from
#: touching the queue object (a cache miss per pull once there are many queues).
_DEAD: Final = object()


@final
class _Queue:
    """The FIFO of nodes that share one TTL (or lease), sorted by due time; or a *run*: an opened
    time slot's nodes, sorted (its ``key`` is the slot's number, in ``Dehydrator._runs``; its nodes
    are loose nodes, whose ``home`` is their TTL).

    ``items[head:]`` are the nodes not yet taken; popping from the front advances ``head`` and the
    list is trimmed once the taken prefix outweighs the rest (amortised O(1), and no per-queue
    block allocation as a deque would have: a million elements over 100,000 TTLs stay small).
    """

    __slots__ = ("head", "items", "key", "lease")

    def __init__(self, key: float, lease: bool) -> None:
        self.key = key
        self.lease = lease
        self.items: list[_Node] = []
        self.head = 0


#: One element: ``[due, seq, id, element, attempt, home, revision]``. A list, not a class: building
#: one is four times cheaper than calling an ``__init__``, and push is a hot path. ``home`` is the
#: node's queue, or, for a loose node (one that is its own heap entry), its TTL. ``revision`` is
#: the seq drawn by the write that last changed the element (a filing takes its own seq; an
#: ``update`` draws one it does not file; an ``extend`` keeps it): seqs are never drawn twice, so
#: no two writes, nor two elements under one id, ever share a revision. ``element`` is
#: ``_DEAD`` once the node is dead (pulled, acked, or filed anew elsewhere); claim refiles a node in
#: place. A node taken by poll or claim is behind its old queue's head, where nothing looks.
_Node = list[Any]

#: What a queue keeps in a slot behind its head, in place of the node that was there: the node
#: is freed at once instead of at the queue's next trim. A schedule's run ends by filing a fresh
#: node as it drops the old one (``replace_if``); a dropped node that lingered would make each
#: recurring occurrence a net new object for the garbage collector's count, and a burst of them
#: a collection every few hundred
#: (``benchmarks/bench_schedules.py``). Nothing reads a slot behind the head.
_GONE: Final[_Node] = [_INF, -1, "", _DEAD, 0, None, -1]


#: A heads-heap entry: ``[due, seq, queue]``, the ``(due, seq)`` of a queue's head when the entry
#: was made, or a loose node itself. Lists, so that the two compare (on ``(due, seq)``: seqs are
#: unique, so nothing past them is compared). ``entry[-1]`` is a ``_Queue`` only for a queue entry.
#: A loose node's key never changes while it is in the heap: claim pops it first, and a move files
#: a fresh node.
_Entry = list[Any]


def _is_claimed(node: _Node) -> bool:
    home = node[5]
    return type(home) is _Queue and home.lease


@final
class Dehydrator:
    """A time-indexed store that gives elements back once their TTL has run out.

    Not thread-safe and does no I/O: the async stores wrap it. Time comes from ``clock`` (seconds,
    ``time.monotonic`` by default). A clock that steps back is treated as standing still, so due
    order is never broken by it.

    >>> from rehydrate.testing import FakeClock
    >>> clock = FakeClock()
    >>> d = Dehydrator(clock=clock)
    >>> d.push("Dehydrate this", ttl=3, id="101")
    '101'
    >>> d.look("101")
    'Dehydrate this'
    >>> d.poll()
    []
    >>> clock.advance(3)
    3.0
    >>> d.poll()
    ['Dehydrate this']
    """

    __slots__ = (
        "_check_at",
        "_claims",
        "_clock",
        "_heads",
        "_id_prefix",
        "_ids",
        "_index",
        "_later",
        "_leases",
        "_left",
        "_loose_until",
        "_now",
        "_open_at",
        "_opened",
        "_queues",
        "_runs",
        "_seq",
        "_slots",
    )

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not callable(clock):
            raise InvalidTypeError(f"clock must be a callable returning seconds, not {type(clock).__name__}")
        self._clock = clock
        self._now = float("-inf")
        self._index: dict[str, _Node] = {}
        self._queues: dict[float, _Queue] = {}
        self._leases: dict[float, _Queue] = {}
        self._heads: list[_Entry] = []
        #: Time slots of loose nodes not yet in the heap: slot number -> its nodes, in filing
        #: order; the slot numbers in a heap; the earliest slot's opening time (the heap's top
        #: at or past it opens it: every node of the slot is then later); the last slot opened.
        self._later: dict[float, list[_Node]] = {}
        self._slots: list[float] = []
        self._open_at = _INF
        self._opened = -_INF
        #: The runs (opened slots) not yet drained, by key.
        self._runs: dict[float, _Queue] = {}
        self._seq = count()
        self._claims = count(1)
        #: Deaths are not counted (a pull is a dict pop and a store): the nodes in the queues and
        #: the heap are the seqs drawn less ``_left``, the nodes that have left them (taken by a
        #: poll or claim, or dropped dead); those beyond the index are dead. Memory grows only
        #: when a node is filed, so the filings check, once their seq reaches ``_check_at``.
        self._left = 0
        self._check_at = _SWEEP_SLACK
        #: Pushes whose seq is below this file loose without looking their TTL up (see _SKIP).
        self._loose_until = 0
        self._ids = count()
        self._id_prefix = os.urandom(6).hex()

    # -- time ---------------------------------------------------------------------------------

    def now(self) -> float:
        """The dehydrator's current time: its clock, never earlier than a time it already used."""
        now = self._clock()
        if now < self._now:
            return self._now
        self._now = now
        return now

    # -- ReDe verbs ---------------------------------------------------------------------------

    def push(self, element: Any, *, ttl: Seconds, id: str | None = None) -> str:
        """Dehydrate ``element`` for ``ttl`` seconds and return its id (PUSH, or GIDPUSH without ``id``).

        Raises :class:`~rehydrate.errors.DuplicateIdError` if ``id`` is already dehydrating.
        """
        # The hot path is written out in full: every Python call here costs as much as the heap.
        seconds: float
        if type(ttl) is float or type(ttl) is int:
            seconds = ttl
            if not 0 <= seconds <= _MAX:
                seconds = _validate.seconds(ttl, "ttl")
        else:
            seconds = _validate.seconds(ttl, "ttl")
        index = self._index
        if id is None:
            id = self._new_id()
        else:
            if type(id) is not str or not id or not id.isascii():
                _validate.element_id(id)
            if id in index:
                raise DuplicateIdError(id)
        now = self._clock()
        if now < self._now:
            now = self._now
        else:
            self._now = now
        seq = next(self._seq)
        if seq < self._loose_until:
            # Loose without a lookup: a recent push found no queue for its TTL and no room for one
            # (see _SKIP). The window ends before _check_at, so no check is due.
            due = now + seconds
            node = index[id] = [due, seq, id, element, 0, seconds, seq]
            # _file_loose, written out but for a new slot: a call per push costs as much as the
            # filing (a distinct-TTL push was measurably slower through it).
            if seconds < _HORIZON and (slot := due * _SLOTS_PER_SECOND // 1.0) > self._opened:
                nodes = self._later.get(slot)
                if nodes is None:
                    self._new_slot(slot, node)
                else:
                    nodes.append(node)
            else:
                heappush(self._heads, node)
            return id
        queues = self._queues
        queue = queues.get(seconds)
        if queue is not None:
            node = index[id] = [now + seconds, seq, id, element, 0, queue, seq]
            queue.items.append(node)
        elif len(queues) >= _QUEUES_MAX:
            # Loose: the node is its own heap entry. _check_at never goes down, so the window
            # ends before the next check is due.
            self._loose_until = min(seq + 1 + _SKIP, self._check_at)
            node = index[id] = [now + seconds, seq, id, element, 0, seconds, seq]
            self._file_loose(node)
        else:
            # A new TTL: _insert's work, written out.
            queue = queues[seconds] = _Queue(seconds, False)
            due = now + seconds
            node = index[id] = [due, seq, id, element, 0, queue, seq]
            queue.items.append(node)
            heappush(self._heads, [due, seq, queue])
        if seq >= self._check_at:
            self._check(seq)
        return id

    def push_many(self, items: Iterable[tuple[Any, Seconds, str | None]]) -> list[str]:
        """:meth:`push` for each ``(element, ttl, id)``, all at one ``now``; their ids, in order.

        Everything is checked before anything is filed: a bad item raises, and an id already
        dehydrating (or given twice) raises :class:`~rehydrate.errors.DuplicateIdError`, filing
        none. One clock read for the batch, as the stores that count a batch's ttls from the call:
        elements pushed with one due time share it exactly, and so come out of their queues in
        whole runs rather than interleaved with another batch's, one heap operation each.
        """
        batch: list[tuple[Any, float, str | None]] = []
        index = self._index
        seen: set[str] = set()
        for element, ttl, id in items:
            if type(ttl) is not float or not 0.0 <= ttl <= _MAX:
                ttl = _validate.seconds(ttl, "ttl")
            if id is not None:
                if type(id) is not str or not id or not id.isascii():
                    _validate.element_id(id)
                if id in index or id in seen:
                    raise DuplicateIdError(id)
                seen.add(id)
            batch.append((element, ttl, id))
        now = self.now()
        queues, seqs, insert = self._queues, self._seq, self._insert
        ids: list[str] = []
        for element, seconds, id in batch:
            if id is None:
                id = self._new_id()
            queue = queues.get(seconds)
            if queue is None:
                insert(id, element, 0, now + seconds, seconds, False)
            else:
                # _insert's common case (a queue for this TTL), written out: push_many is a hot path.
                seq = next(seqs)
                node = index[id] = [now + seconds, seq, id, element, 0, queue, seq]
                queue.items.append(node)
                if seq >= self._check_at:
                    self._check(seq)
            ids.append(id)
        return ids

    def pull(self, id: str) -> Any:
        """Remove and return the element ``id``, due or not (PULL); ``None`` if it is unknown."""
        node = self._index.pop(id, None) if type(id) is str else self._checked_get(id, pop=True)
        if node is None:
            _validate.element_id(id)  # only a miss can be a bad id: the index holds valid ones
            return None
        element = node[3]
        node[3] = _DEAD
        return element

    def look(self, id: str) -> Any:
        """Return the element ``id`` without removing it (LOOK); ``None`` if it is unknown."""
        node = self._index.get(id) if type(id) is str and id else self._checked_get(id)
        if node is None:
            _validate.element_id(id)  # only a miss can be a bad id: the index holds valid ones
            return None
        return node[3]

    def poll(self, *, limit: int | None = None) -> list[Any]:
        """Remove and return the due elements in due order, ties in push order (POLL).

        At most ``limit`` of them; the rest stay for the next call.
        """
        n = _validate.limit_or_inf(limit)
        now = self.now()
        if n == _INF:
            return self._take_all(now)
        return [node[3] for node in self._take(now, n, drop=True)]

    def xpoll(self, *, limit: int | None = None) -> list[str]:
        """Return the ids of the due elements in due order without removing them (XPOLL)."""
        n = _validate.limit_or_inf(limit)
        return [node[2] for node in self._due_nodes(self.now(), n)]

    def xack(self, *ids: str, attempt: int | None = None, token: int | None = None) -> list[Any]:
        """Remove each element that is due or claimed and return it; ``None`` in its place otherwise (XACK).

        ``None`` stands for an unknown id, an element not yet due and not claimed, or, when
        ``attempt`` (or a claim's ``token``) is given, an element whose attempt differs (or that has
        been claimed since, or is a new element under the same id).
        """
        _validate.ids(ids)
        _validate.attempt(attempt)
        _validate.token(token)
        now = self.now()
        index = self._index
        out: list[Any] = []
        for id in ids:
            node = index.get(id)
            if (
                node is None
                or (attempt is not None and node[4] & _ATTEMPTS != attempt)
                or (token is not None and node[4] != token)
                or (node[0] > now and not _is_claimed(node))
            ):
                out.append(None)
                continue
            del index[id]
            out.append(node[3])
            self._kill(node)
        return out

    def ack(self, id: str, *, token: int) -> bool:
        """Remove a claimed element if it is still under the claim ``token``; whether it did.

        The fenced acknowledgement a worker sends when it is done: the element need not be due.
        """
        node = self._checked_get(id)
        if _validate.token(token) is None:
            raise InvalidArgumentError("ack needs the claim's token")
        if node is None or node[4] != token or not _is_claimed(node):
            return False
        self._drop_claimed(node)
        return True

    def ack_many(self, claims: Iterable[tuple[str, int]]) -> list[bool]:
        """:meth:`ack` for each ``(id, token)``; whether each was acked.

        Every pair is checked before any is acked (a bad one raises and acks none). The batch a
        runner's acker sends: each pair checked once, where a loop of :meth:`ack` behind a store's
        own checks would check it twice.
        """
        pairs = _validate.acks(claims)
        index = self._index
        drop = self._drop_claimed
        done: list[bool] = []
        for id, token in pairs:
            node = index.get(id)
            # (_is_claimed written out: a call per ack)
            if node is None or node[4] != token or type(home := node[5]) is not _Queue or not home.lease:
                done.append(False)
            else:
                drop(node)
                done.append(True)
        return done

    def _drop_claimed(self, node: _Node) -> None:
        """Remove a claimed node (its claim checked): out of the index, dead in its lease queue."""
        del self._index[node[2]]
        node[3] = _DEAD  # _kill, written out
        # Acks come mostly in claim order: drop the dead front of the lease queue now, so that
        # its nodes leave at once and never add up to a sweep (an O(n) pause mid-delivery). The
        # queue's heap entry may now name a dead head: it is corrected when it surfaces.
        queue = node[5]
        head = queue.head
        items = queue.items
        if head < len(items) and items[head] is node:
            # _first_live then _advance, written out for the common case (the next node lives):
            # the two calls were a fifth of a one-shot delivery's bytecodes (an ack per delivery).
            items[head] = _GONE
            self._left += 1
            head += 1
            n = len(items)
            if head < n and items[head][3] is _DEAD:  # (acked before it: passed over too)
                queue.head = head
                self._first_live(queue)
                head = queue.head
            if head > _COMPACT_MIN and head * 2 > n:
                del items[:head]
                head = 0
            queue.head = head

    def ttn(self) -> float | None:
        """Seconds until the next element is due (TTN): ``0.0`` if one is due now, ``None`` if empty."""
        heads = self._heads
        # (``_open_at`` is infinite while no slot waits: one compare in the common case.)
        if (not heads or heads[0][0] >= self._open_at) and self._slots:
            self._ripen()
        if heads:
            entry = heads[0]
            queue = entry[-1]
            # The common cases, written out: the top entry names its queue's live head, or is a
            # live loose node.
            if type(queue) is _Queue:
                items = queue.items
                i = queue.head
                exact = i < len(items) and items[i][1] == entry[1] and items[i][3] is not _DEAD
            else:
                exact = entry[3] is not _DEAD
            if exact:
                due: float = entry[0]
                now = self._clock()
                if now < self._now:
                    now = self._now
                else:
                    self._now = now
                return due - now if due > now else 0.0
        top = self._top()
        if top is None:
            return None
        left: float = top[0] - self.now()
        return max(0.0, left)

    def next_due(self) -> float | None:
        """The due time of the next element in the dehydrator's clock, ``None`` if empty."""
        entry = self._top()
        return None if entry is None else entry[0]

    def update(self, id: str, element: Any, *, token: int | None = None) -> Any:
        """Replace the element ``id``, keeping its due time and claim, and return the old one (UPDATE).

        Raises :class:`~rehydrate.errors.UnknownIdError` (a :class:`KeyError`) if ``id`` is unknown,
        or, with ``token``, if it is no longer under that claim (fenced like :meth:`ack`).
        """
        _validate.token(token)
        node = self._checked_get(id)
        if node is None or (token is not None and (node[4] != token or not _is_claimed(node))):
            raise UnknownIdError(id)
        old = node[3]
        node[3] = element
        node[6] = self._new_revision()
        return old

    # -- revisions: compare-and-set -----------------------------------------------------------

    def read(self, id: str) -> tuple[Any, ElementInfo] | None:
        """The element ``id`` and its :class:`ElementInfo` (its revision included); ``None`` if
        it is unknown: what a compare-and-set reads first."""
        node = self._checked_get(id)
        return None if node is None else (node[3], self._info(node))

    def replace_if(self, items: Iterable[tuple[str, int, Any, Seconds]]) -> list[int | None]:
        """For each ``(id, revision, element, ttl)``, all at one ``now``: if ``id`` still has
        ``revision``, file ``element`` in its place anew (unclaimed, attempt 0, due at
        ``now + ttl``) and give its new revision; ``None`` in its place (nothing done) if not.

        Every item is checked before any is filed (see :meth:`Store.replace_if`). With a
        claim's revision, it ends that claim and files what comes next in one step: the end of
        a schedule's run, once per occurrence (a runner sends them in batches).
        """
        batch = _validate.conditional_replaces(items)
        now = self.now()
        index = self._index
        drop = self._drop_claimed
        insert = self._insert
        queues, seqs = self._queues, self._seq
        out: list[int | None] = []
        append = out.append
        for id, revision, element, seconds in batch:
            node = index.get(id)
            if node is None or node[6] != revision:
                append(None)
                continue
            home = node[5]
            if type(home) is _Queue and home.lease:
                drop(node)  # (drops the lease queue's dead front, as an ack does)
            else:
                del index[id]
                node[3] = _DEAD
            queue = queues.get(seconds)
            if queue is None:
                append(insert(id, element, 0, now + seconds, seconds, False))
                continue
            # _insert's common case written out: a batch's next occurrences share their ttl
            # (measured from one reading of the clock), so all but the first join its queue.
            seq = next(seqs)
            node = [now + seconds, seq, id, element, 0, queue, seq]
            queue.items.append(node)
            index[id] = node
            if seq >= self._check_at:
                self._check(seq)
            append(seq)
        return out

    def update_if(self, id: str, revision: int, element: Any) -> int | None:
        """Replace the element ``id`` if it still has ``revision``, keeping its due time, attempt
        and claim (as :meth:`update` without a token); its new revision, or ``None`` (nothing
        done) if it is unknown or has another revision."""
        node = self._checked_get(id)
        _validate.revision(revision)
        if node is None or node[6] != revision:
            return None
        node[3] = element
        new = node[6] = self._new_revision()
        return new

    def pull_if(self, id: str, revision: int) -> bool:
        """Remove the element ``id``, claimed or not, due or not, if it still has ``revision``;
        whether it did."""
        node = self._checked_get(id)
        _validate.revision(revision)
        if node is None or node[6] != revision:
            return False
        self._checked_get(id, pop=True)
        node[3] = _DEAD
        return True

    def _new_revision(self) -> int:
        """A revision for a write that files no node (``update``): a seq drawn and counted as
        gone at once, as ``_holds_dead`` does, so the count of nodes held stays exact."""
        self._left += 1
        return next(self._seq)

    # -- leases -------------------------------------------------------------------------------

    def claim(self, *, lease: Seconds, limit: int | None = None, ahead: Seconds = 0.0) -> list[Claim]:
        """Take due elements, in due order, for ``lease`` seconds.

        Each claimed element becomes due again at ``now + lease`` (so nobody else sees it until the
        lease runs out, and then it is redelivered) and its attempt goes up by one. ``ahead``
        also takes those due within that many seconds from now, except claimed ones whose lease
        has not run out (see :meth:`Store.claim`).
        """
        seconds = _validate.seconds(lease, "lease")
        n = _validate.limit_or_inf(limit)
        early = _validate.seconds(ahead, "ahead")
        now = self.now()
        if early:  # (those under a running lease are not taken early: see _take)
            taken = self._take(now + early, n, drop=False, leases_until=now)
        else:
            taken = self._take(now, n, drop=False)
        if not taken:
            return []
        due = now + seconds
        # Fetched after the take, which may have emptied (and so forgotten) this very lease queue.
        queue = self._leases.get(seconds)
        new = queue is None
        if queue is None:
            queue = self._leases[seconds] = _Queue(seconds, True)
        items = queue.items
        seq = self._seq
        stamps = self._claims
        claims: list[Claim] = []
        append = claims.append
        new_record = object.__new__
        (
            set_id,
            set_element,
            set_attempt,
            set_lease_until,
            set_token,
            set_due,
            set_claimed_at,
            set_revision,
        ) = CLAIM_SETTERS
        for node in taken:
            attempt = min((node[4] & _ATTEMPTS) + 1, _ATTEMPTS)
            token = node[4] = next(stamps) * _STAMP + attempt
            was_due = node[0]
            node[0] = due
            node[1] = node[6] = revision = next(seq)
            node[5] = queue
            items.append(node)
            # new_claim, written out: a call per element claimed.
            claim = new_record(Claim)
            set_id(claim, node[2])
            set_element(claim, node[3])
            set_attempt(claim, attempt)
            set_lease_until(claim, due)
            set_token(claim, token)
            set_due(claim, was_due)
            set_claimed_at(claim, now)
            set_revision(claim, revision)
            append(claim)
        if new:
            self._seat(queue)
        last = node[1]
        if last >= self._check_at:
            self._check(last)
        return claims

    def extend(self, id: str, *, lease: Seconds, token: int) -> float | None:
        """Keep a running claim alive: due again at ``now + lease``.

        Returns the new ``lease_until``, or ``None`` (and does nothing) if the element is gone,
        is not claimed, or is no longer under the claim ``token``.
        """
        seconds = _validate.seconds(lease, "lease")
        node = self._checked_get(id)
        if _validate.token(token) is None:
            raise InvalidArgumentError("extend needs the claim's token")
        if node is None or node[4] != token or not _is_claimed(node):
            return None
        due = self.now() + seconds
        self._move(node, due, seconds, lease=True, renew=True)
        return due

    def reschedule(
        self, id: str, *, ttl: Seconds, attempt: int | None = None, token: int | None = None
    ) -> bool:
        """Give the element ``id`` a new due time ``now + ttl`` (a delayed retry) and release its claim.

        Its attempt count is kept. Returns ``False`` (and does nothing) if the id is unknown or, when
        ``attempt`` or ``token`` is given, the element's attempt differs or its claim is another.
        """
        seconds = _validate.seconds(ttl, "ttl")
        node = self._checked_get(id)
        _validate.attempt(attempt)
        _validate.token(token)
        if (
            node is None
            or (attempt is not None and node[4] & _ATTEMPTS != attempt)
            or (token is not None and node[4] != token)
        ):
            return False
        self._move(node, self.now() + seconds, seconds, lease=False)
        return True

    def hand_back(self, id: str, *, token: int, ttl: Seconds = 0.0) -> bool:
        """Give back the claim ``token`` on ``id`` unrun: due again at ``now + ttl``, unclaimed,
        and the claim's attempt undone (see :meth:`Store.hand_back`).

        ``False`` (nothing done) if the element is gone, not claimed, or no longer under that
        claim. The stamp left is the token less one (the same claim number, one attempt fewer):
        a second hand-back, or any other fenced call, with that token then does nothing.
        """
        seconds = _validate.seconds(ttl, "ttl")
        node = self._checked_get(id)
        if _validate.token(token) is None:
            raise InvalidArgumentError("hand_back needs the claim's token")
        if node is None or node[4] != token or not _is_claimed(node):
            return False
        if token & _ATTEMPTS:
            node[4] = token - 1
        self._move(node, self.now() + seconds, seconds, lease=False)
        return True

    def info(self, id: str) -> ElementInfo | None:
        """Describe the element ``id``, or ``None`` if it is unknown."""
        node = self._checked_get(id)
        return None if node is None else self._info(node)

    @staticmethod
    def _info(node: _Node) -> ElementInfo:
        home = node[5]
        if type(home) is _Queue:
            ttl, claimed = home.key, home.lease
        else:
            ttl, claimed = home, False
        return ElementInfo(
            id=node[2], due=node[0], ttl=ttl, attempt=node[4] & _ATTEMPTS, claimed=claimed, revision=node[6]
        )

    def summary(self) -> Summary:
        """Counts for inspection: O(n), so not for a hot path."""
        now = self.now()
        due = claimed = 0
        for node in self._index.values():
            due += node[0] <= now
            claimed += _is_claimed(node)
        return Summary(size=len(self._index), due=due, claimed=claimed, ttn=self.ttn())

    def ids(self, *, limit: int | None = None) -> list[str]:
        """Every id, due or not, in due order (ties in filing order), at most ``limit``. O(n log n)."""
        n = _validate.limit(limit)
        nodes = sorted(self._index.values(), key=_ORDER)
        return [node[2] for node in (nodes if n is None else nodes[:n])]

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, id: object) -> bool:
        return id in self._index

    def __iter__(self) -> Iterator[str]:
        """The ids of every element, in no particular order."""
        return iter(list(self._index))

    def __repr__(self) -> str:
        return f"<Dehydrator: {len(self._index)} elements in {len(self._queues) + len(self._leases)} queues>"

    # -- internals ----------------------------------------------------------------------------

    def _new_id(self) -> str:
        index = self._index
        while True:
            id = f"{self._id_prefix}{next(self._ids):08x}"
            if id not in index:
                return id

    def _checked_get(self, id: object, *, pop: bool = False) -> _Node | None:
        key = _validate.element_id(id)
        if not pop:
            return self._index.get(key)
        return self._index.pop(key, None)

    def _insert(
        self, id: str, element: Any, attempt: int, due: float, key: float, lease: bool, revision: int = -1
    ) -> int:
        """File a node under ``key`` (a TTL, or a lease length when ``lease``), as push does; its
        revision is its seq unless ``revision`` (a lease's renewal keeps the element's). Returns it.

        Leases are never loose: a claimed node is told by its queue, and a scheduler has few.
        """
        queues = self._leases if lease else self._queues
        queue = queues.get(key)
        seq = next(self._seq)
        if revision < 0:
            revision = seq
        if queue is not None:
            node = [due, seq, id, element, attempt, queue, revision]
            queue.items.append(node)
        elif not lease and len(queues) >= _QUEUES_MAX:
            node = [due, seq, id, element, attempt, key, revision]
            self._file_loose(node)
        else:
            queue = queues[key] = _Queue(key, lease)
            node = [due, seq, id, element, attempt, queue, revision]
            queue.items.append(node)
            heappush(self._heads, [due, seq, queue])
        self._index[id] = node
        if seq >= self._check_at:
            self._check(seq)
        return revision

    def _file_loose(self, node: _Node) -> None:
        """File a loose node: in its time slot if it is due within the horizon (and its slot is
        not open yet), else in the heap."""
        if node[5] < _HORIZON and (slot := node[0] * _SLOTS_PER_SECOND // 1.0) > self._opened:
            nodes = self._later.get(slot)
            if nodes is None:
                self._new_slot(slot, node)
            else:
                nodes.append(node)
        else:
            heappush(self._heads, node)

    def _new_slot(self, slot: float, node: _Node) -> None:
        self._later[slot] = [node]
        slots = self._slots
        heappush(slots, slot)
        if slots[0] == slot:
            self._open_at = _opening(slot)

    def _ripen(self, until: float = -_INF) -> None:
        """Open time slots until the heap's top is due before every node still in one, and (with
        ``until``) until none of those is due at ``until``.

        Called before the top is read: a slot's nodes are all due after its opening time, so a top
        due before that is the earliest of everything held.
        """
        heads, slots = self._heads, self._slots
        while slots and (not heads or heads[0][0] >= self._open_at or self._open_at <= until):
            self._open(heappop(slots))

    def _spill(self, now: float) -> list[_Node]:
        """Take out of their slots, as loose nodes (dead ones too, as the heap holds them), the
        nodes of every slot that opens by ``now``, so that no node due by then is left in a slot."""
        slots, later = self._slots, self._later
        latest = max(slots)
        if _opening(latest) <= now:  # every slot: no heap of slots popped
            spilled = list(chain.from_iterable(later.values()))
            later.clear()
            slots.clear()
            self._open_at = _INF
        else:
            spilled = []
            while self._open_at <= now:
                latest = heappop(slots)
                spilled += later.pop(latest)
                self._open_at = _opening(slots[0])
        self._opened = latest
        return spilled

    def _open(self, slot: float) -> None:
        """Move a slot's live nodes into the heap: sorted once, as a run with one heap entry."""
        nodes = self._later.pop(slot)
        self._opened = slot
        slots = self._slots
        self._open_at = _opening(slots[0]) if slots else _INF
        live = [node for node in nodes if node[3] is not _DEAD]
        if len(live) < len(nodes):
            self._left += len(nodes) - len(live)
        if len(live) < _RUN_MIN:
            for node in live:
                heappush(self._heads, node)
            return
        # Stable: equal due times keep their filing order, which is seq order.
        live.sort(key=_DUE)
        run = self._runs[slot] = _Queue(slot, False)
        run.items = live
        first = live[0]
        heappush(self._heads, [first[0], first[1], run])

    def _move(self, node: _Node, due: float, key: float, *, lease: bool, renew: bool = False) -> None:
        """Re-file a live node under a new due time. The old node dies in place; a fresh one is
        filed, with a new revision unless ``renew`` (a lease's renewal keeps it)."""
        id, element, attempt = node[2], node[3], node[4]
        self._kill(node)
        self._insert(id, element, attempt, due, key, lease, node[6] if renew else -1)

    @staticmethod
    def _kill(node: _Node) -> None:
        """Mark a node dead (already out of the index) and drop its payload."""
        node[3] = _DEAD

    def _check(self, seq: int) -> None:
        """Called by the filing of ``seq``: sweep if the dead nodes outnumber the live ones by more
        than the slack, and say at which seq to look again.

        The nodes filed are ``seq + 1``. The next look comes no later than the filing that could
        take the dead past the bound, were no other node to die or leave meanwhile; deaths alone
        allocate nothing, so memory stays within twice the live nodes, plus the slack, of the last look.
        """
        live = len(self._index)
        held = seq + 1 - self._left
        if held - live > live + _SWEEP_SLACK:
            self._sweep()
            self._left = seq + 1 - live
            held = live
        self._check_at = seq + 1 + max(0, 2 * live + _SWEEP_SLACK - held)

    def _sweep(self) -> None:
        """Drop the dead nodes from every queue and rebuild the heap, without dead loose nodes or
        the entries of forgotten queues. O(n), but only once the dead outnumber the live: amortised
        O(1) a death.
        """
        for queues in (self._queues, self._leases, self._runs):
            for key, queue in list(queues.items()):
                items = [node for node in queue.items[queue.head :] if node[3] is not _DEAD]
                if items:
                    queue.items, queue.head = items, 0
                else:
                    del queues[key]
                    queue.items, queue.head = [], 0
        later = self._later
        for slot, nodes in list(later.items()):
            nodes[:] = [node for node in nodes if node[3] is not _DEAD]
            if not nodes:
                del later[slot]
        self._slots[:] = later
        heapify(self._slots)
        self._open_at = _opening(self._slots[0]) if self._slots else _INF
        self._rebuild_heads()

    def _rebuild_heads(self) -> None:
        """The heap anew: an exact entry per live queue, and the live loose nodes. O(heap)."""
        heads: list[_Entry] = [
            entry for entry in self._heads if type(entry[-1]) is not _Queue and entry[3] is not _DEAD
        ]
        for queues in (self._queues, self._leases, self._runs):
            for queue in queues.values():
                node = self._first_live(queue)
                if node is not None:
                    heads.append([node[0], node[1], queue])
        heapify(heads)
        self._heads = heads

    def _first_live(self, queue: _Queue) -> _Node | None:
        """The queue's first live node, dropping the dead ones in front of it."""
        items, i = queue.items, queue.head
        n = len(items)
        if i < n and items[i][3] is not _DEAD:
            return items[i]
        start = i
        while i < n and items[i][3] is _DEAD:
            i += 1
        dead = i - start
        self._left += dead
        if dead == 1:
            items[start] = _GONE
        elif dead:
            items[start:i] = repeat(_GONE, dead)
        queue.head = i
        return items[i] if i < n else None

    def _seat(self, queue: _Queue) -> None:
        """Give the queue a heap entry for its live head, or forget it if it has none.

        A queue left in the map without an entry would take later pushes that no poll can see.
        """
        node = self._first_live(queue)
        if node is None:
            self._forget(queue)
        else:
            heappush(self._heads, [node[0], node[1], queue])

    def _top(self) -> _Entry | None:
        """The heap's top entry once it is exact (names its queue's live head), or ``None``."""
        heads = self._heads
        while True:
            if (not heads or heads[0][0] >= self._open_at) and self._slots:
                self._ripen()
            if not heads:
                return None
            entry = heads[0]
            queue = entry[-1]
            if type(queue) is not _Queue:
                if entry[3] is not _DEAD:
                    return entry
                heappop(heads)
                self._left += 1
                continue
            node = self._first_live(queue)
            if node is None:
                heappop(heads)
                if entry[0] == _INF:  # an entry _repair sank, and counted as held
                    self._left += 1
                self._forget(queue)
            elif node[1] == entry[1]:
                return entry
            else:
                heapreplace(heads, [node[0], node[1], queue])

    @staticmethod
    def _advance(queue: _Queue, head: int) -> None:
        """Move the queue's head to ``head``, trimming the taken prefix once it outweighs the rest
        (the slots passed over hold ``_GONE`` until then)."""
        items = queue.items
        if head > _COMPACT_MIN and head * 2 > len(items):
            del items[:head]
            head = 0
        elif head > queue.head:
            items[queue.head : head] = repeat(_GONE, head - queue.head)
        queue.head = head

    def _forget(self, queue: _Queue) -> None:
        """Drop an emptied queue (its heap entry, if any, goes stale and is dropped on surfacing)."""
        queue.items = []
        queue.head = 0
        queues = self._leases if queue.lease else self._queues
        if queues.get(queue.key) is queue:
            del queues[queue.key]
        elif self._runs.get(queue.key) is queue:
            del self._runs[queue.key]

    def _take(
        self, now: float, limit: float, *, drop: bool, leases_until: float | None = None
    ) -> list[_Node]:
        """Pop up to ``limit`` due nodes in ``(due, seq)`` order, merging the queues through the heap.

        From the top queue it takes every node that sorts before the runner-up's head, so a run
        of nodes from one queue costs one heap operation, not one each; a loose node costs one.
        With ``drop`` the nodes leave the index (poll); without, they stay indexed (claim
        re-files them). With ``leases_until`` (a claim ahead of time), claimed nodes are taken
        only up to that time, the others up to ``now``: a running claim's lease is never cut
        short. A lease queue whose head is due later is set aside while the others are read.
        """
        heads = self._heads
        index = self._index
        slots = self._slots
        out: list[_Node] = []
        append = out.append
        left = limit
        aside: list[list[Any]] = []
        while left > 0:
            if (not heads or heads[0][0] >= self._open_at) and slots:
                self._ripen()
            if not heads:
                break
            entry = heads[0]
            if entry[0] > now:
                break
            queue = entry[-1]
            if leases_until is not None and type(queue) is _Queue and queue.lease and entry[0] > leases_until:
                aside.append(heappop(heads))
                continue
            if type(queue) is not _Queue:
                heappop(heads)
                if entry[3] is _DEAD:
                    self._left += 1
                    continue
                append(entry)
                if drop:
                    del index[entry[2]]
                left -= 1
                continue
            # Everything before the runner-up's head, and not after now, can go in one run.
            size = len(heads)
            if size > 1:
                runner = heads[1]
                if size > 2 and heads[2] < runner:
                    runner = heads[2]
                bound, bound_seq = runner[0], runner[1]
                if bound > now:
                    bound, bound_seq = now, -1
            else:
                bound, bound_seq = now, -1
            if bound >= self._open_at:  # a slot's nodes are all due after it
                bound, bound_seq = self._open_at, -1
            if leases_until is not None and queue.lease and bound > leases_until:
                bound, bound_seq = leases_until, -1
            items = queue.items
            i = queue.head
            n = len(items)
            dead = 0
            while i < n:
                node = items[i]
                if node[3] is _DEAD:
                    i += 1
                    dead += 1
                    continue
                due = node[0]
                if due > bound or (due == bound and bound_seq >= 0 and node[1] > bound_seq):
                    break
                i += 1
                append(node)
                if drop:
                    del index[node[2]]
                left -= 1
                if left <= 0:
                    break
            self._left += dead
            if i >= n:
                heappop(heads)
                self._forget(queue)
                continue
            self._advance(queue, i)
            head = self._first_live(queue)
            if head is None:
                heappop(heads)
                self._forget(queue)
            else:
                heapreplace(heads, [head[0], head[1], queue])
        for entry in aside:
            heappush(heads, entry)
        self._left += len(out)  # gone from their queues (claim files them anew, under new seqs)
        return out

    def _due_nodes(self, now: float, limit: float) -> list[_Node]:
        """The first ``limit`` due live nodes in ``(due, seq)`` order, without removing any.

        A best-first walk of the heads heap: a heap position is opened only when its stored key
        is the smallest thing left, so the cost is O(limit log F) for a frontier of F, however
        many queues are due. Dead nodes at the front of a queue are dropped on the way.
        """
        out: list[_Node] = []
        self._ripen(now)  # no node due by now is left in a slot
        top = self._top()  # drops dead loose nodes at the top: those an xpoll + xack loop leaves
        heads = self._heads
        if top is None or top[0] > now or limit <= 0:
            return out
        size = len(heads)
        tick = count()
        # (due, seq, tiebreak, what, position): an unopened heap slot (None, its position), a
        # queue cursor (the queue, a position in it) or a loose node (the node, -1).
        frontier: list[tuple[float, int, int, Any, int]] = [(top[0], top[1], next(tick), None, 0)]
        first_live = self._first_live
        stale: list[int] = []
        while frontier:
            _, _, _, queue, pos = heappop(frontier)
            if queue is None:
                entry = heads[pos]
                opened = entry[-1]
                if type(opened) is not _Queue:
                    if entry[3] is _DEAD:
                        stale.append(pos)
                    else:
                        heappush(frontier, (entry[0], entry[1], next(tick), entry, -1))
                else:
                    node = first_live(opened)
                    if node is None or node[1] != entry[1]:
                        stale.append(pos)
                    if node is not None and node[0] <= now:
                        heappush(frontier, (node[0], node[1], next(tick), opened, opened.head))
                for child in (2 * pos + 1, 2 * pos + 2):
                    if child < size and heads[child][0] <= now:
                        entry = heads[child]
                        heappush(frontier, (entry[0], entry[1], next(tick), None, child))
                continue
            if pos < 0:
                out.append(queue)
                if len(out) >= limit:
                    break
                continue
            items = queue.items
            out.append(items[pos])
            if len(out) >= limit:
                break
            pos += 1
            n = len(items)
            while pos < n and items[pos][3] is _DEAD:
                pos += 1
            if pos < n and items[pos][0] <= now:
                node = items[pos]
                heappush(frontier, (node[0], node[1], next(tick), queue, pos))
        if stale:
            self._repair(stale)
        return out

    def _repair(self, positions: list[int]) -> None:
        """Correct heap entries whose queue head has died since (acked or pulled in place).

        Keys only grow when heads die, so each entry sifts down within its own subtree; going
        from the deepest position up, no repair moves an entry another one is still to fix.
        Without this, an xpoll + xack loop would walk the same stale entries on every call.
        """
        heads = self._heads
        size = len(heads)
        for pos in sorted(positions, reverse=True):
            entry = heads[pos]
            queue = entry[-1]
            if type(queue) is not _Queue:
                entry[0] = _INF  # a dead loose node sinks; dropped when it surfaces or at a sweep
            else:
                node = self._first_live(queue)
                if node is None:
                    self._forget(queue)
                    # Sinks; dropped when it surfaces or at a sweep, which it counts toward.
                    entry = [_INF, entry[1], queue]
                    self._left -= 1
                else:
                    entry = [node[0], node[1], queue]
            # Sift down from pos.
            child = 2 * pos + 1
            while child < size:
                right = child + 1
                if right < size and heads[right] < heads[child]:
                    child = right
                if not heads[child] < entry:
                    break
                heads[pos] = heads[child]
                pos = child
                child = 2 * pos + 1
            heads[pos] = entry

    def _take_all(self, now: float) -> list[Any]:
        """Poll every due element: cut each due queue's due prefix, merge the prefixes with one sort.

        Each queue is sorted by due time (dead nodes keep their place), so its due prefix is found
        by bisection and cut with a slice; one stable sort on the due time merges the prefixes in
        C, O(k log r) for r prefixes, instead of a heap operation per element when the queues'
        due times interleave. A poll of many elements is bound by memory, not arithmetic (a
        million nodes do not fit in a cache), so each pass over the nodes counts: the dead are
        looked for only if there are any, a poll that takes every element clears the index
        instead of probing it once per node, and the taken nodes are not marked dead (they are
        behind their queue's head and out of the index, where nothing looks at them again).
        Once more than a 32nd of the heap is due, the due entries are taken in one pass over
        the heap; when every queue is wholly due, nothing is cut (see ``_take_everything``).
        """
        heads = self._heads
        if self._open_at <= now:
            later = self._later
            latest = max(self._slots)
            if (
                _opening(latest) <= now  # every slot opens by now,
                and max(map(_DUE, later[latest])) <= now  # the last one's nodes are due (so all are)
                and self._all_due(now)
            ):
                return self._take_everything()  # (it takes the index's nodes: slots and all)
            # The slots that open by now, spilled into the heap unsorted: this poll sorts what it
            # takes once, at its end (a run each would sort them twice).
            spilled = self._spill(now)
            if len(spilled) > len(heads) >> 2:
                heads += spilled
                heapify(heads)
            else:
                for node in spilled:
                    heappush(heads, node)
        if not heads or heads[0][0] > now:
            return []
        dead = self._holds_dead()
        # A backlog (everything due) in a big heap goes straight to the bulk take. A few of the
        # heap's leaves tell, in O(1), whether that is worth an O(M) look: the latest entry is a
        # leaf. A few queues are better cut (one queue's due prefix is one slice, and no sort).
        # (Once the slots opening by now are spilled, those left hold nothing due.)
        if len(heads) > _BULK_MIN and not self._slots and self._leaves_due(now) and self._all_due(now):
            return self._take_everything()
        entries: list[_Entry] = []
        # Pop the due entries one by one while there are few; once many are due, look at the
        # whole heap at once (O(M), paid for by the pops already made), so a poll of a few
        # elements stays O(k log M).
        budget = (len(heads) >> 5) + _BULK_MIN
        while heads and heads[0][0] <= now:
            if not budget:
                if not self._slots and self._all_due(now):
                    return self._take_everything()
                keep: list[_Entry] = []
                for entry in heads:
                    (entries if entry[0] <= now else keep).append(entry)
                heapify(keep)
                self._heads = heads = keep
                # In due order, as the pops would have given them: the queues are then visited
                # in about the order they were made in, which the caches like.
                entries.sort(key=_DUE)
                break
            budget -= 1
            entries.append(heappop(heads))
        nodes: list[_Node] = []
        runs = 0
        for entry in entries:
            queue = entry[-1]
            if type(queue) is not _Queue:
                nodes.append(entry)  # a loose node (perhaps dead: those are left out below)
                runs += 1
                continue
            items = queue.items
            n = len(items)
            end = bisect_right(items, now, queue.head, n, key=_DUE)
            if end > queue.head:
                nodes += items[queue.head : end]
                runs += 1
            if end >= n:
                self._forget(queue)
                continue
            self._advance(queue, end)
            self._seat(queue)
        self._left += len(nodes)
        # Pulled or moved nodes keep their place in a queue until a sweep: leave them out.
        if dead and any(map(is_, map(_ELEMENT, nodes), repeat(_DEAD))):
            nodes = [node for node in nodes if node[3] is not _DEAD]
        index = self._index
        if len(nodes) == len(index):  # every live node is indexed: this poll takes them all
            index.clear()
        else:
            for node in nodes:
                del index[node[2]]
        if runs > 1:
            return _sorted_elements(nodes)
        return list(map(_ELEMENT, nodes))

    def _holds_dead(self) -> bool:
        """Whether any dead node may be held: the nodes held outnumber the live ones."""
        drawn = next(self._seq) + 1  # this seq is never filed: it counts as gone at once
        self._left += 1
        return drawn - self._left > len(self._index)

    def _leaves_due(self, now: float) -> bool:
        """Whether a sample of the heap's leaves, eight spread over them, is all due."""
        heads = self._heads
        n = len(heads)
        step = (n - n // 2) // 8 or 1
        return all(heads[i][0] <= now for i in range(n - 1, n // 2 - 1, -step))

    def _all_due(self, now: float) -> bool:
        """Whether every live node outside the time slots is due: one look at each queue's tail,
        one pass over the heap's leaves."""
        for queues in (self._queues, self._leases, self._runs):
            for queue in queues.values():
                items = queue.items
                if items and items[-1][0] > now:
                    return False
        # The heap's latest entry is a leaf: the leaves' due times in one pass in C. A queue's
        # entry is no later than its tail, and a dead loose node or a sunk entry that is not due
        # only sends the poll the long way.
        heads = self._heads
        return not heads or max(map(_DUE, islice(heads, len(heads) // 2, None))) <= now

    def _take_everything(self) -> list[Any]:
        """Poll when every element is due: take the index's nodes, drop every queue wholesale.

        No queue is cut and no heap entry popped. The queues' lists are emptied, as ``_forget``
        does, so no queue and its nodes are left in a reference cycle for the collector.
        """
        index = self._index
        nodes = list(index.values())
        index.clear()
        for queues in (self._queues, self._leases, self._runs):
            for queue in queues.values():
                queue.items = []
                queue.head = 0
            queues.clear()
        self._heads = []
        self._later.clear()
        self._slots.clear()
        self._open_at = _INF
        self._loose_until = 0
        filed = next(self._seq) + 1  # every seq drawn, this one too: none is held now
        self._left = filed
        self._check_at = filed + _SWEEP_SLACK
        return _in_due_order(nodes)


def _in_due_order(nodes: list[_Node]) -> list[Any]:
    """The nodes' elements in ``(due, seq)`` order; ``nodes`` is the index's, in filing order mostly.

    A million nodes do not fit in a cache, so what costs is reading them out of order. When the
    nodes are in filing order (nothing was refiled), a stable sort on the due time alone keeps
    ties in filing order: the seqs, the due times and the elements are read in list order, and
    the elements are sorted with the due times as keys (``list.sort`` computes each item's key
    once, in list order, before it sorts: the key function hands out the due times one by one).
    """
    seqs = list(map(_SEQ, nodes))
    if all(map(lt, seqs, islice(seqs, 1, None))):
        del seqs
        dues = list(map(_DUE, nodes))
        elements = list(map(_ELEMENT, nodes))
        elements.sort(key=partial(next, iter(dues)))
        return elements
    del seqs
    return _sorted_elements(nodes)


def _sorted_elements(nodes: list[_Node]) -> list[Any]:
    """The nodes' elements in ``(due, seq)`` order.

    Float keys compare fast, and a sort on the due time alone is exact unless two due times are
    equal: then, and only then, sort on ``(due, seq)``. The check rides on the
    pass that collects the elements: one more read of each node, in due order, would cost as much
    as the sort.
    """
    nodes.sort(key=_DUE)
    out: list[Any] = []
    append = out.append
    prev = None
    for node in nodes:
        due = node[0]
        if due == prev:
            nodes.sort(key=_ORDER)
            return list(map(_ELEMENT, nodes))
        prev = due
        append(node[3])
    return out


_ORDER: Final = itemgetter(0, 1)
_DUE: Final = itemgetter(0)
_SEQ: Final = itemgetter(1)
_ELEMENT: Final = itemgetter(3)
