#!/usr/bin/env bash
# rehydrate's PostgreSQL store against procrastinate and pgqueuer (see peers.py for the method).
# The peers go into this benchmark's own virtual environment, beside this script: they are not
# rehydrate's dependencies. Arguments go to peers.py (--n, --repeat, --workers, --systems...).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q -e "$root[postgres]" "procrastinate>=3" "pgqueuer>=0.20" asyncpg
cd "$root"
exec "$venv/bin/python" "$here/peers.py" "$@"
