"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

#: A few ids, so pushes collide with live ids and acks hit and miss.
ids = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])
#: A few TTLs, so elements share queues; fractional ones exercise float ties.
ttls = st.sampled_from([0, 0.1, 0.5, 1, 1.5, 2, 3, 10])
leases = st.sampled_from([0.5, 1, 2, 5])
advances = st.sampled_from([0, 0.1, 0.4, 0.5, 1, 2, 7])
limits = st.none() | st.integers(min_value=1, max_value=4)
elements = st.integers() | st.text(max_size=3) | st.none()

# -- programs for the stores' differential test ------------------------------------------------------

#: The explicit ids a program uses: few, so pushes collide and fenced calls hit and miss.
program_ids = ["e0", "e1", "e2", "e3", "e4", "e5"]
_pids = st.sampled_from(program_ids)
#: Multiples of 1/4 s: exact in binary, so every store's durations compare exactly.
_pttls = st.sampled_from([0, 0.25, 1, 2, 3])
_pleases = st.sampled_from([0, 1, 2])
_plimits = st.sampled_from([None, 1, 2, 3])
_pattempts = st.sampled_from([None, 0, 1, 2])
#: Which of an id's claim tokens a fenced call uses: 0 the latest, 1 the one before... (a token
#: nobody holds when there is none). Tokens differ between stores; their order does not.
_picks = st.sampled_from([0, 1, 2])
#: A random program of store calls on one dehydrator: a list of ``(verb, *arguments)``.
store_programs = st.lists(
    st.one_of(
        st.tuples(st.just("push"), _pids, _pttls),
        st.tuples(st.just("push_replace"), _pids, _pttls),
        st.tuples(st.just("push_gen"), _pttls),
        st.tuples(st.just("push_many"), st.lists(st.tuples(_pids, _pttls), max_size=4)),
        st.tuples(st.just("pull"), _pids),
        st.tuples(st.just("poll"), _plimits),
        st.tuples(st.just("xpoll"), _plimits),
        st.tuples(st.just("xack"), st.lists(_pids, max_size=3), _pattempts),
        st.tuples(st.just("xack_token"), _pids, _picks),
        st.tuples(st.just("claim"), _pleases, _plimits),
        st.tuples(st.just("ack"), st.lists(st.tuples(_pids, _picks), max_size=3)),
        st.tuples(st.just("reschedule"), _pids, _pttls, _pattempts),
        st.tuples(st.just("reschedule_token"), _pids, _pttls, _picks),
        st.tuples(st.just("extend"), _pids, _pleases, _picks),
        st.tuples(st.just("hand_back"), st.lists(st.tuples(_pids, _picks, _pttls), max_size=3)),
        st.tuples(st.just("update"), _pids),
        st.tuples(st.just("rearm"), _pids, _picks, _pttls),
        st.tuples(st.just("look"), _pids),
        st.tuples(st.just("info"), _pids),
        st.tuples(st.just("read"), _pids),
        # Compare-and-set with the latest revision the program read of an id, an older one, or
        # one nobody holds (as _picks for tokens); replace_if's ids distinct, as it requires.
        st.tuples(
            st.just("replace_if"),
            st.lists(st.tuples(_pids, _picks, _pttls), max_size=3, unique_by=lambda item: item[0]),
        ),
        st.tuples(st.just("update_if"), _pids, _picks),
        st.tuples(st.just("pull_if"), _pids, _picks),
        st.tuples(st.just("advance"), st.sampled_from([0.25, 0.5, 1, 2])),
        st.tuples(st.just("ttn")),
        st.tuples(st.just("ids"), _plimits),
        st.tuples(st.just("size")),
        st.tuples(st.just("summary")),
    ),
    min_size=20,
    max_size=60,
)

#: Two ids: a program on revisions, where every write, read and compare-and-set lands on an id
#: that was just read or claimed, so a store that changes (or keeps) a revision where the model
#: does not is caught in a few examples (the test reads both after every call).
REVISION_IDS = tuple(program_ids[:2])
#: Every revision program starts from two elements, one of them claimed: most of what follows
#: then acts on something (hypothesis's first examples are its simplest, calls on nothing).
REVISION_PRELUDE = (("push", "e0", 0), ("push", "e1", 0), ("claim", 2, 1))
_rids = st.sampled_from(REVISION_IDS)
#: Mostly due at once and mostly the latest token or revision: claims take something, and the
#: fenced and conditional calls that follow mostly hit (a miss is the rarer case worth a look).
_rttls = st.sampled_from([0, 0, 0.25, 1])
_rpicks = st.sampled_from([0, 0, 0, 1, 2])
revision_programs = st.lists(
    st.one_of(
        # (Claims and pushes first, and claims thrice, as distinct strategies: hypothesis leans
        # towards a one_of's first branches, and treats equal ones as one.)
        st.tuples(st.just("claim"), st.just(1), _plimits),
        st.tuples(st.just("push"), _rids, _rttls),
        st.tuples(st.just("claim"), st.just(2), _plimits),
        st.tuples(st.just("push_replace"), _rids, _rttls),
        st.tuples(st.just("claim"), st.sampled_from([1, 2]), st.just(None)),
        st.tuples(st.just("push_many"), st.lists(st.tuples(_rids, _rttls), max_size=2)),
        st.tuples(st.just("pull"), _rids),
        st.tuples(st.just("ack"), st.lists(st.tuples(_rids, _rpicks), max_size=2)),
        st.tuples(st.just("reschedule"), _rids, _rttls, _pattempts),
        st.tuples(st.just("reschedule_token"), _rids, _rttls, _rpicks),
        st.tuples(st.just("extend"), _rids, _pleases, _rpicks),
        st.tuples(st.just("hand_back"), st.lists(st.tuples(_rids, _rpicks, _rttls), max_size=2)),
        st.tuples(st.just("update"), _rids),
        st.tuples(st.just("update_token"), _rids, _rpicks),
        st.tuples(st.just("rearm"), _rids, _rpicks, _rttls),
        st.tuples(st.just("xack_token"), _rids, _rpicks),
        st.tuples(st.just("info"), _rids),
        st.tuples(st.just("read"), _rids),
        st.tuples(st.just("read"), _rids),
        st.tuples(
            st.just("replace_if"),
            st.lists(st.tuples(_rids, _rpicks, _rttls), max_size=2, unique_by=lambda item: item[0]),
        ),
        st.tuples(st.just("update_if"), _rids, _rpicks),
        st.tuples(st.just("pull_if"), _rids, _rpicks),
        st.tuples(st.just("advance"), st.sampled_from([0.25, 1, 2])),
    ),
    min_size=10,
    max_size=40,
).map(lambda program: [*REVISION_PRELUDE, *program])

