"""``rehydrate demo``: dehydrate elements with several TTLs and watch them come back in due order."""

from __future__ import annotations

import argparse
import random
import statistics
import time

from rehydrate import Dehydrator


def run(args: argparse.Namespace) -> int:
    d = Dehydrator()
    rng = random.Random(7)
    ttls = [0.25, 0.5, 1.0, 1.5, 2.0]
    start = time.monotonic()
    due_at: dict[str, float] = {}
    for i in range(args.elements):
        ttl = rng.choice(ttls)
        id = d.push({"n": i, "ttl": ttl}, ttl=ttl, id=f"job-{i}")
        due_at[id] = start + ttl
    cancelled = d.pull("job-0")
    print(f"dehydrated {len(d)} elements over {len(ttls)} TTLs; pulled job-0 early: {cancelled}")
    print(f"next due in {d.ttn():.3f}s (TTN)")
    lateness: list[float] = []
    while len(d):
        wait = d.ttn()
        if wait:
            time.sleep(wait)
        now = time.monotonic()
        ids = d.xpoll()
        for id, element in zip(ids, d.xack(*ids), strict=True):
            late = (now - due_at[id]) * 1000
            lateness.append(late)
            print(f"  +{now - start:5.3f}s  {id:<7} {element}  late {late:.2f} ms")
    print(
        f"delivered {len(lateness)} elements in due order; lateness median "
        f"{statistics.median(lateness):.2f} ms, max {max(lateness):.2f} ms"
    )
    return 0
