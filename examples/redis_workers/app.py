"""A scheduler for a Redis (or Valkey) deployment, served by ``rehydrate worker``.

Run two worker processes on each machine (as many machines as you like, one Redis)::

    export REHYDRATE_STORE=redis://127.0.0.1:6379/0
    rehydrate worker app:scheduler --processes 2        # from this directory

and defer work from anywhere (``python producer.py``, a web app, the shell)::

    rehydrate push thumbnails '{"image": "cat.png"}' --delay 5s

Every element is handled by one worker at a time; a worker that dies mid-handler loses nothing (the
lease brings its elements back, as attempt 2); SIGTERM lets running handlers finish first.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import structlog

from rehydrate import Backoff, Retry, Scheduler, current_delivery

STORE = os.environ.get("REHYDRATE_STORE", "redis://127.0.0.1:6379/0")
#: If set, each handled element appends ``<id> <attempt> <pid>`` here, to see who did what.
RESULTS = os.environ.get("RESULTS")

logger = structlog.get_logger("thumbnails")
scheduler = Scheduler(STORE, grace=10)


@scheduler.handler(
    "thumbnails",
    lease=30,  # renewed every 15 s while the handler runs; after a crash, redelivered within 30 s
    concurrency=20,  # per process
    retry=Retry(attempts=5, backoff=Backoff(initial=2, maximum=60)),
)
async def make_thumbnail(element: dict[str, Any]) -> None:
    delivery = current_delivery()
    await anyio.sleep(float(element.get("work", 0.01)))  # the real work goes here
    logger.debug(
        "thumbnail made", image=element.get("image"), attempt=delivery.attempt, late=delivery.lateness
    )
    if RESULTS:
        async with await anyio.open_file(RESULTS, "a") as out:
            await out.write(f"{delivery.id} {delivery.attempt} {os.getpid()}\n")
