"""Python as on a plain ``pip install 'rehydrate[redis,web]'``: without sniffio.

anyio no longer installs sniffio; the test extras bring it back (trio depends on it), so a test
run here would never see its absence. A child process started with :func:`python` finds no
``sniffio`` module, exactly as where it is not installed (``ModuleNotFoundError``), and fails if
anything imported it by the end. trio itself imports sniffio: without it, only asyncio runs.
"""

from __future__ import annotations

import sys
import textwrap

__all__ = ["python", "rehydrate"]

_BLOCK = """\
import sys

class _NoSniffio:
    def find_spec(self, name, path=None, target=None):
        if name == "sniffio" or name.startswith("sniffio."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoSniffio())
try:
    import sniffio
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("sniffio is still importable")
"""


def python(code: str) -> list[str]:
    """The command line that runs ``code`` without sniffio (its arguments may follow), and
    fails if anything imported sniffio by the end of it."""
    checked = f"try:\n{textwrap.indent(code, '    ')}\nfinally:\n    assert 'sniffio' not in sys.modules\n"
    return [sys.executable, "-c", _BLOCK + checked]


def rehydrate(*argv: str) -> list[str]:
    """``python -m rehydrate *argv`` without sniffio."""
    main = "import runpy\nrunpy.run_module('rehydrate', run_name='__main__', alter_sys=True)"
    return [*python(main), *argv]
