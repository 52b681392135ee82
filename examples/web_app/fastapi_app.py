"""An ASGI app (FastAPI) that defers work for the workers: ``fastapi run fastapi_app.py``.

The scheduler lives as long as the app: the lifespan opens it with ``producer()``, so this
process defers into the store but serves no handler (``rehydrate worker tasks:scheduler`` does),
files no declared schedule and is not listed by ``rehydrate workers``. With Starlette alone, the
same ``lifespan`` function goes to ``Starlette(lifespan=lifespan)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from pydantic import BaseModel
from tasks import scheduler

from rehydrate import DuplicateIdError


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with scheduler.producer():  # not `async with scheduler`: that would run the handlers here
        yield


app = FastAPI(lifespan=lifespan)


class Signup(BaseModel):
    email: str


@app.post("/signup", status_code=202)
async def signup(body: Signup) -> dict[str, str]:
    # The id makes a double-submitted form one email, not two.
    try:
        id = await scheduler.defer("welcome_emails", {"to": body.email}, delay=1, id=f"welcome-{body.email}")
    except DuplicateIdError:
        return {"status": "already queued"}
    return {"status": "queued", "id": id}
