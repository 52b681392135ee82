"""The example of docs/monitoring.md's "Admin from your own code" runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_admin_example_runs() -> None:
    text = (ROOT / "docs" / "monitoring.md").read_text(encoding="utf-8")
    section = text.split("## Admin from your own code", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