# -- limit programs for the stores' differential test ------------------------------------------------

#: A limit program's keys: two limit names (by index: each program names its own) and two
#: partition keys of each, so steps of one key and of its neighbours interleave.
LIMIT_NAMES = 2
LIMIT_KEYS = ("k0", "k1")
#: A few holders: as many as the largest concurrency, so acquires are refused, retried (a holder
#: again) and releases and renewals mostly hit; a fourth, rarer, that mostly holds nothing.
_lholders = st.sampled_from(["h0", "h1", "h2", "h0", "h1", "h2", "h3"])
#: A few waiters ``(dehydrator, id, attempt)``: the same element under two attempts (a parked
#: waiter re-parked keeps its place, with its new attempt) and one id in two dehydrators.
LIMIT_WAITERS = (
    ("jobs", "w0", 0),
    ("jobs", "w0", 1),
    ("jobs", "w1", 0),
    ("jobs", "w2", 2),
    ("mail", "w0", 0),
)
_lwaiters = st.sampled_from(LIMIT_WAITERS)
#: Multiples of 1/4 s (exact in binary, as _pttls): leases and windows of 1 to 2 s, so a few
#: advances let leases run out, windows slide and waiters go past their horizon.
_lseconds = st.sampled_from([1.0, 1.25, 1.5, 1.75, 2.0])
_lconcurrency = st.integers(min_value=1, max_value=3)
_lrate = st.tuples(st.integers(min_value=1, max_value=3), _lseconds)
#: A rate, at times two (the windows of different lengths: the longest keeps the starts).
_lrates = st.tuples(_lrate) | st.tuples(_lrate, _lrate)
#: A limit's spec, as ``LimitSpec``'s keywords: a concurrency, rates, or both; and a lease.
limit_specs = st.one_of(
    st.fixed_dictionaries({"concurrency": _lconcurrency, "rates": st.just(()), "lease": _lseconds}),
    st.fixed_dictionaries({"concurrency": st.none(), "rates": _lrates, "lease": _lseconds}),
    st.fixed_dictionaries({"concurrency": _lconcurrency, "rates": _lrates, "lease": _lseconds}),
)
_lname = st.sampled_from([0, 0, 1])  # (the first limit's keys fill up more often)
_lkey = st.sampled_from(LIMIT_KEYS)
#: Every limit program starts with three acquires of one key, two of them with a waiter: the key
#: is full or has waiters from there on for most specs (hypothesis's first examples are its
#: simplest, steps on nothing).
LIMIT_PRELUDE = (
    ("acquire", 0, "k0", "h0", None),
    ("acquire", 0, "k0", "h1", ("jobs", "w1", 0)),
    ("acquire", 0, "k0", "h2", ("jobs", "w2", 2)),
)
#: A random program of limit steps: ``(specs, steps)``, a spec per limit name (a limit keeps one
#: spec, as a handler declares it) and a list of ``(verb, *arguments)``, a limit by its index.
limit_programs = st.tuples(
    st.tuples(*[limit_specs] * LIMIT_NAMES),
    st.lists(
        st.one_of(
            # (Acquires first, and thrice, as distinct strategies: hypothesis leans towards a
            # one_of's first branches; most steps take or queue for something.)
            st.tuples(st.just("acquire"), _lname, _lkey, _lholders, _lwaiters),
            st.tuples(st.just("acquire"), _lname, _lkey, _lholders, st.none()),
            st.tuples(st.just("release"), _lname, _lkey, _lholders),
            st.tuples(st.just("advance"), st.sampled_from([0.25, 0.5, 1, 2])),
            # (And the prelude's key, more often than the others: its holders release, renew.)
            st.tuples(st.just("acquire"), st.just(0), st.just("k0"), _lholders, _lwaiters),
            st.tuples(st.just("release"), st.just(0), st.just("k0"), _lholders),
            st.tuples(st.just("renew"), st.just(0), st.just("k0"), _lholders),
            st.tuples(
                st.just("park"),
                _lname,
                _lkey,
                st.lists(_lwaiters, min_size=1, max_size=3, unique_by=lambda w: w[:2]),
            ),
            st.tuples(st.just("renew"), _lname, _lkey, _lholders),
            st.tuples(st.just("limits"), st.none() | _lname),
            # One waiter, or at times (refused alike, InvalidArgumentError, nothing queued) none,
            # or an element twice.
            st.tuples(
                st.just("park"),
                _lname,
                _lkey,
                st.sampled_from([*([w] for w in LIMIT_WAITERS), [], list(LIMIT_WAITERS[:2])]),
            ),
        ),
        min_size=10,
        max_size=40,
    ).map(lambda steps: [*LIMIT_PRELUDE, *steps]),
)
