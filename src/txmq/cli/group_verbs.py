"""The operator verbs on a consumer group: ``txmq group reset`` (move its position) and
``txmq group redrive`` (send its dead letters back), over the broker's admin channel.

Owns: their arguments (``--to``: earliest, latest, a time or an offset, read by
client/verbs.py), their tables of what moved, and their ``--json`` (stable field names). The
broker decides and carries out both (broker/admin/reset.py, broker/admin/redrive.py); what
each does to messages in flight or dead-lettered again: docs/operations.md.
Must not: move a position or append a message itself.
"""

from __future__ import annotations

from typing import Any

import click

from txmq.cli.admin_commands import endpoints_option, group
from txmq.cli.tables import Col, json_option, show
from txmq.client.admin import call
from txmq.client.verbs import reset_target, said
from txmq.errors import TxmqError


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
    if r.get("failed"):
        failed = "; ".join(f"{b}: {why}" for b, why in sorted(r["failed"].items()))
        raise TxmqError(
            f"the reset was not made on {failed}; the others moved: run the same reset again"
        )
