"""The dashboard's web application: routes, static files, and the sampler's lifetime.

Stack: Starlette (ASGI routing, forms, Jinja2 templates) served by uvicorn; charts are SVG drawn
on the server (charts.py), so the browser needs no JavaScript and the package no asset build.
Owns: ``build_app(members)``: the route table, which routes need a signed-in visitor when a
broker checks keys (all but the sign-in and sign-out forms and the static files: ui.py), the
404 page, and the guard in front of everything (guard.py: Host allow-list, same-origin POSTs,
security headers). Must not: hold page logic (pages.py, actions.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from txmq import limits
from txmq.dashboard import actions, pages
from txmq.dashboard.guard import Guard
from txmq.dashboard.link import Link
from txmq.dashboard.sampler import Sampler
from txmq.dashboard.sessions import FORM_TTL_S, Sessions
from txmq.dashboard.ui import Ui
from txmq.protocol.client_security import ClientSecurity

STATIC = Path(__file__).with_name("static")
Handler = Callable[[Ui, Request], Awaitable[Response]]


def build_app(
    members: list[str],
    *,
    sample_period_ms: int | None = None,
    security: ClientSecurity | None = None,
    hosts: frozenset[str],
    form_ttl_s: float = FORM_TTL_S,
) -> Starlette:
    """The application; it answers only requests whose ``Host`` is in ``hosts``
    (guard.allowed_hosts)."""
    link = Link(members, security)
    period_ms = limits.DASHBOARD_SAMPLE_PERIOD_MS if sample_period_ms is None else sample_period_ms
    sampler = Sampler(link, period_ms=period_ms)
    ui = Ui(link, sampler, Sessions(ttl_s=form_ttl_s))

    def bind(handler: Handler, *, open_to_all: bool = False) -> Callable[..., Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if not open_to_all and await ui.needs_sign_in(request):
                query = urlencode({"error": "sign-in-needed"})
                return RedirectResponse(f"/login?{query}", status_code=303)
            return await handler(ui, request)

        return endpoint

    async def not_found(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, HTTPException) or exc.status_code != 404:
            raise exc
        text = "There is no such page on this dashboard."
        return ui.render(
            request, "refused.html", status=404, error=text, back="/", title="Not found"
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(sampler.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    routes = [
        Route("/", bind(pages.overview)),
        Route("/topics", bind(pages.topics)),
        Route("/topics/create", bind(actions.topic_create), methods=["POST"]),
        Route("/topics/delete", bind(actions.topic_delete), methods=["POST"]),
        Route("/topics/update", bind(actions.topic_update), methods=["POST"]),
        Route("/groups", bind(pages.groups)),
        Route("/groups/{name:path}/reset", bind(actions.group_reset), methods=["POST"]),
        Route("/groups/{name:path}/redrive", bind(actions.group_redrive), methods=["POST"]),
        Route("/groups/{name:path}/delete", bind(actions.group_delete), methods=["POST"]),
        Route("/groups/{name:path}", bind(pages.group)),
        Route("/transactions", bind(pages.transactions)),
        Route("/transactions/{tid}/resolve", bind(actions.txn_resolve), methods=["POST"]),
        Route("/messages", bind(pages.messages)),
        Route("/login", bind(actions.login, open_to_all=True), methods=["GET", "POST"]),
        Route("/logout", bind(actions.logout, open_to_all=True), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(Guard, hosts=hosts)],
        exception_handlers={404: not_found},
    )
    app.state.ui = ui
    return app
