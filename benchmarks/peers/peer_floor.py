"""The floor: asyncio's own timers (``loop.call_at``) firing the same jobs in the same process.

No store, no worker, nothing durable: what an event loop on this machine can do at best, by the
same method and through the same stamps file as the others.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import harness


async def run(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()

    async def enqueue_in(i: int, delay: float) -> None:
        loop.call_at(loop.time() + delay, harness.stamp, i)

    async def enqueue_at(i: int, when: float) -> None:
        loop.call_at(loop.time() + (when - time.time()), harness.stamp, i)

    figures = await harness.measure(enqueue_in, enqueue_at, **harness.measure_args(args))
    return {"system": "floor: asyncio loop.call_at, same process", "versions": {}, **figures}


if __name__ == "__main__":
    args = harness.parser(__doc__ or "").parse_args()
    sys.exit(harness.main(run, args))
