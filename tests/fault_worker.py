"""A worker process for the fault tests: ``python -m tests.fault_worker URL OPTIONS MODE LOG [N [BACKEND]]``.

It serves the dehydrator ``jobs`` with a 1-second lease. Every delivery appends
``<id> <attempt> <pid>`` to LOG; in MODE ``hang`` the handler then never returns (the test kills the
process with SIGKILL mid-handler), in MODE ``ok`` it returns at once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import TextIO

import anyio

from rehydrate import Scheduler, current_delivery, open_store


async def main(url: str, options: dict[str, object], mode: str, out: TextIO, concurrency: int) -> None:
    scheduler = Scheduler(open_store(url, **options), grace=0.2)

    @scheduler.handler("jobs", lease=1.0, concurrency=concurrency)
    async def handle(element: object) -> None:
        delivery = current_delivery()
        out.write(f"{delivery.id} {delivery.attempt} {os.getpid()}\n")
        if mode == "hang":
            await anyio.sleep_forever()

    async with scheduler.store, scheduler:
        out.write(f"ready 0 {os.getpid()}\n")
        # SIGTERM: stop claiming, let running handlers finish within the grace period, exit 0.
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                scheduler.stop()
                return


if __name__ == "__main__":
    url, options, mode, log = sys.argv[1:5]
    concurrency = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    backend = sys.argv[6] if len(sys.argv) > 6 else "asyncio"
    with open(log, "a", buffering=1) as out:  # one line per delivery, written as it happens
        anyio.run(main, url, json.loads(options), mode, out, concurrency, backend=backend)
