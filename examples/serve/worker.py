"""The Python side: a handler for what other languages push into "emails" through ``rehydrate
serve`` (docs/serve.md). Run it with the serve's store::

    rehydrate worker worker:scheduler --store sqlite:///jobs.db

On a store other than memory, serve keeps an element as the UTF-8 text the client sent
(``--elements text``, the default), so the handler gets a ``str``: here, JSON that it parses.
(With ``serve --elements json`` it would get the parsed object.)
"""

import json

from rehydrate import Scheduler

scheduler = Scheduler()  # the store comes from --store or REHYDRATE_STORE


@scheduler.handler("emails")
async def send_email(element: str) -> None:
    email = json.loads(element)
    print(f"email to {email['to']} from {email['from']}", flush=True)
