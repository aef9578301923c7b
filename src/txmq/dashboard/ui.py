"""What every dashboard page shares: templates, the broker link, sessions, form tokens, the
sign-in rule, and turning broker errors into a banner and an HTTP status.

Owns: ``Ui`` (one per dashboard process).
- The sign-in rule: when a watched broker checks keys (access.py), every page but the sign-in
  page answers a visitor who has not signed in with a redirect to it (app.py applies the rule),
  so nothing the broker holds is shown or changed without keys the broker accepted. A broker
  without ACL is open to everyone who reaches it, the dashboard included, and every page says so.
- Calls: signed with the visitor's keys, or unsigned; never with the dashboard's own keys.
- Confirmation tokens (sessions.py): issued into the visitor's session (an anonymous one when
  not signed in, kept in a cookie), bound to the action, its target and the member it acts on.
Must not: call the broker outside ``Link``, render broker data unescaped (Jinja2 autoescapes),
or show text a URL carries (banners are codes, ui_text.py).
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from txmq.dashboard.link import Credentials, Link
from txmq.dashboard.sampler import Sampler
from txmq.dashboard.sessions import AttemptLimit, Session, Sessions
from txmq.dashboard.ui_text import DONE, ERRORS, banner, http_status, missing
from txmq.errors import TxmqError

COOKIE = "txmq_dashboard_session"
TEMPLATES = Path(__file__).with_name("templates")


def utc(ms: object) -> str:
    """Milliseconds since the epoch as a UTC date a person reads (``2026-12-06 04:37:12.345
    UTC``); anything else as it is."""
    if not isinstance(ms, int) or isinstance(ms, bool) or ms <= 0:
        return str(ms)
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


class Ui:
    def __init__(self, link: Link, sampler: Sampler, sessions: Sessions) -> None:
        self.link = link
        self.sampler = sampler
        self.access = sampler.access
        self.sessions = sessions
        self.attempts = AttemptLimit()
        self.templates = Jinja2Templates(directory=str(TEMPLATES))  # autoescapes
        self.templates.env.filters["utc"] = utc
        # Each topic's message count at the last topics page: (monotonic time, count).
        self.topic_counts: dict[str, tuple[float, int]] = {}

    # --- Sessions. -------------------------------------------------------------------------------

    def session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE, ""))

    def credentials(self, request: Request) -> Credentials | None:
        found = self.session(request)
        return found.credentials if found is not None else None

    def form_session(self, request: Request) -> tuple[Session, bool]:
        """The visitor's session, or a new anonymous one (True: its cookie is to be set)."""
        found = self.session(request)
        if found is not None:
            return found, False
        return self.sessions.start_anonymous(address(request)), True

    @staticmethod
    def keep(response: Response, session: Session) -> Response:
        response.set_cookie(COOKIE, session.sid, httponly=True, samesite="strict", path="/")
        return response

    @staticmethod
    def forget(response: Response) -> Response:
        response.delete_cookie(COOKIE, httponly=True, samesite="strict", path="/")
        return response

    async def needs_sign_in(self, request: Request) -> bool:
        """True when a broker checks keys (or none could be asked yet) and the visitor has not
        signed in."""
        if self.credentials(request) is not None:
            return False
        return await self.access.settle() is not False

    # --- Confirmation tokens. --------------------------------------------------------------------

    def bound(self, request: Request, target: str) -> str:
        return f"{self.member(request) or ''}\x00{target}"

    def token(self, request: Request, session: Session, action: str, target: str) -> str:
        return self.sessions.issue(session, action, self.bound(request, target))

    def token_ok(self, request: Request, action: str, target: str, token: str) -> bool:
        return self.sessions.redeem(
            self.session(request), token, action, self.bound(request, target)
        )

    # --- Calls and pages. ------------------------------------------------------------------------

    async def call(self, request: Request, method: str, args: dict[str, Any] | None = None) -> Any:
        """``method`` signed by the visitor's keys if signed in, else unsigned (link.py)."""
        creds = self.credentials(request)
        return await self.link.call(method, args, member=self.member(request), credentials=creds)

    def member(self, request: Request) -> str | None:
        """The member a page reads from and acts on: ``?member=`` when it names one the
        dashboard watches, else None (the member that answered last)."""
        asked = request.query_params.get("member", "")
        return asked if asked in self.link.members else None

    def render(
        self, request: Request, template: str, *, status: int = 200, **context: Any
    ) -> Response:
        context.setdefault("error", ERRORS.get(request.query_params.get("error", ""), ""))
        context.setdefault("done", DONE.get(request.query_params.get("done", ""), ""))
        session = self.session(request)
        creds = session.credentials if session is not None else None
        context["signed_in"] = creds is not None
        context["who"] = creds.access_key if creds is not None else ""
        context["sign_out_key"] = session.form_key if session is not None and creds else ""
        context["broker_open"] = self.access.verdict() is False
        # Not even the brokers' addresses before sign-in, when they check keys.
        shown = context["signed_in"] or context["broker_open"]
        context["members"] = self.link.members if shown else []
        member = self.member(request)
        context["member"] = member or ""
        # Appended to form actions and links, so a choice of member survives each step.
        context["member_q"] = f"?{urlencode({'member': member})}" if member else ""
        context.setdefault("page", template.removesuffix(".html"))
        response: Response = self.templates.TemplateResponse(
            request, template, context, status_code=status
        )
        return response

    def refused(self, request: Request, exc: TxmqError, back: str, text: str = "") -> Response:
        """The page that says why the broker refused an action, with a way back."""
        return self.render(
            request,
            "refused.html",
            status=http_status(exc),
            error=text or missing(exc) or banner(exc),
            back=back,
        )

    async def page(
        self,
        request: Request,
        template: str,
        load: Callable[[], Awaitable[dict[str, Any]]],
        names: dict[str, str] | None = None,
        **extra: Any,
    ) -> Response:
        """Render ``template`` with what ``load`` returns, or with the broker's error as a
        banner and status (a name the broker does not know: 404, said once in the dashboard's
        words, from ``names``: topic=, group=, message=, transaction=). ``extra`` (the page's
        own name, its query) is there in both cases."""
        try:
            context = await load()
        except TxmqError as exc:
            text = missing(exc, **(names or {})) or banner(exc)
            return self.render(
                request, template, status=http_status(exc), error=text, failed=True, **extra
            )
        return self.render(request, template, failed=False, **extra, **context)


def address(request: Request) -> str:
    """The client's address as the socket gave it (proxy headers are not trusted: see
    command.py), for the per-address bounds."""
    return request.client.host if request.client is not None else ""
