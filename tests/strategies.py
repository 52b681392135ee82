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
        st.tuples(st.just("look"), _pids),
        st.tuples(st.just("info"), _pids),
        st.tuples(st.just("advance"), st.sampled_from([0.25, 0.5, 1, 2])),
        st.tuples(st.just("ttn")),
        st.tuples(st.just("ids"), _plimits),
        st.tuples(st.just("size")),
        st.tuples(st.just("summary")),
    ),
    min_size=20,
    max_size=60,
)
