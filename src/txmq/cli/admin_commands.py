"""Admin commands of ``txmq``: topic, group, txn and message, over the broker's admin channel.

Owns: their arguments, help texts and output: a rich table for people, or ``--json`` (the
broker's answer as JSON, stable field names) for scripts, since tables wrap and truncate to the
terminal's width. Errors become exit codes in main.py.
Must not: talk the RocketMQ protocol (commands.py does, with the official client).
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from txmq import limits
from txmq.broker.config import BrokerConfig
from txmq.cli.admin_client import call, call_pages
from txmq.cli.security import F, security_options
from txmq.errors import NotFoundError

console = Console()
_endpoints = click.option(
    "--endpoints",
    envvar="TXMQ_ENDPOINTS",
    default=f"{BrokerConfig.host}:{BrokerConfig.port}",
    show_default=True,
    help="Broker address HOST:PORT (env TXMQ_ENDPOINTS).",
)


def endpoints_option(fn: F) -> F:
    """``--endpoints`` and the security options (cli/security.py) of a client command."""
    return security_options(_endpoints(fn))


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the broker's answer as JSON (for scripts)."
)


def show(title: str, columns: list[str], rows: list[list[Any]], data: Any, as_json: bool) -> None:
    if as_json:
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k != "ok"}
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*(str(x) for x in r))
    console.print(t)


@click.group()
def topic() -> None:
    """Create, list, describe and delete topics."""


@topic.command("create")
@click.argument("name")
@click.option(
    "--queues",
    default=BrokerConfig.default_queue_count,
    show_default=True,
    type=click.IntRange(1, limits.QUEUES_PER_TOPIC_MAX),
)
@click.option(
    "--type",
    "kind",
    default="normal",
    show_default=True,
    type=click.Choice(["normal", "fifo", "delay", "transaction"]),
    help="The message type the topic accepts.",
)
@endpoints_option
def topic_create(name: str, queues: int, kind: str, endpoints: str) -> None:
    """Create a topic (exit 2 if it exists or the name is illegal)."""
    r = call(endpoints, "TopicCreate", {"name": name, "queues": queues, "type": kind})
    click.echo(f"created topic {r['name']} ({r['type']}, {r['queues']} queues)")


@topic.command("list")
@endpoints_option
@json_option
def topic_list(endpoints: str, as_json: bool) -> None:
    """List topics with their type, queues and retained messages."""
    r = {"topics": call_pages(endpoints, "TopicList", {}, "topics")}
    rows = [[t["name"], t["type"], t["queues"], t["messages"]] for t in r["topics"]]
    show("topics", ["name", "type", "queues", "messages"], rows, r, as_json)


@topic.command("describe")
@click.argument("name")
@endpoints_option
@json_option
def topic_describe(name: str, endpoints: str, as_json: bool) -> None:
    """Show a topic's queues and their offset ranges."""
    r = call(endpoints, "TopicDescribe", {"name": name})
    rows = [[q["queue"], q["min"], q["max"], q["max"] - q["min"]] for q in r["queues"]]
    show(
        f"{r['name']} ({r['type']})",
        ["queue", "min offset", "max offset", "messages"],
        rows,
        r,
        as_json,
    )


@topic.command("delete")
@click.argument("name")
@endpoints_option
def topic_delete(name: str, endpoints: str) -> None:
    """Remove a topic from routing (its messages age out with retention)."""
    call(endpoints, "TopicDelete", {"name": name})
    click.echo(f"deleted topic {name}")


@click.group()
def group() -> None:
    """Consumer groups and their lag."""


@group.command("list")
@endpoints_option
@json_option
def group_list(endpoints: str, as_json: bool) -> None:
    """List consumer groups with total lag and messages in flight."""
    r = {"groups": call_pages(endpoints, "GroupList", {}, "groups")}
    rows = [[g["group"], g["lag"], g["inflight"]] for g in r["groups"]]
    show("consumer groups", ["group", "lag", "in flight"], rows, r, as_json)


@group.command("describe")
@click.argument("name")
@endpoints_option
@json_option
def group_describe(name: str, endpoints: str, as_json: bool) -> None:
    """Show a group's position and lag per topic queue."""
    found = [g for g in call_pages(endpoints, "GroupList", {}, "groups") if g["group"] == name]
    if not found:
        raise NotFoundError(f"consumer group {name!r} has no positions on this broker")
    cols = ["topic", "queue", "acked to", "max", "lag", "in flight"]
    keys = ["topic", "queue", "acked_to", "max", "lag", "inflight"]
    rows = [[q[k] for k in keys] for q in found[0]["queues"]]
    show(f"group {name}", cols, rows, found[0], as_json)


@click.group()
def txn() -> None:
    """Pending and dead transactions; operator resolution."""


@txn.command("list")
@endpoints_option
@json_option
def txn_list(endpoints: str, as_json: bool) -> None:
    """List undecided transactions and dead ones (rolled back after max checks)."""
    r = {"transactions": call_pages(endpoints, "TxnList", {}, "transactions")}
    keys = ["transaction_id", "topic", "state", "checks", "dead", "message_id"]
    rows = [[t.get(k, "") for k in keys] for t in r["transactions"]]
    show("transactions", ["id", "topic", "state", "checks", "dead", "message id"], rows, r, as_json)


@txn.command("show")
@click.argument("transaction_id")
@endpoints_option
def txn_show(transaction_id: str, endpoints: str) -> None:
    """Everything the broker knows about one transaction (JSON)."""
    r = call(endpoints, "TxnShow", {"id": transaction_id})
    r.pop("ok", None)
    click.echo(json.dumps(r, indent=2, sort_keys=True))


@txn.command("resolve")
@click.argument("transaction_id")
@click.argument("action", type=click.Choice(["commit", "rollback"]))
@endpoints_option
def txn_resolve(transaction_id: str, action: str, endpoints: str) -> None:
    """Decide a pending or dead transaction as an operator.

    Repeating the same decision is harmless; contradicting an earlier one fails (exit 1).
    """
    r = call(endpoints, "TxnResolve", {"id": transaction_id, "action": action})
    click.echo(f"transaction {transaction_id} is {r['outcome']}")


@click.group()
def message() -> None:
    """Look up messages by id or key."""


@message.command("show")
@click.argument("message_id")
@endpoints_option
def message_show(message_id: str, endpoints: str) -> None:
    """One message with its properties and body (JSON)."""
    r = call(endpoints, "MessageShow", {"id": message_id})
    r.pop("ok", None)
    click.echo(json.dumps(r, indent=2, sort_keys=True))


@message.command("find")
@click.option("--key", required=True, help="A message key (the client's Message.keys).")
@click.option("--topic", default=None, help="Search only this topic (default: all topics).")
@click.option(
    "--max",
    "max_count",
    default=limits.MESSAGE_FIND_RESULTS_DEFAULT,
    show_default=True,
    type=click.IntRange(1, limits.MESSAGE_FIND_RESULTS_MAX),
)
@endpoints_option
@json_option
def message_find(
    key: str, topic: str | None, max_count: int, endpoints: str, as_json: bool
) -> None:
    """List the messages carrying a key."""
    args: dict[str, Any] = {"key": key, "max": max_count}
    if topic is not None:
        args["topic"] = topic
    r = call(endpoints, "MessageFind", args)
    keys = ["message_id", "topic", "queue_id", "queue_offset", "tag"]
    rows = [[m[k] for k in keys] + [m["body"][:40]] for m in r["messages"]]
    cols = ["message id", "topic", "queue", "offset", "tag", "body"]
    show(f"messages with key {key}", cols, rows, r, as_json)
