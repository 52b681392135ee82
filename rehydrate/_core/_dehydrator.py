"""The dehydrator: ReDe's verbs on a queue-map with a heap of queue heads.

Layout (see the README's "How it works"):

* one FIFO queue per distinct TTL (and one per distinct lease length, for claimed elements).
  Elements pushed with the same TTL under a clock that never goes back are due in push order,
  so each queue is sorted by due time for free and push is an append;
* an index from id to node, so pull, look, update and ack are O(1);
* a min-heap with one entry per non-empty queue, keyed by its head's ``(due, seq)``. ``ttn`` reads
  the top; a poll that finds nothing due looks at one entry; a poll of k due elements costs
  O(k + (queues touched) log M), and a k-way merge keeps the global due order across queues.

Removal from the middle of a queue is lazy: the node is marked dead (``node.queue = None``) and its
payload dropped at once; dead nodes are skipped when they reach the head, and a queue that is more
dead than alive is compacted, so the memory of pulled elements stays bounded. Heap entries are
lazy too: an entry may name a head that has since died; it is corrected when it reaches the top.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from heapq import heapify, heappop, heappush, heapreplace
from itertools import count
from typing import Any, Final, final

import attrs

from rehydrate._core import _validate
from rehydrate._core._validate import Seconds
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    UnknownIdError,
)

__all__ = ["Claim", "Dehydrator", "ElementInfo"]

_INF: Final = float("inf")
#: Compact a queue once it holds more than this many dead nodes and more dead than live ones.
_COMPACT_MIN = 32
#: Rebuild the heads heap once it holds this many more entries than twice the live queues.
_REBUILD_SLACK = 64


@attrs.frozen(kw_only=True)
class Claim:
    """One element taken by :meth:`Dehydrator.claim`, leased to the claimer until ``lease_until``.

    ``attempt`` is 1 on first delivery and counts every claim since. Pass it back to ``xack``,
    ``reschedule`` or ``extend`` as the fencing token: once the lease runs out and someone else
    claims the element, the attempt moves on and a stale claimer's calls do nothing.
    """

    id: str
    element: Any
    attempt: int
    lease_until: float
    #: When the element became due (its lateness is ``claimed_at - due``).
    due: float = attrs.field(default=0.0, eq=False)
    #: When it was claimed, in the same clock.
    claimed_at: float = attrs.field(default=0.0, eq=False)

    @property
    def lateness(self) -> float:
        """Seconds between the element's due time and its claim."""
        return max(0.0, self.claimed_at - self.due)


@attrs.frozen(kw_only=True)
class ElementInfo:
    """What :meth:`Dehydrator.info` knows about one element, in the dehydrator's clock."""

    id: str
    #: When the element is (or was) due, in the dehydrator's clock.
    due: float
    #: The TTL (or lease) it was last scheduled with, in seconds.
    ttl: float
    #: How many times it has been claimed.
    attempt: int
    #: Whether it is under a claim that has not been acked or rescheduled (its lease may have run out).
    claimed: bool


@final
class _Queue:
    """The FIFO of nodes that share one TTL (or lease), sorted by due time.

    ``items[head:]`` are the nodes not yet taken; popping from the front advances ``head`` and the
    list is trimmed once the taken prefix outweighs the rest (amortised O(1), and no per-queue
    block allocation as a deque would have: a million elements over 100,000 TTLs stay small).
    """

    __slots__ = ("dead", "head", "items", "key", "lease")

    def __init__(self, key: float, lease: bool) -> None:
        self.key = key
        self.lease = lease
        self.items: list[_Node] = []
        self.head = 0
        #: Dead nodes still in ``items[head:]``.
        self.dead = 0

    def live(self) -> int:
        return len(self.items) - self.head - self.dead


@final
class _Node:
    """One element. ``queue is None`` marks it dead (pulled, acked or moved elsewhere)."""

    __slots__ = ("attempt", "due", "element", "id", "queue", "seq")

    def __init__(
        self, due: float, seq: int, id: str, element: Any, attempt: int, queue: _Queue | None
    ) -> None:
        self.due = due
        self.seq = seq
        self.id = id
        self.element = element
        self.attempt = attempt
        self.queue = queue


#: A heads-heap entry: the ``(due, seq)`` of a queue's head when the entry was made, and the queue.
_Entry = tuple[float, int, _Queue]


