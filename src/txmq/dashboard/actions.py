"""The dashboard's state-changing actions, each behind a confirmation page: create and delete a
topic, commit or roll back a transaction; and signing in with admin credentials.

Owns: the two-step form flow. Step one (a button on a page) shows ``confirm.html`` with what
will happen (for a transaction: its message) and a token for exactly that action and target.
Step two (the confirmation's button) posts the token back, the action runs, and the browser is
redirected to the list with a "done" banner (or the broker's refusal as an error banner).
Must not: act without a valid token.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from txmq.dashboard.link import Credentials
from txmq.dashboard.pages import render_body
from txmq.dashboard.ui import Ui
from txmq.dashboard.ui_text import banner
from txmq.errors import TxmqError

TOPIC_TYPES = ("normal", "fifo", "delay", "transaction")


def _redirect(path: str, **query: str) -> Response:
    return RedirectResponse(f"{path}?{urlencode(query)}", status_code=303)


def _back(ui: Ui, request: Request, path: str, **query: str) -> Response:
    """Redirect to ``path`` with a banner, on the member the request was about."""
    member = ui.member(request)
    return _redirect(path, **query, **({"member": member} if member else {}))


async def _confirmed(
    ui: Ui,
    request: Request,
    *,
    action: str,
    target: str,
    back: str,
    call: tuple[str, dict[str, Any]],
    done: str,
    context: dict[str, Any],
) -> Response:
    """Step two if the form carries a valid token for (action, target), else step one."""
    form = await request.form()
    token = str(form.get("token", ""))
    if not token:
        return ui.render(
            request,
            "confirm.html",
            token=ui.token(action, target),
            action_url=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            back=back,
            failed=False,
            **context,
        )
    if not ui.token_ok(action, target, token):
        return _back(ui, request, back, error="the confirmation was not valid; try again")
    try:
        await ui.call(request, *call, write=True)
    except TxmqError as exc:
        return _back(ui, request, back, error=banner(exc))
    return _back(ui, request, back, done=done)


async def topic_create(ui: Ui, request: Request) -> Response:
    form = await request.form()
    name = str(form.get("name", "")).strip()
    kind = str(form.get("type", "normal"))
    try:
        queues = int(str(form.get("queues", "4")))
    except ValueError:
        return _back(ui, request, "/topics", error="queues must be a number")
    if not name or kind not in TOPIC_TYPES:
        return _back(ui, request, "/topics", error="a topic needs a name and a known type")
    target = f"{name}/{queues}/{kind}"
    return await _confirmed(
        ui,
        request,
        action="topic-create",
        target=target,
        back="/topics",
        call=("TopicCreate", {"name": name, "queues": queues, "type": kind}),
        done=f"created topic {name}",
        context={
            "title": f"Create topic {name}?",
            "description": f"A {kind} topic with {queues} queues.",
            "fields": {"name": name, "queues": str(queues), "type": kind},
        },
    )


async def topic_delete(ui: Ui, request: Request) -> Response:
    form = await request.form()
    name = str(form.get("name", "")).strip()
    return await _confirmed(
        ui,
        request,
        action="topic-delete",
        target=name,
        back="/topics",
        call=("TopicDelete", {"name": name}),
        done=f"deleted topic {name}",
        context={
            "title": f"Delete topic {name}?",
            "description": "It leaves routing at once; its messages age out with retention.",
            "fields": {"name": name},
        },
    )


async def txn_resolve(ui: Ui, request: Request) -> Response:
    tid = request.path_params["tid"]
    form = await request.form()
    action = str(form.get("action", ""))
    if action not in ("commit", "rollback"):
        return _back(ui, request, "/transactions", error="action must be commit or rollback")
    context: dict[str, Any] = {
        "title": f"{'Commit' if action == 'commit' else 'Roll back'} transaction {tid}?",
        "description": "commit: consumers receive this message. rollback: it is discarded.",
        "fields": {"action": action},
    }
    if not form.get("token"):
        try:
            shown = await ui.call(request, "TxnMessage", {"id": tid})
        except TxmqError as exc:
            return _back(ui, request, "/transactions", error=banner(exc))
        message = shown["message"]
        message["rendered"], message["note"] = render_body(message["body_base64"], "text")
        context.update(message=message, transaction=shown["transaction"])
    return await _confirmed(
        ui,
        request,
        action=f"txn-{action}",
        target=tid,
        back="/transactions",
        call=("TxnResolve", {"id": tid, "action": action}),
        done=f"transaction {tid}: {action} done",
        context=context,
    )


async def login(ui: Ui, request: Request) -> Response:
    if request.method == "GET":
        return ui.render(request, "login.html", failed=False)
    form = await request.form()
    access_key = str(form.get("access_key", "")).strip()
    secret_key = str(form.get("secret_key", ""))
    if not access_key or not secret_key:
        return ui.render(request, "login.html", error="both keys are needed", failed=False)
    response = _redirect("/", done=f"signed in as {access_key}")
    ui.sign_in(response, Credentials(access_key, secret_key))
    return response


async def logout(ui: Ui, request: Request) -> Response:
    response = _redirect("/", done="signed out: read-only")
    ui.sign_out(request, response)
    return response
