"""Client-side commands of ``txmq``: topic, send, consume, group, txn, message, store verify.

Exit codes: 0 ok, 1 the operation failed, 2 bad input (usage, unknown topic or id, bad config),
3 the broker is unreachable. Errors print one line on stderr.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from txmq.cli.admin_client import call
from txmq.errors import NotFoundError, TxmqError

console = Console()
endpoints_option = click.option(
    "--endpoints",
    envvar="TXMQ_ENDPOINTS",
    default="127.0.0.1:8081",
    show_default=True,
    help="Broker address HOST:PORT (env TXMQ_ENDPOINTS).",
)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
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
@click.option("--queues", default=4, show_default=True, type=click.IntRange(1, 256))
@click.option(
    "--type",
    "kind",
    default="normal",
    show_default=True,
    type=click.Choice(["normal", "fifo", "delay", "transaction"]),
)
@endpoints_option
def topic_create(name: str, queues: int, kind: str, endpoints: str) -> None:
    r = call(endpoints, "TopicCreate", {"name": name, "queues": queues, "type": kind})
    click.echo(f"created topic {r['name']} ({r['type']}, {r['queues']} queues)")


@topic.command("list")
@endpoints_option
def topic_list(endpoints: str) -> None:
    r = call(endpoints, "TopicList", {})
    _table(
        "topics",
        ["name", "type", "queues", "messages"],
        [[t["name"], t["type"], t["queues"], t["messages"]] for t in r["topics"]],
    )


@topic.command("describe")
@click.argument("name")
@endpoints_option
def topic_describe(name: str, endpoints: str) -> None:
    r = call(endpoints, "TopicDescribe", {"name": name})
    _table(
        f"{r['name']} ({r['type']})",
        ["queue", "min offset", "max offset"],
        [[q["queue"], q["min"], q["max"]] for q in r["queues"]],
    )


@topic.command("delete")
@click.argument("name")
@endpoints_option
def topic_delete(name: str, endpoints: str) -> None:
    call(endpoints, "TopicDelete", {"name": name})
    click.echo(f"deleted topic {name}")


@click.group()
def group() -> None:
    """Consumer groups and their lag."""


@group.command("list")
@endpoints_option
def group_list(endpoints: str) -> None:
    r = call(endpoints, "GroupList", {})
    _table(
        "consumer groups",
        ["group", "lag", "in flight"],
        [[g["group"], g["lag"], g["inflight"]] for g in r["groups"]],
    )


@group.command("describe")
@click.argument("name")
@endpoints_option
def group_describe(name: str, endpoints: str) -> None:
    r = call(endpoints, "GroupList", {})
    found = [g for g in r["groups"] if g["group"] == name]
    if not found:
        raise NotFoundError(f"consumer group {name!r} has no positions on this broker")
    _table(
        f"group {name}",
        ["topic", "queue", "acked to", "max", "lag", "in flight"],
        [
            [q["topic"], q["queue"], q["acked_to"], q["max"], q["lag"], q["inflight"]]
            for q in found[0]["queues"]
        ],
    )


@click.group()
def txn() -> None:
    """Pending and dead transactions; operator resolution."""


@txn.command("list")
@endpoints_option
def txn_list(endpoints: str) -> None:
    r = call(endpoints, "TxnList", {})
    _table(
        "transactions",
        ["id", "topic", "state", "checks", "dead"],
        [
            [
                t["transaction_id"],
                t.get("topic", ""),
                t.get("state", t.get("outcome", "")),
                t.get("checks", ""),
                t.get("dead", False),
            ]
            for t in r["transactions"]
        ],
    )


@txn.command("show")
@click.argument("transaction_id")
@endpoints_option
def txn_show(transaction_id: str, endpoints: str) -> None:
    r = call(endpoints, "TxnShow", {"id": transaction_id})
    r.pop("ok", None)
    click.echo(json.dumps(r, indent=2))


@txn.command("resolve")
@click.argument("transaction_id")
@click.argument("action", type=click.Choice(["commit", "rollback"]))
@endpoints_option
def txn_resolve(transaction_id: str, action: str, endpoints: str) -> None:
    r = call(endpoints, "TxnResolve", {"id": transaction_id, "action": action})
    click.echo(f"transaction {transaction_id} is {r['outcome']}")


@click.group()
def message() -> None:
    """Look up messages by id or key."""


@message.command("show")
@click.argument("message_id")
@endpoints_option
def message_show(message_id: str, endpoints: str) -> None:
    r = call(endpoints, "MessageShow", {"id": message_id})
    r.pop("ok", None)
    click.echo(json.dumps(r, indent=2))


@message.command("find")
@click.option("--key", required=True, help="A message key (the client's Message.keys).")
@click.option("--topic", default=None, help="Search only this topic (default: all topics).")
@click.option("--max", "max_count", default=32, show_default=True, type=click.IntRange(1, 1000))
@endpoints_option
def message_find(key: str, topic: str | None, max_count: int, endpoints: str) -> None:
    """List the messages carrying a key."""
    args: dict[str, Any] = {"key": key, "max": max_count}
    if topic is not None:
        args["topic"] = topic
    r = call(endpoints, "MessageFind", args)
    _table(
        f"messages with key {key}",
        ["message id", "topic", "queue", "offset", "tag", "body"],
        [
            [
                m["message_id"],
                m["topic"],
                m["queue_id"],
                m["queue_offset"],
                m["tag"],
                m["body"][:40],
            ]
            for m in r["messages"]
        ],
    )


def _producer(endpoints: str, topic: str, checker: Any = None) -> Any:
    from rocketmq import ClientConfiguration, Credentials, Producer

    call(endpoints, "TopicList", {})  # fail fast with exit code 3 if nothing answers
    p = Producer(ClientConfiguration(endpoints, Credentials()), (topic,), checker)
    p.startup()
    return p


def _cli_checker() -> Any:
    """The client requires a checker for transactions. This process exits right after
    sending, so a check-back never reaches it: an undecided (--outcome none) transaction is
    then resolved by the broker's max-checks rollback or an operator."""
    from rocketmq import TransactionChecker, TransactionResolution

    class _Checker(TransactionChecker):  # type: ignore[misc]
        def check(self, message: Any) -> Any:
            return TransactionResolution.ROLLBACK

    return _Checker()


