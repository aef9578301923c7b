"""A browser-free visitor of a running dashboard, for the HTTP-level tests: ``http.client`` with
one cookie (the session), an ``Origin`` on POSTs as a browser sends it, and helpers to read the
form tokens out of a page and to sign in.

It follows no redirect on its own: a test sees each 303 and where it points.
"""

from __future__ import annotations

import html
import http.client
import re
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import urlencode, urlsplit

from txmq.dashboard.link import Credentials
from txmq.dashboard.ui import COOKIE

TIMEOUT_S = 30.0


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: str

    @property
    def text(self) -> str:
        """The body with its HTML entities decoded (``&#39;`` -> ``'``)."""
        return html.unescape(self.body)

    @property
    def location(self) -> str:
        return self.headers.get("location", "")

    def token(self, form: str) -> str:
        """The token the form with id ``form`` carries (confirm, sign-in, sign-out)."""
        pattern = rf'<form [^>]*id="{form}">.*?name="token" value="([^"]+)"'
        found = re.search(pattern, self.body, re.DOTALL)
        assert found, f"no {form} form on the page ({self.status}):\n{self.body[:3000]}"
        return found.group(1)


class Visitor:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self.host, self.port = parts.hostname, parts.port
        self.origin = f"http://{self.host}:{self.port}"
        self.cookie = ""

    def request(
        self,
        method: str,
        path: str,
        *,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        origin: bool = True,
    ) -> Reply:
        sent = {"Host": f"{self.host}:{self.port}"}
        if self.cookie:
            sent["Cookie"] = f"{COOKIE}={self.cookie}"
        if method == "POST" and origin:
            sent["Origin"] = self.origin
        body = None
        if form is not None:
            body = urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        sent.update(headers or {})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT_S)
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            reply = Reply(response.status, response.headers, response.read().decode())
        finally:
            conn.close()
        self._keep(reply)
        return reply

    def _keep(self, reply: Reply) -> None:
        for header in reply.headers.get_all("set-cookie") or []:
            jar: SimpleCookie = SimpleCookie()
            jar.load(header)
            if COOKIE in jar:
                morsel = jar[COOKIE]
                self.cookie = "" if morsel["max-age"] == "0" else morsel.value

    def get(self, path: str, **kw: object) -> Reply:
        return self.request("GET", path, **kw)  # type: ignore[arg-type]

    def post(self, path: str, form: dict[str, str], **kw: object) -> Reply:
        return self.request("POST", path, form=form, **kw)  # type: ignore[arg-type]

    def sign_in(self, creds: Credentials) -> Reply:
        page = self.get("/login")
        assert page.status == 200, page.text
        keys = {"access_key": creds.access_key, "secret_key": creds.secret_key}
        return self.post("/login", {"token": page.token("sign-in"), **keys})
