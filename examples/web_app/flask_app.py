"""A WSGI app (Flask) that defers work for the workers: ``flask --app flask_app run``.

Flask's views are blocking, so the scheduler runs behind a :class:`~rehydrate.SyncScheduler`: an
event loop in a thread of its own, started once per process when the app is made and closed at
exit. ``producer=True``: this process defers into the store and serves no handler (``rehydrate
worker tasks:scheduler`` does). Views on many threads may call it at once.

Under a pre-forking server (gunicorn), make the app in each worker process (gunicorn's default;
not with ``--preload``): the loop thread does not survive a fork.
"""

from __future__ import annotations

from flask import Flask, request
from tasks import scheduler

from rehydrate import DuplicateIdError, SyncScheduler


def create_app() -> Flask:
    app = Flask(__name__)
    # Started here, once; closed at exit (SyncScheduler registers that with atexit).
    tasks = SyncScheduler(scheduler, producer=True).start()
    app.extensions["tasks"] = tasks

    @app.post("/signup")
    def signup() -> tuple[dict[str, str], int]:
        email = str(request.get_json()["email"])
        try:
            id = tasks.defer("welcome_emails", {"to": email}, delay=1, id=f"welcome-{email}")
        except DuplicateIdError:
            return {"status": "already queued"}, 202
        return {"status": "queued", "id": id}, 202

    return app
