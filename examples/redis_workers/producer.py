"""Defer thumbnail jobs into the shared store: ``python producer.py --count 100 --spread 5``.

Any process can defer: it needs the store's URL, not the handlers.
"""

from __future__ import annotations

import argparse
import random

import anyio
from app import STORE

from rehydrate import Scheduler


async def produce(count: int, spread: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    async with Scheduler(STORE) as scheduler:  # no handlers: it only defers
        return [
            await scheduler.defer(
                "thumbnails", {"image": f"img-{i}.png"}, delay=rng.uniform(0, spread), id=f"img-{i}"
            )
            for i in range(count)
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--spread", type=float, default=5.0, help="delays are spread over this many seconds")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    ids = anyio.run(produce, args.count, args.spread, args.seed)
    print(f"deferred {len(ids)} thumbnails over {args.spread:g}s into {STORE}")


if __name__ == "__main__":
    main()