@click.command()
@click.argument("topic")
@click.argument("body")
@click.option("--tag", default="")
@click.option("--key", "keys", multiple=True)
@click.option("--delay-ms", type=int, default=0, help="Deliver this many ms from now.")
@click.option("--group", "message_group", default="", help="FIFO message group.")
@click.option("--transactional", is_flag=True, help="Send as a transaction half message.")
@click.option(
    "--outcome",
    type=click.Choice(["commit", "rollback", "none"]),
    default="commit",
    show_default=True,
    help="With --transactional: how to end it (none = leave it).",
)
@endpoints_option
def send(
    topic: str,
    body: str,
    tag: str,
    keys: tuple[str, ...],
    delay_ms: int,
    message_group: str,
    transactional: bool,
    outcome: str,
    endpoints: str,
) -> None:
    """Send one message with the official RocketMQ client."""
    from rocketmq import Message

    p = _producer(endpoints, topic, _cli_checker() if transactional else None)
    try:
        m = Message()
        m.topic = topic
        m.body = body.encode()
        if tag:
            m.tag = tag
        if keys:
            for key in keys:
                m.keys = key  # the client's setter adds one key per assignment
        if message_group:
            m.message_group = message_group
        if delay_ms:
            m.delivery_timestamp = int(time.time() * 1000) + delay_ms
        if transactional:
            tx = p.begin_transaction()
            r = p.send(m, tx)
            if outcome == "commit":
                tx.commit()
            elif outcome == "rollback":
                tx.rollback()
            click.echo(f"{r.message_id} transaction {outcome}")
        else:
            r = p.send(m)
            click.echo(r.message_id)
    except TxmqError:
        raise
    except Exception as exc:
        raise TxmqError(f"send failed: {exc}") from exc
    finally:
        p.shutdown()


def _consume(
    topic: str, group: str, expr: str, max_messages: int, wait_s: int, endpoints: str, follow: bool
) -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    call(endpoints, "TopicDescribe", {"name": topic})  # unknown topic: exit 2, not a hang
    c = SimpleConsumer(
        ClientConfiguration(endpoints, Credentials()),
        group or f"txmq-cli-{uuid.uuid4().hex[:8]}",
        {topic: FilterExpression(expr)},
        await_duration=max(1, min(wait_s, 5)),
    )
    c.startup()
    got = 0
    deadline = time.monotonic() + wait_s
    try:
        while got < max_messages and (follow or time.monotonic() < deadline):
            for m in c.receive(min(32, max_messages - got), 30) or []:
                click.echo(json.dumps(_message_json(m)))
                c.ack(m)
                got += 1
    except KeyboardInterrupt:
        pass  # Ctrl-C ends a tail; what was printed was acked.
    finally:
        c.shutdown()


def _message_json(m: Any) -> dict[str, Any]:
    return {
        "message_id": m.message_id,
        "tag": m.tag,
        "keys": sorted(m.keys or ()),
        "attempt": m.delivery_attempt,
        "body": m.body.decode("utf-8", "replace"),
    }


def _consume_options(fn: Any) -> Any:
    for option in reversed(
        [
            click.argument("topic"),
            click.option("--group", default="", help="Consumer group (default: a fresh one)."),
            click.option("--tag", "expr", default="*", help="Tag expression, e.g. 'A||B'."),
            endpoints_option,
        ]
    ):
        fn = option(fn)
    return fn


@click.command()
@_consume_options
@click.option("--max", "max_messages", default=10, show_default=True, type=click.IntRange(1))
@click.option("--wait-s", default=5, show_default=True, type=click.IntRange(1, 3600))
def consume(
    topic: str, group: str, expr: str, max_messages: int, wait_s: int, endpoints: str
) -> None:
    """Receive and ack up to --max messages within --wait-s seconds, one JSON line each.

    A new group starts at the earliest retained message; a named group resumes where it
    acked last.
    """
    _consume(topic, group, expr, max_messages, wait_s, endpoints, follow=False)


@click.command()
@_consume_options
@click.option("--max", "max_messages", default=2**31, type=click.IntRange(1), help="Stop after N.")
def tail(topic: str, group: str, expr: str, max_messages: int, endpoints: str) -> None:
    """Follow a topic: print and ack messages as they arrive until Ctrl-C (or --max)."""
    _consume(topic, group, expr, max_messages, 5, endpoints, follow=True)


@click.group()
def store() -> None:
    """Offline tools for a data directory."""


@store.command("verify")
@click.option("--data-dir", required=True, type=click.Path(path_type=Path, exists=True))
def store_verify(data_dir: Path) -> None:
    """Check every record's CRC and that queues and index agree with the log (offline)."""
    from txmq.cli.verify import verify

    with console.status(f"verifying {data_dir}"):
        report = verify(data_dir)
    _table("store verify", ["check", "result"], [[k, v] for k, v in report.items()])
    if report["problems"]:
        sys.exit(1)


def register(cli: click.Group) -> None:
    for cmd in (topic, group, txn, message, send, consume, tail, store):
        cli.add_command(cmd)
