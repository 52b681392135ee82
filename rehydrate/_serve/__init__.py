"""``rehydrate serve``: ReDe's commands over RESP, on any store (see docs/serve.md).

The protocol (:mod:`._resp`) is pure; the commands (:mod:`._commands`) are a client of the public
:class:`~rehydrate.abc.Store` API; the server (:mod:`._server`) holds the listeners and connections.
"""

__all__: list[str] = []
