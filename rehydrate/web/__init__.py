"""The dashboard: a web page for people and ``/metrics`` for Prometheus, as one ASGI app.

``rehydrate dashboard --store URL`` serves it; :func:`app` returns it to mount in your own ASGI
application (Starlette, FastAPI...). It needs the ``web`` extra: ``pip install 'rehydrate[web]'``.
"""

from __future__ import annotations

try:
    from rehydrate.web._app import app
except ModuleNotFoundError as exc:  # pragma: no cover - depends on what is installed
    if exc.name not in ("starlette", "prometheus_client"):
        raise
    raise ModuleNotFoundError(
        f"rehydrate.web needs {exc.name}: install the web extra (pip install 'rehydrate[web]')", name=exc.name
    ) from exc

__all__ = ["app"]
