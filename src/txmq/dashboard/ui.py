"""What every dashboard page shares: templates, the broker link, sign-in sessions, confirmation
tokens, and turning broker errors into a banner.

Owns: ``Ui`` (one per dashboard process). Sessions map a random cookie to the admin credentials
a person typed (memory only, at most ``DASHBOARD_SESSIONS_MAX``). A state-changing form carries a
token, an HMAC of the action and its target under a per-process secret, which only the
dashboard's own confirmation page hands out: a forged cross-site POST cannot produce it, and a
click on "delete" without the confirmation step does nothing.
Must not: call the broker outside ``Link`` or render broker data unescaped (Jinja2 autoescape).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from txmq import limits
from txmq.dashboard.link import Credentials, Link
from txmq.dashboard.sampler import Sampler
from txmq.dashboard.ui_text import banner
from txmq.errors import TxmqError

COOKIE = "txmq_dashboard_session"
TEMPLATES = Path(__file__).with_name("templates")


class Ui:
    def __init__(self, link: Link, sampler: Sampler) -> None:
        self.link = link
        self.sampler = sampler
        self.templates = Jinja2Templates(directory=str(TEMPLATES))  # autoescapes
        self.secret = secrets.token_bytes(32)
        self.sessions: OrderedDict[str, Credentials] = OrderedDict()
        # Each topic's message count at the last topics page: (monotonic time, count).
        self.topic_counts: dict[str, tuple[float, int]] = {}

    # --- Sign-in. --------------------------------------------------------------------------------

    def credentials(self, request: Request) -> Credentials | None:
        return self.sessions.get(request.cookies.get(COOKIE, ""))

    def sign_in(self, response: Response, credentials: Credentials) -> None:
        token = secrets.token_urlsafe(24)
        self.sessions[token] = credentials
        while len(self.sessions) > limits.DASHBOARD_SESSIONS_MAX:
            self.sessions.popitem(last=False)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict")

    def sign_out(self, request: Request, response: Response) -> None:
        self.sessions.pop(request.cookies.get(COOKIE, ""), None)
        response.delete_cookie(COOKIE)

    # --- Confirmation tokens. --------------------------------------------------------------------

    def token(self, action: str, target: str) -> str:
        msg = f"{action}\x00{target}".encode()
        return hmac.new(self.secret, msg, hashlib.sha256).hexdigest()

    def token_ok(self, action: str, target: str, token: str) -> bool:
        return hmac.compare_digest(self.token(action, target), token)

    # --- Calls and pages. ------------------------------------------------------------------------

    async def call(
        self,
        request: Request,
        method: str,
        args: dict[str, Any] | None = None,
        *,
        write: bool = False,
    ) -> Any:
        """``method`` signed by the person's keys if signed in; a ``write`` never by the
        dashboard's own (link.py)."""
        creds = self.credentials(request)
        member = self.member(request)
        return await self.link.call(method, args, member=member, credentials=creds, write=write)

    def member(self, request: Request) -> str | None:
        """The member a page reads from and acts on: ``?member=`` when it names one the
        dashboard watches, else None (the member that answered last)."""
        asked = request.query_params.get("member", "")
        return asked if asked in self.link.members else None

    def render(self, request: Request, template: str, **context: Any) -> Response:
        context.setdefault("error", request.query_params.get("error", ""))
        context.setdefault("done", request.query_params.get("done", ""))
        context["signed_in"] = self.credentials(request) is not None
        context["members"] = self.link.members
        member = self.member(request)
        context["member"] = member or ""
        # Appended to form actions and links, so a choice of member survives each step.
        context["member_q"] = f"?{urlencode({'member': member})}" if member else ""
        response: Response = self.templates.TemplateResponse(request, template, context)
        return response

    async def page(
        self,
        request: Request,
        template: str,
        load: Callable[[], Awaitable[dict[str, Any]]],
        **extra: Any,
    ) -> Response:
        """Render ``template`` with what ``load`` returns, or with the broker's error as a
        banner. ``extra`` (the page's own name, its query) is there in both cases."""
        extra.setdefault("page", template.removesuffix(".html"))
        try:
            context = await load()
        except TxmqError as exc:
            return self.render(request, template, error=banner(exc), failed=True, **extra)
        return self.render(request, template, failed=False, **extra, **context)
