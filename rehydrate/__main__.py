"""``python -m rehydrate`` runs the ``rehydrate`` command."""

import sys

from rehydrate.cli import main

sys.exit(main())
