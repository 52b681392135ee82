"""Who may see the dashboard and who may act on it: the token, the session, CSRF checks.

* **Token.** With a token, every request shows it once: ``?token=...`` (then a session cookie
  carries it), the login form, or ``Authorization: Bearer ...`` (scripts and Prometheus). Missing:
  401; wrong: 403. Without a token the dashboard answers only loopback clients that name a loopback
  host (so a DNS-rebinding page cannot read it either).
* **Session.** A random id in an ``HttpOnly``, ``SameSite=Strict`` cookie scoped to the mount path,
  signed with the app's secret (and the token, so a new token ends old sessions).
* **CSRF.** Every POST from a browser carries a form field derived from the session id by HMAC,
  and is refused if ``Sec-Fetch-Site`` says cross-site or ``Origin`` names another host. A request
  authenticated by its ``Authorization`` header needs no CSRF field: browsers never add that header
  on their own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable

import attrs

__all__ = ["COOKIE", "Guard", "Session", "is_loopback_host", "origin_refusal"]

#: The session cookie's name.
COOKIE = "rehydrate_dashboard"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address, as in ``--host`` or a portless ``Host``) is loopback."""
    host = host.strip().lower().removeprefix("[").removesuffix("]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_without_port(header: str) -> str:
    """``example.com:8000`` -> ``example.com``; ``[::1]:8000`` -> ``::1``."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def origin_refusal(*, origin: str | None, fetch_site: str | None, host: str | None) -> str | None:
    """Why a state-changing request looks cross-site, or ``None`` if it does not.

    ``Sec-Fetch-Site`` (sent by every current browser) must be ``same-origin`` or ``none`` (typed by
    the user); ``Origin``, when sent, must name this very host and port. A request with neither is
    a script or an old browser, and the CSRF field still has to match.
    """
    if fetch_site is not None and fetch_site.lower() not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    if origin is not None:
        netloc = origin.split("://", 1)[1] if "://" in origin else ""
        if not netloc or host is None or netloc.lower() != host.lower():
            return f"cross-site request refused (Origin {origin!r} is not this dashboard's host)"
    return None


@attrs.frozen(kw_only=True)
class Session:
    """A visitor: its id (CSRF tokens derive from it), whether it has shown the token, and since when."""

    id: str
    authenticated: bool
    #: Unix time (whole seconds) the session began; it ends :attr:`Guard.lifetime` seconds later.
    issued: int = 0


@attrs.frozen
class Guard:
    """Signs sessions and CSRF tokens with ``secret``; checks ``token`` when there is one."""

    token: str | None
    secret: bytes = attrs.field(factory=lambda: secrets.token_bytes(32), repr=False)
    #: How long a session lasts, in seconds: a stolen cookie is not good forever.
    lifetime: float = 12 * 3600.0
    now: Callable[[], float] = attrs.field(default=time.time, repr=False)

    def _mac(self, purpose: str, value: str) -> str:
        key = self.secret + hashlib.sha256((self.token or "").encode()).digest()
        return _b64(hmac.new(key, f"{purpose}:{value}".encode(), hashlib.sha256).digest())

    def token_matches(self, given: str | None) -> bool:
        if self.token is None or given is None:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def new_session(self, *, authenticated: bool) -> Session:
        return Session(id=_b64(secrets.token_bytes(18)), authenticated=authenticated, issued=int(self.now()))

    def cookie(self, session: Session) -> str:
        signed = f"{session.id}.{'1' if session.authenticated else '0'}.{session.issued}"
        return f"{signed}.{self._mac('session', signed)}"

    def session(self, cookie: str | None) -> Session | None:
        """The session a cookie carries; ``None`` if absent, forged, from another secret, or too old."""
        if not cookie or cookie.count(".") != 3:
            return None
        signed, mac = cookie.rsplit(".", 1)
        id, flag, issued = signed.split(".")
        if flag not in ("0", "1") or not issued.isdigit():
            return None
        if not hmac.compare_digest(mac, self._mac("session", signed)):
            return None
        age = self.now() - int(issued)
        if not -60 <= age <= self.lifetime:  # a minute of clock skew between processes sharing a secret
            return None
        return Session(id=id, authenticated=flag == "1", issued=int(issued))

    def csrf(self, session: Session) -> str:
        return self._mac("csrf", session.id)

    def csrf_matches(self, session: Session, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given, self.csrf(session))
