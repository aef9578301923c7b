"""Data-plane and offline commands of ``txmq``: send, consume, tail (with the official RocketMQ
client, as any application would) and store verify (reads a data directory with the store's own
code). The admin commands live in admin_commands.py.

Owns: those commands' arguments and output. Errors become exit codes in main.py (0 ok,
1 failed, 2 bad input, 3 broker unreachable).
Must not: bypass the official client for sends and receives.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from txmq.cli.admin_commands import (
    endpoints_option,
    group,
    json_option,
    message,
    show,
    topic,
    txn,
)
from txmq.client.admin import call
from txmq.client.security import official_configuration
from txmq.errors import NotFoundError, TxmqError

console = Console()


def _producer(endpoints: str, topic: str, checker: Any = None) -> Any:
    from rocketmq import Producer

    # Fail fast: exit 3 if nothing answers, 1 if the credentials are refused. A topic lookup
    # needs no admin right; an unknown topic is fine here (the broker may create it).
    with contextlib.suppress(NotFoundError):
        call(endpoints, "TopicDescribe", {"name": topic})
    configuration, tls = official_configuration(endpoints)
    p = Producer(configuration, (topic,), checker, tls_enable=tls)
    p.startup()
    return p


def _cli_checker() -> Any:
    """The client requires a checker for transactions. This process has no local state to
    consult, so a check-back that reaches it before it exits is told to ask later; an undecided
    (--outcome none) transaction waits for another producer of the topic, the broker's
    max-checks rollback or an operator (``txmq txn resolve``)."""
    from rocketmq import TransactionChecker, TransactionResolution

    class _Checker(TransactionChecker):  # type: ignore[misc]
        def check(self, message: Any) -> Any:
            return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED

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
        # The client reports everything as its own exceptions; an unknown topic (on a broker
        # that does not auto-create) is bad input, anything else a failed operation.
        call(endpoints, "TopicDescribe", {"name": topic})
        raise TxmqError(f"send failed: {' '.join(str(exc).split())}") from exc
    finally:
        p.shutdown()


def _consume(
    topic: str, group: str, expr: str, max_messages: int, wait_s: int, endpoints: str, follow: bool
) -> None:
    from rocketmq import FilterExpression, SimpleConsumer

    call(endpoints, "TopicDescribe", {"name": topic})  # unknown topic: exit 2, not a hang
    configuration, tls = official_configuration(endpoints)
    c = SimpleConsumer(
        configuration,
        group or f"txmq-cli-{uuid.uuid4().hex[:8]}",
        {topic: FilterExpression(expr)},
        await_duration=max(1, min(wait_s, 5)),
        tls_enable=tls,
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


@click.command(short_help="Receive and ack up to N messages.")
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


@click.command(short_help="Follow a topic until Ctrl-C.")
@_consume_options
@click.option("--max", "max_messages", default=2**31, type=click.IntRange(1), help="Stop after N.")
def tail(topic: str, group: str, expr: str, max_messages: int, endpoints: str) -> None:
    """Follow a topic: print and ack messages as they arrive until Ctrl-C (or --max)."""
    _consume(topic, group, expr, max_messages, 5, endpoints, follow=True)


@click.group()
def store() -> None:
    """Check a data directory offline (verify) or a running broker's store (status)."""


@store.command("verify")
@click.option("--data-dir", required=True, type=click.Path(path_type=Path, exists=True))
@json_option
def store_verify(data_dir: Path, as_json: bool) -> None:
    """Check every record's CRC and that queues and index agree with the log (offline)."""
    from txmq.cli.verify import verify

    with console.status(f"verifying {data_dir}"):
        report = verify(data_dir)
    show("store verify", ["check", "result"], [[k, v] for k, v in report.items()], report, as_json)
    if report["problems"]:
        sys.exit(1)


@store.command("status")
@endpoints_option
@json_option
def store_status(endpoints: str, as_json: bool) -> None:
    """A running broker's store health: damaged records (each found by a read or the background
    scrub, skipped by readers), consume queues rebuilt from the log, scrub progress, refused
    writes. Exit code 1 when a record is damaged or writes are fenced."""
    report = call(endpoints, "StoreStatus", {})
    rows = [[k, v] for k, v in report.items() if k not in ("ok", "damaged")]
    rows += [[f"damaged @{d['offset']}", d["reason"]] for d in report.get("damaged", [])]
    show("store status", ["check", "result"], rows, report, as_json)
    if report.get("damaged_records") or report.get("fenced"):
        sys.exit(1)


def register(cli: click.Group) -> None:
    from txmq.cli.cluster import cluster

    for cmd in (topic, group, txn, message, send, consume, tail, store, cluster):
        cli.add_command(cmd)