@final
class Dehydrator:
    """A time-indexed store that gives elements back once their TTL has run out.

    Not thread-safe and does no I/O: the async stores wrap it. Time comes from ``clock`` (seconds,
    ``time.monotonic`` by default). A clock that steps back is treated as standing still, so due
    order is never broken by it.

    >>> d = Dehydrator()
    >>> d.push("Dehydrate this", ttl=3, id="101")
    '101'
    >>> d.look("101")
    'Dehydrate this'
    >>> d.poll()
    []
    """

    __slots__ = ("_clock", "_heads", "_id_prefix", "_ids", "_index", "_leases", "_now", "_queues", "_seq")

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not callable(clock):
            raise InvalidTypeError(f"clock must be a callable returning seconds, not {type(clock).__name__}")
        self._clock = clock
        self._now = float("-inf")
        self._index: dict[str, _Node] = {}
        self._queues: dict[float, _Queue] = {}
        self._leases: dict[float, _Queue] = {}
        self._heads: list[_Entry] = []
        self._seq = count()
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
        seconds: float
        if type(ttl) is float or type(ttl) is int:
            seconds = ttl
            if not 0 <= seconds < _INF:
                seconds = _validate.seconds(ttl, "ttl")
        else:
            seconds = _validate.seconds(ttl, "ttl")
        index = self._index
        if id is None:
            id = self._new_id()
        elif type(id) is not str or not id:
            _validate.element_id(id)
        elif id in index:
            raise DuplicateIdError(id)
        self._insert(id, element, 0, self.now() + seconds, seconds, False)
        return id

    def pull(self, id: str) -> Any:
        """Remove and return the element ``id``, due or not (PULL); ``None`` if it is unknown."""
        node = self._index.pop(id, None) if type(id) is str and id else self._checked_get(id, pop=True)
        if node is None:
            return None
        element = node.element
        self._kill(node)
        return element

    def look(self, id: str) -> Any:
        """Return the element ``id`` without removing it (LOOK); ``None`` if it is unknown."""
        node = self._index.get(id) if type(id) is str and id else self._checked_get(id)
        return None if node is None else node.element

    def poll(self, *, limit: int | None = None) -> list[Any]:
        """Remove and return the due elements in due order, ties in push order (POLL).

        At most ``limit`` of them; the rest stay for the next call.
        """
        n = _validate.limit_or_inf(limit)
        return [node.element for node in self._take(self.now(), n, drop=True)]

    def xpoll(self, *, limit: int | None = None) -> list[str]:
        """Return the ids of the due elements in due order without removing them (XPOLL)."""
        n = _validate.limit_or_inf(limit)
        return [node.id for node in self._due_nodes(self.now(), n)]

    def xack(self, *ids: str, attempt: int | None = None) -> list[Any]:
        """Remove each element that is due or claimed and return it; ``None`` in its place otherwise (XACK).

        ``None`` stands for an unknown id, an element not yet due and not claimed, or, when
        ``attempt`` is given, an element whose attempt differs (claimed again by someone else since).
        """
        _validate.ids(ids)
        _validate.attempt(attempt)
        now = self.now()
        index = self._index
        out: list[Any] = []
        for id in ids:
            node = index.get(id)
            if (
                node is None
                or (attempt is not None and node.attempt != attempt)
                or (node.due > now and not node.queue.lease)  # type: ignore[union-attr]
            ):
                out.append(None)
                continue
            del index[id]
            out.append(node.element)
            self._kill(node)
        return out

    def ack(self, id: str, *, attempt: int) -> bool:
        """Remove a claimed element if its attempt is still ``attempt``; whether it did.

        The fenced acknowledgement a worker sends when it is done: the element need not be due.
        """
        node = self._checked_get(id)
        if _validate.attempt(attempt) is None:
            raise InvalidArgumentError("ack needs the claim's attempt")
        if node is None or node.attempt != attempt or not node.queue.lease:  # type: ignore[union-attr]
            return False
        del self._index[id]
        self._kill(node)
        return True

    def ttn(self) -> float | None:
        """Seconds until the next element is due (TTN): ``0.0`` if one is due now, ``None`` if empty."""
        entry = self._top()
        if entry is None:
            return None
        return max(0.0, entry[0] - self.now())

    def next_due(self) -> float | None:
        """The due time of the next element in the dehydrator's clock, ``None`` if empty."""
        entry = self._top()
        return None if entry is None else entry[0]

    def update(self, id: str, element: Any) -> Any:
        """Replace the element ``id``, keeping its due time and claim, and return the old one (UPDATE).

        Raises :class:`~rehydrate.errors.UnknownIdError` (a :class:`KeyError`) if ``id`` is unknown.
        """
        node = self._checked_get(id)
        if node is None:
            raise UnknownIdError(id)
        old = node.element
        node.element = element
        return old

    # -- leases -------------------------------------------------------------------------------

    def claim(self, *, lease: Seconds, limit: int | None = None) -> list[Claim]:
        """Take due elements, in due order, for ``lease`` seconds.

        Each claimed element becomes due again at ``now + lease`` (so nobody else sees it until the
        lease runs out, and then it is redelivered) and its attempt goes up by one.
        """
        seconds = _validate.seconds(lease, "lease")
        n = _validate.limit_or_inf(limit)
        now = self.now()
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
        claims: list[Claim] = []
        append = claims.append
        for node in taken:
            attempt = node.attempt = node.attempt + 1
            was_due = node.due
            node.due = due
            node.seq = next(seq)
            node.queue = queue
            items.append(node)
            append(
                Claim(
                    id=node.id,
                    element=node.element,
                    attempt=attempt,
                    lease_until=due,
                    due=was_due,
                    claimed_at=now,
                )
            )
        if new:
            self._seat(queue)
        return claims

    def extend(self, id: str, *, lease: Seconds, attempt: int) -> float | None:
        """Keep a running claim alive: due again at ``now + lease``.

        Returns the new ``lease_until``, or ``None`` (and does nothing) if the element is gone,
        is not claimed, or was claimed again since (``attempt`` differs).
        """
        seconds = _validate.seconds(lease, "lease")
        node = self._checked_get(id)
        _validate.attempt(attempt)
        if attempt is None:
            raise InvalidArgumentError("extend needs the claim's attempt")
        if node is None or node.attempt != attempt or not node.queue.lease:  # type: ignore[union-attr]
            return None
        due = self.now() + seconds
        self._move(node, due, seconds, lease=True)
        return due

    def reschedule(self, id: str, *, ttl: Seconds, attempt: int | None = None) -> bool:
        """Give the element ``id`` a new due time ``now + ttl`` (a delayed retry) and release its claim.

        Its attempt count is kept. Returns ``False`` (and does nothing) if the id is unknown or, when
        ``attempt`` is given, the element's attempt differs.
        """
        seconds = _validate.seconds(ttl, "ttl")
        node = self._checked_get(id)
        _validate.attempt(attempt)
        if node is None or (attempt is not None and node.attempt != attempt):
            return False
        self._move(node, self.now() + seconds, seconds, lease=False)
        return True

    def info(self, id: str) -> ElementInfo | None:
        """Describe the element ``id``, or ``None`` if it is unknown."""
        node = self._checked_get(id)
        if node is None:
            return None
        queue: _Queue = node.queue  # type: ignore[assignment]
        return ElementInfo(id=node.id, due=node.due, ttl=queue.key, attempt=node.attempt, claimed=queue.lease)

    def ids(self, *, limit: int | None = None) -> list[str]:
        """Every id, due or not, in due order (ties in filing order), at most ``limit``. O(n log n)."""
        n = _validate.limit(limit)
        nodes = sorted(self._index.values(), key=_order)
        return [node.id for node in (nodes if n is None else nodes[:n])]

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
        return self._index.pop(key, None) if pop else self._index.get(key)

    def _insert(self, id: str, element: Any, attempt: int, due: float, key: float, lease: bool) -> None:
        queues = self._leases if lease else self._queues
        queue = queues.get(key)
        seq = next(self._seq)
        if queue is None:
            queue = queues[key] = _Queue(key, lease)
            node = _Node(due, seq, id, element, attempt, queue)
            queue.items.append(node)
            heappush(self._heads, (due, seq, queue))
            if len(self._heads) > 2 * (len(self._queues) + len(self._leases)) + _REBUILD_SLACK:
                self._rebuild_heads()
        else:
            node = _Node(due, seq, id, element, attempt, queue)
            queue.items.append(node)
        self._index[id] = node

    def _move(self, node: _Node, due: float, key: float, *, lease: bool) -> None:
        """Re-file a live node under a new due time. The old node dies in place; a fresh one is filed."""
        id, element, attempt = node.id, node.element, node.attempt
        self._kill(node)
        self._insert(id, element, attempt, due, key, lease)

    def _kill(self, node: _Node) -> None:
        """Mark a node dead (already out of the index), drop its payload, keep its queue tidy."""
        queue: _Queue = node.queue  # type: ignore[assignment]
        node.queue = None
        node.element = None
        queue.dead += 1
        if queue.live() == 0:
            # Forget the queue now; its heap entry goes stale and is dropped when it surfaces.
            queue.items = []
            queue.head = queue.dead = 0
            queues = self._leases if queue.lease else self._queues
            if queues.get(queue.key) is queue:
                del queues[queue.key]
        elif queue.dead > _COMPACT_MIN and queue.dead * 2 > len(queue.items) - queue.head:
            queue.items = [n for n in queue.items[queue.head :] if n.queue is queue]
            queue.head = queue.dead = 0

    def _rebuild_heads(self) -> None:
        """Drop stale heap entries (of queues emptied by pulls) in one O(M) pass."""
        heads: list[_Entry] = []
        for queues in (self._queues, self._leases):
            for queue in queues.values():
                node = self._first_live(queue)
                if node is not None:
                    heads.append((node.due, node.seq, queue))
        heapify(heads)
        self._heads = heads

    @staticmethod
    def _first_live(queue: _Queue) -> _Node | None:
        items, i = queue.items, queue.head
        n = len(items)
        while i < n and items[i].queue is not queue:
            i += 1
            queue.dead -= 1
        queue.head = i
        return items[i] if i < n else None

    def _seat(self, queue: _Queue) -> None:
        node = self._first_live(queue)
        if node is not None:
            heappush(self._heads, (node.due, node.seq, queue))

    def _top(self) -> _Entry | None:
        """The heap's top entry once it is exact (names its queue's live head), or ``None``."""
        heads = self._heads
        while heads:
            entry = heads[0]
            queue = entry[2]
            node = self._first_live(queue)
            if node is None:
                heappop(heads)
                self._forget(queue)
            elif node.seq == entry[1]:
                return entry
            else:
                heapreplace(heads, (node.due, node.seq, queue))
        return None

    def _forget(self, queue: _Queue) -> None:
        queue.items = []
        queue.head = queue.dead = 0
        queues = self._leases if queue.lease else self._queues
        if queues.get(queue.key) is queue:
            del queues[queue.key]

    def _take(self, now: float, limit: float, *, drop: bool) -> list[_Node]:
        """Pop up to ``limit`` due nodes in ``(due, seq)`` order, merging the queues through the heap.

        From the top queue it takes every node that sorts before the runner-up's head, so a run
        of nodes from one queue costs one heap operation, not one each. With ``drop`` the nodes
        leave the index and die (poll); without, they stay indexed (claim re-files them).
        """
        heads = self._heads
        index = self._index
        out: list[_Node] = []
        append = out.append
        left = limit
        while heads and left > 0:
            entry = heads[0]
            if entry[0] > now:
                break
            queue = entry[2]
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
            items = queue.items
            i = queue.head
            n = len(items)
            dead = 0
            while i < n:
                node = items[i]
                if node.queue is not queue:
                    i += 1
                    dead += 1
                    continue
                due = node.due
                if due > bound or (due == bound and bound_seq >= 0 and node.seq > bound_seq):
                    break
                i += 1
                append(node)
                if drop:
                    del index[node.id]
                    node.queue = None
                left -= 1
                if left <= 0:
                    break
            queue.dead -= dead
            if i >= n:
                heappop(heads)
                self._forget(queue)
                continue
            if i > _COMPACT_MIN and i * 2 > n:
                del items[:i]
                i = 0
            queue.head = i
            head = self._first_live(queue)
            if head is None:
                heappop(heads)
                self._forget(queue)
            else:
                heapreplace(heads, (head.due, head.seq, queue))
        if not drop:
            # Claimed nodes are re-filed by the caller; detach them from their old queue now.
            for node in out:
                node.queue = None
        return out

    def _due_nodes(self, now: float, limit: float) -> list[_Node]:
        """The due live nodes in ``(due, seq)`` order, at most ``limit``, without removing any."""
        runs: list[list[_Node]] = []
        # Walk the heap from the top; a child can only be due if its parent's entry is.
        heads = self._heads
        stack = [0] if heads and heads[0][0] <= now else []
        while stack:
            pos = stack.pop()
            queue = heads[pos][2]
            run: list[_Node] = []
            items = queue.items
            for i in range(queue.head, len(items)):
                node = items[i]
                if node.queue is not queue:
                    continue
                if node.due > now or len(run) >= limit:
                    break
                run.append(node)
            if run:
                runs.append(run)
            for child in (2 * pos + 1, 2 * pos + 2):
                if child < len(heads) and heads[child][0] <= now:
                    stack.append(child)
        if len(runs) == 1:
            return runs[0]
        merged = [node for run in runs for node in run]
        merged.sort(key=_order)
        return merged if limit >= len(merged) else merged[: int(limit)]


def _order(node: _Node) -> tuple[float, int]:
    return (node.due, node.seq)
