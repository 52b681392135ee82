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
