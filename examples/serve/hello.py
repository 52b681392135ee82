# redis-py's sync client is untyped (for mypy --strict, which checks the examples).
# mypy: disable-error-code="no-untyped-call"
"""ReDe's hello world, from Python through ``rehydrate serve`` (docs/serve.md).

    rehydrate serve --store sqlite:///jobs.db          # in one shell (port 6380)
    rehydrate worker worker:scheduler --store sqlite:///jobs.db   # another: the Python handler
    python hello.py                                    # REHYDRATE_SERVE_PORT=6380 by default

The same steps as ``hello.sh`` (redis-cli) and ``node/hello.mjs`` (the redis npm package): a
dehydrator's round trip, then a job handed to the Python handler of ``worker.py``.
"""

import json
import os
import time

import redis

r = redis.Redis(
    host=os.environ.get("REHYDRATE_SERVE_HOST", "127.0.0.1"),
    port=int(os.environ.get("REHYDRATE_SERVE_PORT", "6380")),
    password=os.environ.get("REHYDRATE_SERVE_PASSWORD"),
    decode_responses=True,
)

# A dehydrator: push an element for 300 ms, look at it, find nothing due yet.
print("PUSH", r.execute_command("REDE.PUSH", "greetings", 300, "Dehydrate this", "py-101"))
print("LOOK", r.execute_command("REDE.LOOK", "greetings", "py-101"))
print("POLL", json.dumps(r.execute_command("REDE.POLL", "greetings")))
# TTN: milliseconds until the next element is due; sleep that long, and it is there.
ttn = r.execute_command("REDE.TTN", "greetings")
print("TTN", "due within 300 ms" if 0 <= ttn <= 300 else ttn)
time.sleep(ttn / 1000)
print("POLL", json.dumps(r.execute_command("REDE.POLL", "greetings")))

# A job for the Python handler "emails" (worker.py): JSON text, due in 100 ms, its id the server's.
job = json.dumps({"to": "ada@example.com", "from": "python"})
job_id = r.execute_command("REDE.GIDPUSH", "emails", 100, job)
print("GIDPUSH", "an id" if job_id else job_id)
r.close()
