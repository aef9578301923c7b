"""What every request to the dashboard passes first, and what every response carries.

Owns: ``Guard``, an ASGI middleware around the whole application (routes, static files,
errors):
- ``Host`` allow-list: the address and port the dashboard bound (``localhost`` too when that
  is a loopback address) and the names given with ``--allowed-host``. Any other Host is
  answered 421 before routing: a web page whose name an attacker points at 127.0.0.1 (DNS
  rebinding) reaches the socket but not the dashboard. Starlette's TrustedHostMiddleware
  compares names without their port and misreads IPv6 literals, hence this one.
- Same origin for every request that may change something (any method but GET and HEAD): its
  ``Origin`` must name this dashboard's host, or, when a browser sends no Origin, its
  ``Referer`` must; with neither it is refused 403. Compared as host and port (the scheme is
  left out, so a TLS proxy in front that forwards the Host still works).
- Headers on every response: a Content-Security-Policy that allows the dashboard's own files
  only (no inline script or style anywhere; SVG presentation attributes are not style),
  ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` (no framing, so no clickjacking of
  the confirm buttons), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin``
  (a same-origin POST still carries its Origin; ``no-referrer`` would make it ``null``), and
  ``Cache-Control: no-store`` on everything but the static files (pages hold message bodies).
Must not: read the body, or trust any proxy header (X-Forwarded-*).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from ipaddress import ip_address
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}
SAFE_METHODS = frozenset({"GET", "HEAD"})


def _with_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_hosts(bound: str, port: int, names: Iterable[str]) -> frozenset[str]:
    """The ``Host`` values the dashboard answers: ``bound:port`` (``localhost:port`` too for a
    loopback address; the bare forms on port 80), and each name given, with or without the
    port unless it names one itself."""
    out = {_with_port(bound, port)}
    try:
        if ip_address(bound).is_loopback:
            out.add(_with_port("localhost", port))
    except ValueError:
        out.add(_with_port(bound.lower(), port))  # bound by name
    if port == 80:
        out |= {h.rsplit(":", 1)[0] for h in out}
    for name in names:
        name = name.strip().lower()
        if name.count(":") > 1 and not name.startswith("["):
            name = f"[{name}]"  # a bare IPv6 address
        if re.fullmatch(r".+:[0-9]+", name) and not name.endswith("]"):
            out.add(name)  # it names its port
        else:
            out |= {name, f"{name}:{port}"}
    return frozenset(h.lower() for h in out)


def _host_of(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return parts.netloc.lower() if parts.scheme in ("http", "https") else ""


def same_origin(headers: Headers, host: str) -> bool:
    """The request comes from a page of this dashboard (Origin, else Referer)."""
    origin = headers.get("origin")
    if origin is not None:
        return _host_of(origin) == host
    referer = headers.get("referer")
    return referer is not None and _host_of(referer) == host


class Guard:
    def __init__(self, app: ASGIApp, *, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
                if not static:
                    headers["cache-control"] = "no-store"
            await send(message)

        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            refusal = PlainTextResponse(
                "txmq dashboard: it does not answer to this Host header. Open it at the "
                "address it printed, or start it with --allowed-host NAME.\n",
                status_code=421,
            )
            await refusal(scope, receive, send_guarded)
            return
        if scope["method"] not in SAFE_METHODS and not same_origin(headers, host):
            refusal = PlainTextResponse(
                "txmq dashboard: refused a request from another site (its Origin or Referer "
                "is not this dashboard).\n",
                status_code=403,
            )
            await refusal(scope, receive, send_guarded)
            return
        await self.app(scope, receive, send_guarded)
