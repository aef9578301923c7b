"""The dashboard's state-changing actions, each behind a confirmation page: create, grow and
delete a topic, commit or roll back a transaction, reset a consumer group's position,
re-drive its dead letters and delete the group; and signing in and out.

Owns: the two-step form flow. Step one (a button on a page) shows ``confirm.html`` with what
will happen (for a transaction: its message) and a one-use token for exactly that action,
target and member, issued into the visitor's session (sessions.py). Step two (the
confirmation's button) posts the token back, the action runs with the visitor's keys, and the
browser is redirected to the list with a banner code (ui_text.py); a broker refusal is shown on
a page of its own. Signing in: the form carries a token of the visitor's (anonymous) session,
attempts are limited per address, and the keys are checked with one signed read of the broker
(an admin listing) before a session holds them.
Must not: act without a valid token, or hold keys the broker did not accept.
Every POST has passed the same-origin check first (guard.py).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from txmq import limits
from txmq.client.verbs import failed_members, reset_target, said
from txmq.dashboard.link import Credentials
from txmq.dashboard.pages import render_body
from txmq.dashboard.sessions import SessionsFullError
from txmq.dashboard.ui import Ui, address
from txmq.dashboard.ui_text import banner, http_status, missing
from txmq.errors import CODE_FORBIDDEN, CODE_UNAUTHORIZED, BadRequestError, ConfigError, TxmqError

TOPIC_TYPES = ("normal", "fifo", "delay", "transaction")
SIGN_IN = "sign-in"


def _redirect(path: str, **query: str) -> Response:
    return RedirectResponse(f"{path}?{urlencode(query)}" if query else path, status_code=303)


def _back(ui: Ui, request: Request, path: str, **query: str) -> Response:
    """Redirect to ``path`` with a banner code, on the member the request was about."""
    member = ui.member(request)
    return _redirect(path, **query, **({"member": member} if member else {}))


async def _confirmed(
    ui: Ui,
    request: Request,
    *,
    action: str,
    target: str,
    back: str,
    call: tuple[str, dict[str, Any]] | Callable[[], Awaitable[Any]],
    done: str,
    context: dict[str, Any],
    unfinished: Callable[[Any], str | None] | None = None,
) -> Response:
    """Step two if the form carries a token for (action, target), else step one. ``call``:
    the admin method and its arguments, or what makes the calls (several, for a re-drive).
    ``unfinished``: what the broker's answer says was left undone (a cluster member that did
    not take a reset, a re-drive that stopped), shown as a refusal instead of the done
    banner."""
    form = await request.form()
    token = str(form.get("token", ""))
    if not token:
        session, new = ui.form_session(request)
        response = ui.render(
            request,
            "confirm.html",
            token=ui.token(request, session, action, target),
            action_url=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            back=back,
            failed=False,
            **context,
        )
        return ui.keep(response, session) if new else response
    if not ui.token_ok(request, action, target, token):
        return _back(ui, request, back, error="confirm-invalid")
    try:
        reply = await (ui.call(request, *call) if isinstance(call, tuple) else call())
    except TxmqError as exc:
        return ui.refused(request, exc, back)
    left = unfinished(reply) if unfinished is not None else None
    if left:
        return ui.refused(request, TxmqError(left), back, left)
    return _back(ui, request, back, done=done)


async def topic_create(ui: Ui, request: Request) -> Response:
    form = await request.form()
    name = str(form.get("name", "")).strip()
    kind = str(form.get("type", "normal"))
    try:
        queues = int(str(form.get("queues", "4")))
    except ValueError:
        return _back(ui, request, "/topics", error="form-invalid")
    if not name or kind not in TOPIC_TYPES:
        return _back(ui, request, "/topics", error="form-invalid")
    return await _confirmed(
        ui,
        request,
        action="topic-create",
        target=f"{name}/{queues}/{kind}",
        back="/topics",
        call=("TopicCreate", {"name": name, "queues": queues, "type": kind}),
        done="topic-created",
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
        done="topic-deleted",
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
        return _back(ui, request, "/transactions", error="form-invalid")
    context: dict[str, Any] = {
        "title": f"{'Commit' if action == 'commit' else 'Roll back'} transaction {tid}?",
        "description": "commit: consumers receive this message. rollback: it is discarded.",
        "fields": {"action": action},
    }
    if not form.get("token"):
        try:
            shown = await ui.call(request, "TxnMessage", {"id": tid})
        except TxmqError as exc:
            return ui.refused(request, exc, "/transactions", missing(exc, transaction=tid) or "")
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
        done=f"txn-{action}",
        context=context,
    )


async def topic_update(ui: Ui, request: Request) -> Response:
    """Grow a topic: the confirmation says from how many queues to how many (a dry run of
    TopicUpdate, which refuses a shrink before anything is asked)."""
    form = await request.form()
    name = str(form.get("name", "")).strip()
    try:
        queues = int(str(form.get("queues", "")))
    except ValueError:
        return _back(ui, request, "/topics", error="form-invalid")
    if not name:
        return _back(ui, request, "/topics", error="form-invalid")
    args = {"name": name, "queues": queues}
    context: dict[str, Any] = {"fields": {"name": name, "queues": str(queues)}}
    if not form.get("token"):
        try:
            plan = await ui.call(request, "TopicUpdate", {**args, "dry_run": True})
        except TxmqError as exc:
            return ui.refused(request, exc, "/topics", missing(exc, topic=name) or "")
        fifo = (
            " Its message groups may move to a new queue: order holds within a group before "
            "the growth and after it, not across it."
            if plan["type"] == "fifo"
            else ""
        )
        context.update(
            title=f"Grow topic {name} from {plan['was']} to {queues} queues?",
            description="Every broker gets the new queues at once; the queues it has keep "
            f"their messages and offsets. A topic cannot shrink again.{fifo}",
        )
    return await _confirmed(
        ui,
        request,
        action="topic-update",
        target=f"{name}/{queues}",
        back="/topics",
        call=("TopicUpdate", args),
        done="topic-grown",
        context=context,
    )


async def group_reset(ui: Ui, request: Request) -> Response:
    """Move a consumer group's position: the confirmation shows every queue's old and new
    offset on every broker (a dry run of GroupReset) before anything moves."""
    name = request.path_params["name"]
    back = "/groups/" + quote(name, safe="")
    form = await request.form()
    topic = str(form.get("topic", "")).strip()
    raw_to, raw_queue = str(form.get("to", "")), str(form.get("queue", "")).strip()
    try:
        target = reset_target(raw_to, naive=dt.UTC)
        queue = int(raw_queue) if raw_queue else None
    except (BadRequestError, ValueError):
        return _back(ui, request, back, error="reset-invalid")
    args = {"group": name, "topic": topic, **target}
    if queue is not None:
        args["queue"] = queue
    where = f"queue {queue} of {topic}" if queue is not None else topic
    context: dict[str, Any] = {
        "title": f"Reset group {name} on {where} to {said(target)}?",
        "description": "Its consumers read from the new position at once. Messages it has in "
        "flight there are dropped: their acks fail, and those at or after the new position "
        "are delivered again.",
        "fields": {"topic": topic, "to": raw_to, "queue": raw_queue},
    }
    if not form.get("token"):
        try:
            context["plan"] = (await ui.call(request, "GroupReset", {**args, "dry_run": True}))[
                "brokers"
            ]
        except TxmqError as exc:
            return ui.refused(request, exc, back, missing(exc, topic=topic) or "")
    return await _confirmed(
        ui,
        request,
        action="group-reset",
        target=json.dumps(args, sort_keys=True),
        back=back,
        call=("GroupReset", args),
        done="group-reset",
        context=context,
        unfinished=_not_everywhere(
            "The reset was not made", "The other brokers moved: reset again."
        ),
    )


async def group_redrive(ui: Ui, request: Request) -> Response:
    """Send a group's dead letters (on the member the page reads) back to their topics: the
    confirmation lists the first ones (a dry run of GroupRedrive); confirmed, one call per
    batch until the DLQ is done, ``max`` went back, or it stops before a letter."""
    name = request.path_params["name"]
    back = "/groups/" + quote(name, safe="")
    form = await request.form()
    topic = str(form.get("topic", "")).strip()
    raw_max = str(form.get("max", "")).strip()
    try:
        most = int(raw_max) if raw_max else None
    except ValueError:
        return _back(ui, request, back, error="redrive-invalid")
    if most is not None and most < 1:
        return _back(ui, request, back, error="redrive-invalid")
    args: dict[str, Any] = {"group": name, **({"topic": topic} if topic else {})}
    context: dict[str, Any] = {"fields": {"topic": topic, "max": raw_max}}
    if not form.get("token"):
        try:
            plan = await ui.call(request, "GroupRedrive", {**args, "dry_run": True})
        except TxmqError as exc:
            return ui.refused(request, exc, back, missing(exc, topic=topic) or "")
        letters = plan["redriven"][:most]
        more = (
            " (and more after them)" if plan["more"] or len(plan["redriven"]) > len(letters) else ""
        )
        stops = f" It stops before one: {plan['stopped']}." if plan["stopped"] else ""
        context.update(
            title=f"Send {len(letters)} dead letters of group {name} back{more}?",
            description="Each goes back to the topic it died in, once, for this group only; "
            f"if it dies again it returns to the DLQ with its re-drive count.{stops}",
            letters=letters,
        )

    async def run() -> Any:
        sent = 0
        for _ in range(limits.REDRIVE_CALLS_MAX):
            want = (
                limits.REDRIVE_BATCH_MAX
                if most is None
                else min(most - sent, limits.REDRIVE_BATCH_MAX)
            )
            got = await ui.call(request, "GroupRedrive", {**args, "max": want})
            sent += len(got["redriven"])
            if got["stopped"] or not got["more"] or (most is not None and sent >= most):
                return got
        return got

    return await _confirmed(
        ui,
        request,
        action="group-redrive",
        target=json.dumps({**args, "max": most}, sort_keys=True),
        back=back,
        call=run,
        done="group-redriven",
        context=context,
        unfinished=lambda got: str(got.get("stopped") or "") or None,
    )


async def group_delete(ui: Ui, request: Request) -> Response:
    """Delete a consumer group on every broker: the confirmation says what goes (a dry run of
    GroupDelete) and that its dead letters stay. Never forced: a group with a connected
    consumer is refused, and the refusal page says so (``txmq group delete --force`` is for
    an operator who means it)."""
    name = request.path_params["name"]
    args = {"group": name}
    form = await request.form()
    context: dict[str, Any] = {"fields": {}}
    if not form.get("token"):
        try:
            plan = await ui.call(request, "GroupDelete", {**args, "dry_run": True})
        except TxmqError as exc:
            back = "/groups/" + quote(name, safe="")
            return ui.refused(request, exc, back, missing(exc, group=name) or "")
        queues = [q for b in plan["brokers"] for q in b["queues"]]
        dead = sum(int(b["dead_letters"]) for b in plan["brokers"])
        context.update(
            title=f"Delete consumer group {name}?",
            description=f"Its positions on {len(queues)} queues go on every broker, and the "
            f"{sum(int(q['inflight']) for q in queues)} messages it has in flight are dropped "
            f"(their acks fail). Its {dead} dead letters stay in {plan['dlq']}. A consumer of "
            "this name started later begins at the earliest retained message.",
        )
    return await _confirmed(
        ui,
        request,
        action="group-delete",
        target=name,
        back="/groups",
        call=("GroupDelete", args),
        done="group-deleted",
        context=context,
        unfinished=_not_everywhere(
            "The group was not deleted", "The other brokers deleted it: delete again."
        ),
    )


def _not_everywhere(undone: str, redo: str) -> Callable[[Any], str | None]:
    """The ``unfinished`` check of a verb every member carries out: None when none failed,
    else "{undone} on <the members and why>. {redo}"."""

    def unfinished(reply: Any) -> str | None:
        where = failed_members(reply)
        return f"{undone} on {where}. {redo}" if where else None

    return unfinished


def _login_page(ui: Ui, request: Request, *, status: int = 200, error: str = "") -> Response:
    """The sign-in form, with a token of the visitor's session (a new anonymous one if none)."""
    session, new = ui.form_session(request)
    shown: dict[str, Any] = {"error": error} if error else {}
    response = ui.render(
        request,
        "login.html",
        status=status,
        token=ui.sessions.issue(session, SIGN_IN, ""),
        failed=False,
        **shown,
    )
    return ui.keep(response, session) if new else response


