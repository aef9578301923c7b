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
from pathlib import Path
from typing import Any

import click

from txmq import errors
from txmq.cli.admin_commands import (
    endpoints_option,
    group,
    message,
    topic,
    txn,
)
from txmq.cli.tables import Col, console, human_bytes, json_option, show
from txmq.client.admin import call, delete_group, throwaway_group
from txmq.client.security import official_configuration
from txmq.errors import NotFoundError, TxmqError


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
@click.option(
    "--message-key",
    "keys",
    multiple=True,
    help="A key to find the message by (`txmq message find`); repeat for several.",
)
@click.option("--key", "keys_alias", multiple=True, hidden=True)  # the earlier name
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
    keys_alias: tuple[str, ...],
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
        for key in (*keys, *keys_alias):
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
            click.echo(f"{r.message_id} transaction {_SENT_OUTCOME[outcome]}")
        else:
            r = p.send(m)
            click.echo(r.message_id)
    except TxmqError:
        raise
    except Exception as exc:
        kind = _kind(transactional, message_group, delay_ms)
        raise _send_refusal(exc, endpoints, topic, kind) from exc
    finally:
        p.shutdown()


_SENT_OUTCOME = {"commit": "committed", "rollback": "rolled back", "none": "left undecided"}
# The option that makes a message of each type other than normal.
_TYPE_OPTION = {"transaction": "--transactional", "fifo": "--group GROUP", "delay": "--delay-ms MS"}


def _kind(transactional: bool, message_group: str, delay_ms: int) -> str:
    """The message type the official client gives a message sent with these options."""
    if transactional:
        return "transaction"
    return "fifo" if message_group else "delay" if delay_ms else "normal"


def _send_refusal(exc: Exception, endpoints: str, topic: str, kind: str) -> TxmqError:
    """The official client's exception as a typed error in plain words (exits by main.py).

    The client raises its own exceptions: a broker's refusal carries the RocketMQ status
    ``code`` (a 4xxxx is bad input: exit 2), its own checks (a message type the topic does not
    take, an empty body) carry none. A type conflict is said with the option that fixes it; an
    unknown topic (on a broker that does not create topics) is bad input; anything else is a
    failed operation (exit 1).
    """
    from rocketmq.v5.exception import IllegalArgumentException

    text = " ".join(str(exc.args[0] if exc.args else exc).split())
    code = getattr(exc, "code", None)
    conflict = code == errors.CODE_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    if conflict or "message type not match" in text:
        takes = call(endpoints, "TopicDescribe", {"name": topic})["type"]
        if takes != kind:
            fix = [f"with {_TYPE_OPTION[takes]}"] if takes in _TYPE_OPTION else []
            fix += [f"without {_TYPE_OPTION[kind]}"] if kind in _TYPE_OPTION else []
            return errors.MessageTypeConflictError(
                f"topic {topic!r} takes {takes} messages and this one is a {kind} message:"
                f" send it {' and '.join(fix)}, or send it to a {kind} topic"
            )
    if isinstance(code, int) and code != errors.CODE_OK:
        return errors.from_code(code, text)
    if isinstance(exc, IllegalArgumentException):
        return errors.BadRequestError(text)
    call(endpoints, "TopicDescribe", {"name": topic})  # an unknown topic is bad input
    return TxmqError(f"send failed: {text}")


def _consume(
    topic: str, group: str, expr: str, max_messages: int, wait_s: int, endpoints: str, follow: bool
) -> None:
    from rocketmq import FilterExpression, SimpleConsumer

    call(endpoints, "TopicDescribe", {"name": topic})  # unknown topic: exit 2, not a hang
    configuration, tls = official_configuration(endpoints)
    throwaway = "" if group else throwaway_group()
    c = SimpleConsumer(
        configuration,
        group or throwaway,
        {topic: FilterExpression(expr)},
        await_duration=max(1, min(wait_s, 5)),
        tls_enable=tls,
    )
    c.startup()
    try:
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
    finally:
        if throwaway:
            _forget(endpoints, throwaway)


