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