async def _check_keys(ui: Ui, creds: Credentials) -> tuple[int, str] | None:
    """None when the broker accepts ``creds`` as an admin's (one signed admin read), else the
    HTTP status and the sentence that says why not."""
    if await ui.access.settle() is False:
        return 400, (
            "This broker has no ACL: it checks no keys, so there is nothing to sign in to. "
            "Every page is open to whoever reaches this dashboard."
        )
    try:
        await ui.link.call("TopicList", {"after": "", "limit": 1}, credentials=creds)
    except ConfigError:
        return 401, "That is not an access key (letters, digits and _ . @ : / + - only)."
    except TxmqError as exc:
        code = getattr(exc, "code", None)
        if code == CODE_UNAUTHORIZED:
            return 401, "The broker refused these keys: unknown access key or wrong secret."
        if code == CODE_FORBIDDEN:
            return 403, (
                f"The broker knows access key {creds.access_key!r}, but it is not an admin: "
                "the dashboard needs an admin's keys."
            )
        return http_status(exc), banner(exc)
    return None


async def login(ui: Ui, request: Request) -> Response:
    if request.method == "GET":
        return _login_page(ui, request)
    who = address(request)
    if not ui.attempts.allow(who):
        wait_s = ui.attempts.retry_after_s(who)
        text = f"Too many sign-in attempts from {who}: try again in {wait_s} s."
        response = _login_page(ui, request, status=429, error=text)
        response.headers["Retry-After"] = str(wait_s)
        return response
    form = await request.form()
    session = ui.session(request)
    if not ui.sessions.redeem(session, str(form.get("token", "")), SIGN_IN, ""):
        text = "The sign-in form expired or was not this browser's: nothing was sent. Try again."
        return _login_page(ui, request, status=400, error=text)
    access_key = str(form.get("access_key", "")).strip()
    secret_key = str(form.get("secret_key", ""))
    if not access_key or not secret_key:
        return _login_page(ui, request, status=400, error="Both keys are needed.")
    creds = Credentials(access_key, secret_key)
    refused = await _check_keys(ui, creds)
    if refused is not None:
        return _login_page(ui, request, status=refused[0], error=refused[1])
    try:
        signed = ui.sessions.sign_in(who, creds, replaces=session.sid if session else "")
    except SessionsFullError as exc:
        return _login_page(ui, request, status=503, error=f"No room to sign in: {exc}.")
    return ui.keep(_redirect("/", done="signed-in"), signed)


async def logout(ui: Ui, request: Request) -> Response:
    form = await request.form()
    session = ui.session(request)
    if session is None or session.credentials is None:
        return ui.forget(_redirect("/login"))
    if not ui.sessions.form_key_ok(session, str(form.get("token", ""))):
        return _redirect("/", error="sign-out-invalid")
    ui.sessions.end(session.sid)
    return ui.forget(_redirect("/login", done="signed-out"))
