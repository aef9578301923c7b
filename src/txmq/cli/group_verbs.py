"""The operator verbs on a consumer group: ``txmq group reset`` (move its position),
``txmq group redrive`` (send its dead letters back) and ``txmq group delete`` (forget it), over
the broker's admin channel.

Owns: their arguments (``--to``: earliest, latest, a time or an offset, read by
client/verbs.py), their tables of what moved, and their ``--json`` (stable field names). The
broker decides and carries out all three (broker/admin/reset.py, redrive.py, delete.py); what
each does to messages in flight or dead-lettered again: docs/operations.md.
Must not: move a position, delete one or append a message itself.
"""

from __future__ import annotations

from typing import Any

import click

from txmq import limits
from txmq.cli.admin_commands import endpoints_option, group
from txmq.cli.tables import Col, json_option, show
from txmq.client.admin import call, delete_group, members
from txmq.client.verbs import failed_members, reset_target, said
from txmq.errors import BadRequestError, NotFoundError, TxmqError


@group.command("reset")
@click.argument("name")
@click.option("--topic", required=True, help="The topic whose queues move.")
@click.option(
    "--to",
    "to",
    required=True,
    help="earliest, latest, a time (ISO-8601 such as 2026-12-06T10:00:00Z, without a zone "
    "this machine's local time; or ms since the epoch, 13 digits or more) or an offset.",
)
@click.option("--queue", type=click.IntRange(0), default=None, help="Only this queue id.")
@click.option("--dry-run", is_flag=True, help="Show what would move; move nothing.")
@endpoints_option
@json_option
def group_reset(
    name: str,
    topic: str,
    to: str,
    queue: int | None,
    dry_run: bool,
    endpoints: str,
    as_json: bool,
) -> None:
    """Move a consumer group's position on a topic, on every broker: all named queues or none.

    Messages the group has in flight on those queues are dropped (their acks fail); one at or
    after its queue's new position is delivered again. Live consumers carry on from the new
    position without a restart.
    """
    args: dict[str, Any] = {"group": name, "topic": topic, **reset_target(to), "dry_run": dry_run}
    if queue is not None:
        args["queue"] = queue
    r = call(endpoints, "GroupReset", args)
    rows = [
        [b["broker"], q["queue"], q["old"], q["new"], q["inflight"]]
        for b in r["brokers"]
        for q in b["queues"]
    ]
    cols = [Col("broker", ident=True), Col("queue", justify="right")]
    cols += [Col(h, justify="right") for h in ("old", "new", "in flight dropped")]
    verb = "would move" if dry_run else "moved"
    show(f"group {name} on {topic} {verb} to {said(args)}", cols, rows, r, as_json)
    if failed := failed_members(r):
        raise TxmqError(
            f"the reset was not made on {failed}; the others moved: run the same reset again"
        )


