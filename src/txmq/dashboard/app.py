"""The dashboard's web application: routes, static files, and the sampler's lifetime.

Stack: Starlette (ASGI routing, forms, Jinja2 templates) served by uvicorn; charts are SVG drawn
on the server (charts.py), so the browser needs no JavaScript and the package no asset build.
Owns: ``build_app(members)``, the route table. Must not: hold page logic (pages.py, actions.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from txmq import limits
from txmq.dashboard import actions, pages
from txmq.dashboard.link import Link
from txmq.dashboard.sampler import Sampler
from txmq.dashboard.ui import Ui
from txmq.protocol.client_security import ClientSecurity

STATIC = Path(__file__).with_name("static")
Handler = Callable[[Ui, Request], Awaitable[Response]]


def build_app(
    members: list[str],
    *,
    sample_period_ms: int | None = None,
    security: ClientSecurity | None = None,
) -> Starlette:
    link = Link(members, security)
    period_ms = limits.DASHBOARD_SAMPLE_PERIOD_MS if sample_period_ms is None else sample_period_ms
    sampler = Sampler(link, period_ms=period_ms)
    ui = Ui(link, sampler)

    def bind(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await handler(ui, request)

        return endpoint

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
        Route("/groups", bind(pages.groups)),
        Route("/groups/{name:path}", bind(pages.group)),
        Route("/transactions", bind(pages.transactions)),
        Route("/transactions/{tid}/resolve", bind(actions.txn_resolve), methods=["POST"]),
        Route("/messages", bind(pages.messages)),
        Route("/login", bind(actions.login), methods=["GET", "POST"]),
        Route("/logout", bind(actions.logout), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.ui = ui
    return app