def _forget(endpoints: str, group: str) -> None:
    """Delete the run's own throwaway group (forced: its one consumer has just shut down, and
    no one else knows the name). Best effort: a failure is a warning line, never the
    command's outcome, since what it printed was received and acked."""
    try:
        delete_group(endpoints, group, force=True)
    except errors.ConsumerGroupNotFoundError:
        pass  # it never read a queue: nothing to delete
    except TxmqError as exc:
        click.echo(
            f"txmq: warning: throwaway consumer group {group} was not deleted ({exc}); "
            f"`txmq group delete {group}` removes it",
            err=True,
        )


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
            click.option(
                "--group",
                default="",
                help="Consumer group (default: a throwaway txmq-cli-<hex> group, deleted"
                " when the command ends).",
            ),
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
    acked last. Without --group each run reads as a new throwaway group, txmq-cli-<8 hex
    digits>, which it deletes when it ends (a warning line says so if it could not; `txmq
    group list` leaves such leftovers out unless --all).
    """
    _consume(topic, group, expr, max_messages, wait_s, endpoints, follow=False)


@click.command(short_help="Follow a topic until Ctrl-C.")
@_consume_options
@click.option("--max", "max_messages", default=2**31, type=click.IntRange(1), help="Stop after N.")
def tail(topic: str, group: str, expr: str, max_messages: int, endpoints: str) -> None:
    """Follow a topic: print and ack messages as they arrive until Ctrl-C (or --max).

    Ctrl-C is how a tail ends: it exits 0 (what was printed was acked), not 130.
    """
    _consume(topic, group, expr, max_messages, 5, endpoints, follow=True)


@click.group()
def store() -> None:
    """Check a data directory offline (verify) or a running broker's store (status)."""


@store.command("verify")
@click.option("--data-dir", required=True, type=click.Path(path_type=Path, exists=True))
@click.option(
    "--json", "as_json", is_flag=True, help="Print the report as JSON (stable field names)."
)
def store_verify(data_dir: Path, as_json: bool) -> None:
    """Check every record's CRC and that queues and index agree with the log.

    Offline: reads the data directory itself, no broker is asked (stop the broker first for an
    exact check). Exit code 1 when a problem is found.
    """
    from txmq.cli.verify import verify

    with console.status(f"verifying {data_dir}"):
        report = verify(data_dir)
    rows = [[k, v] for k, v in report.items()]
    show("store verify", [Col("check"), Col("result")], rows, report, as_json)
    if report["problems"]:
        sys.exit(1)


@store.command("status")
@endpoints_option
@json_option
def store_status(endpoints: str, as_json: bool) -> None:
    """A running broker's store health: damaged records (each found by a read or the background
    scrub, skipped by readers), consume queues rebuilt from the log, scrub progress, refused
    writes. Exit code 1 when a record is damaged or writes are refused (fenced)."""
    report = call(endpoints, "StoreStatus", {})
    show("store status", [Col("check"), Col("result")], _status_rows(report), report, as_json)
    if report.get("damaged_records") or report.get("fenced"):
        sys.exit(1)


def _status_rows(report: dict[str, Any]) -> list[list[Any]]:
    """The StoreStatus answer in words: ratios as percentages, bytes in units, whether writes
    are accepted rather than an empty reason."""
    words = {"disk_used_ratio": "disk used", "disk_watermark": "writes refused above"}
    rows: list[list[Any]] = []
    for k, v in report.items():
        if k in ("ok", "damaged"):
            continue
        if k == "fenced":
            rows.append(["writes", f"refused: {v}" if v else "accepted"])
        elif k.endswith("_ratio") or k == "disk_watermark":
            rows.append([words.get(k, k), f"{v:.1%}" if isinstance(v, float) else v])
        elif k.endswith("_bytes"):
            rows.append([k.removesuffix("_bytes").replace("_", " "), human_bytes(v)])
        else:
            rows.append([k.replace("_", " "), v])
    rows += [[f"damaged @{d['offset']}", d["reason"]] for d in report.get("damaged", [])]
    return rows


def register(cli: click.Group) -> None:
    from txmq.cli import group_verbs  # noqa: F401  (registers group reset and redrive)
    from txmq.cli.client_verbs import client
    from txmq.cli.cluster import cluster

    for cmd in (topic, group, txn, message, client, send, consume, tail, store, cluster):
        cli.add_command(cmd)