@group.command("redrive")
@click.argument("name")
@click.option("--topic", default=None, help="Only the dead letters of this topic.")
@click.option(
    "--max", "max_count", type=click.IntRange(1), default=None, help="At most this many in all."
)
@click.option("--dry-run", is_flag=True, help="List what would be sent back; send nothing.")
@endpoints_option
@json_option
def group_redrive(
    name: str, topic: str | None, max_count: int | None, dry_run: bool, endpoints: str,
    as_json: bool,
) -> None:  # fmt: skip
    """Send a consumer group's dead letters back to the topics they died in, on every broker.

    Each goes back at most once, however often this runs or wherever it was interrupted; the
    copy keeps its id, keys, tag, properties and body, reaches this group only, and carries
    TXMQ_REDRIVE_COUNT (shown by `message show` and in the DLQ if it dies again). --dry-run
    lists up to the first 256 of each broker.
    """
    args: dict[str, Any] = {"group": name, "dry_run": dry_run}
    if topic is not None:
        args["topic"] = topic
    out: dict[str, Any] = {"group": name, "topic": topic, "dry_run": dry_run, "brokers": []}
    problems: list[str] = []
    left = max_count
    for m in members(endpoints):
        if left is not None and left <= 0:
            break
        try:
            got = _redrive_member(str(m["endpoint"]), args, left)
        except (NotFoundError, BadRequestError):
            raise  # bad input (an unknown topic, a malformed group): the same on every member
        except TxmqError as exc:
            problems.append(f"broker {m['name']} ({m['endpoint']}): {exc}")
            continue
        out["brokers"].append({"broker": m["name"], **got})
        left = None if left is None else left - len(got["redriven"])
        if got["stopped"]:
            problems.append(f"broker {m['name']}: {got['stopped']}")
    out["total"] = sum(len(b["redriven"]) for b in out["brokers"])
    rows = [
        [b["broker"], r["dlq_offset"], r["message_id"], r["topic"], r["queue"], r["offset"],
         r["redrives"]]
        for b in out["brokers"]
        for r in b["redriven"]
    ]  # fmt: skip
    cols = [Col("broker", ident=True), Col("dlq offset", justify="right")]
    cols += [Col("message id", ident=True), Col("topic", ident=True)]
    cols += [Col(h, justify="right") for h in ("queue", "offset", "redrives")]
    verb = "would send back" if dry_run else "sent back"
    show(f"group {name}: {verb} {out['total']} dead letters", cols, rows, out, as_json)
    if problems:
        raise TxmqError("; ".join(problems))


def _redrive_member(endpoint: str, args: dict[str, Any], left: int | None) -> dict[str, Any]:
    """One broker's re-drive, a call per batch until its DLQ is done, ``left`` messages are
    sent back, or it stops; a dry run is one call."""
    rows: list[dict[str, Any]] = []
    got: dict[str, Any] = {"more": False, "stopped": ""}
    for _ in range(limits.REDRIVE_CALLS_MAX):
        want = limits.REDRIVE_BATCH_MAX
        if left is not None:
            want = min(left - len(rows), want)
        got = call(endpoint, "GroupRedrive", {**args, "max": want})
        rows += got["redriven"]
        done = left is not None and len(rows) >= left
        if args["dry_run"] or got["stopped"] or not got["more"] or done:
            break
    return {"redriven": rows, "more": bool(got["more"]), "stopped": str(got["stopped"])}


@group.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even while a consumer of it is connected.")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@endpoints_option
@json_option
def group_delete(name: str, force: bool, dry_run: bool, endpoints: str, as_json: bool) -> None:
    """Delete a consumer group on every broker: its positions on every topic and its messages
    in flight (their acks fail). Its dead letters stay: the DLQ topic %DLQ%NAME is kept (delete
    it with `txmq topic delete`).

    Refused while a consumer of the group is connected to a broker, unless --force (a consumer
    that goes on receiving then starts again at the earliest retained message). Exit codes: 0
    deleted, 1 a broker failed (named; the same delete again finishes it), 2 no broker knows
    the group, a malformed name or a connected consumer without --force, 3 unreachable.
    """
    r = delete_group(endpoints, name, force=force, dry_run=dry_run)
    r.pop("ok", None)
    rows = [
        [b["broker"], q["topic"], q["queue"], q["ack"], q["inflight"]]
        for b in r["brokers"]
        for q in b["queues"]
    ]
    cols = [Col("broker", ident=True), Col("topic", ident=True), Col("queue", justify="right")]
    cols += [Col(h, justify="right") for h in ("acked to", "in flight dropped")]
    kept = sum(int(b["dead_letters"]) for b in r["brokers"])
    verb = "would delete" if dry_run else "deleted"
    title = f"group {name} {verb}: {len(rows)} queue positions"
    show(f"{title}; {r['dlq']} kept ({kept} dead letters)", cols, rows, r, as_json)
    if failed := failed_members(r):
        raise TxmqError(
            f"the group was not deleted on {failed}; the others deleted it: run the same "
            "delete again"
        )
