#!/bin/sh
# ReDe's hello world, from a shell through `rehydrate serve` (docs/serve.md), with redis-cli.
#   rehydrate serve --store sqlite:///jobs.db                    # port 6380
#   rehydrate worker worker:scheduler --store sqlite:///jobs.db  # the Python handler
#   sh hello.sh                                                  # REHYDRATE_SERVE_PORT=6380 by default
# redis-cli reads the password from REDISCLI_AUTH (kept out of ps), so pass
# REHYDRATE_SERVE_PASSWORD on to it.
set -eu
export REDISCLI_AUTH="${REHYDRATE_SERVE_PASSWORD:-}"
[ -n "$REDISCLI_AUTH" ] || unset REDISCLI_AUTH
rede() { redis-cli --no-raw -h "${REHYDRATE_SERVE_HOST:-127.0.0.1}" -p "${REHYDRATE_SERVE_PORT:-6380}" "$@"; }

# A dehydrator: push an element for 300 ms, look at it, find nothing due yet.
echo "PUSH $(rede REDE.PUSH greetings 300 'Dehydrate this' sh-101)"
echo "LOOK $(rede --raw REDE.LOOK greetings sh-101)"
echo "POLL $(rede REDE.POLL greetings)"
# TTN: milliseconds until the next element is due; sleep that long, and it is there.
ttn=$(rede --raw REDE.TTN greetings)
if [ "$ttn" -ge 0 ] && [ "$ttn" -le 300 ]; then echo "TTN due within 300 ms"; else echo "TTN $ttn"; fi
sleep "$(awk "BEGIN { print $ttn / 1000 }")"
echo "POLL $(rede --raw REDE.POLL greetings)"

# A job for the Python handler "emails" (worker.py): JSON text, due in 100 ms, its id the server's.
id=$(rede --raw REDE.GIDPUSH emails 100 '{"to": "ada@example.com", "from": "shell"}')
[ -n "$id" ] && echo "GIDPUSH an id"
