"""The work a web app hands off: the handlers, served by ``rehydrate worker tasks:scheduler``.

The web processes import this module and run its scheduler with ``producer()`` (``async with
scheduler.producer():`` in an ASGI app, ``SyncScheduler(scheduler, producer=True)`` in a WSGI
one): they defer into the store and serve nothing. The workers serve the handlers::

    export REHYDRATE_STORE=sqlite:///tasks.db            # or redis://..., postgresql://...
    rehydrate worker tasks:scheduler                     # from this directory
    fastapi run fastapi_app.py                           # or: flask --app flask_app run

See docs/web-apps.md.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import structlog

from rehydrate import Retry, Scheduler, current_delivery

STORE = os.environ.get("REHYDRATE_STORE", "sqlite:///tasks.db")
#: If set, each email "sent" appends ``<id> <attempt> <pid> <to>`` here (to see who did what).
SENT = os.environ.get("SENT")

logger = structlog.get_logger("tasks")
scheduler = Scheduler(STORE, grace=10)


@scheduler.handler("welcome_emails", lease=30, concurrency=20, retry=Retry(attempts=5))
async def send_welcome_email(element: dict[str, Any]) -> None:
    delivery = current_delivery()
    # The real work goes here (an email provider's API). An id per signup makes a retry safe:
    # pass delivery.id as the provider's idempotency key.
    logger.info("welcome email sent", to=element["to"], attempt=delivery.attempt)
    if SENT:
        async with await anyio.open_file(SENT, "a") as out:
            await out.write(f"{delivery.id} {delivery.attempt} {os.getpid()} {element['to']}\n")
