"""Admin commands of ``txmq``: topic, group, txn and message, over the broker's admin channel.

Owns: their arguments, help texts and output: a table for people (tables.py: nothing elided,
the columns past 80 under ``--wide``), or ``--json`` (the broker's answer as JSON, stable field
names) for scripts. Errors become exit codes in main.py.
Must not: talk the RocketMQ protocol (commands.py does, with the official client).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from txmq import limits
from txmq.broker.config.broker_config import BrokerConfig
from txmq.cli.tables import Col, json_option, show, wide_option, yes_no
from txmq.client.admin import call, call_pages, cluster_call, is_throwaway_group, members
from txmq.client.security import F, security_options
from txmq.errors import BadRequestError, NotFoundError, TxmqError

# The defaults the broker runs with, for the options that name a broker or size a topic (as
# broker/node/command.py reads its own defaults).
_BROKER_DEFAULTS = BrokerConfig(data_dir=Path("data"))


def _semicolons(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``HOST:P1;HOST:P2`` as the official clients write several addresses; commas are taken
    for semicolons, so both forms work wherever a command takes ``--endpoints``."""
    return ";".join(e.strip() for e in value.replace(",", ";").split(";") if e.strip())


_endpoints = click.option(
    "--endpoints",
    envvar="TXMQ_ENDPOINTS",
    default=f"{_BROKER_DEFAULTS.host}:{_BROKER_DEFAULTS.port}",
    show_default=True,
    callback=_semicolons,
    help="Broker address HOST:PORT, or several: HOST:P1;HOST:P2 (or HOST:P1,HOST:P2; env"
    " TXMQ_ENDPOINTS).",
)


def endpoints_option(fn: F) -> F:
    """``--endpoints`` and the security options (client/security.py) of a client command."""
    return security_options(_endpoints(fn))


def each_member(
    endpoints: str, method: str, args: dict[str, Any], *, what: str = ""
) -> list[tuple[str, Any]]:
    """(broker name, reply) from every member of the cluster that has an answer. A member
    that does not know the thing asked about (or refuses the question) is skipped; one that
    fails is named in a warning line, so a partial view never passes for the whole cluster.
    With ``what``, no member knowing it raises the first member's own refusal."""
    out, missing = [], []
    for m, got in cluster_call(endpoints, method, args):
        if isinstance(got, NotFoundError | BadRequestError):  # "not here" or "never anywhere"
            missing.append(got)
            continue
        if isinstance(got, TxmqError):
            click.echo(f"txmq: warning: broker {m['name']} ({m['endpoint']}): {got}", err=True)
            continue
        out.append((str(m["name"]), got))
    if what and not out:
        raise missing[0] if missing else NotFoundError(f"no broker of the cluster knows {what}")
    return out


def each_member_pages(endpoints: str, method: str, rows: str) -> list[tuple[str, list[Any]]]:
    """(broker name, every row of a paged listing) from every member that answers; a member
    that fails is named in a warning line, as in ``each_member``."""
    out = []
    for m in members(endpoints):
        try:
            out.append((str(m["name"]), call_pages(str(m["endpoint"]), method, {}, rows)))
        except TxmqError as exc:
            click.echo(f"txmq: warning: broker {m['name']} ({m['endpoint']}): {exc}", err=True)
    return out


def first_member(endpoints: str, method: str, args: dict[str, Any], what: str) -> Any:
    """The answer of the member that has ``what`` (a transaction, a message): it lives on one."""
    name, reply = each_member(endpoints, method, args, what=what)[0]
    reply.pop("ok", None)
    return {**reply, "broker": name}


@click.group()
def topic() -> None:
    """Create, list, describe and delete topics."""


@topic.command("create")
@click.argument("name")
@click.option(
    "--queues",
    default=_BROKER_DEFAULTS.default_queue_count,
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
    replaced = ", replacing the auto-created one" if r.get("result") == "replaced" else ""
    click.echo(f"created topic {r['name']} ({r['type']}, {r['queues']} queues{replaced})")
    for member, outcome in sorted(r.get("members", {}).items()):
        if outcome not in ("created", "replaced", "exists"):
            click.echo(f"  member {member}: {outcome}")


@topic.command("list")
@endpoints_option
@json_option
def topic_list(endpoints: str, as_json: bool) -> None:
    """List topics with their type, queues per broker and retained messages (all brokers)."""
    r = {"topics": call_pages(endpoints, "TopicList", {}, "topics")}
    per_topic: dict[str, int] = {}
    for _name, rows in each_member_pages(endpoints, "TopicList", "topics"):
        for t in rows:
            per_topic[t["name"]] = per_topic.get(t["name"], 0) + t["messages"]
    for t in r["topics"]:
        t["messages"] = per_topic.get(t["name"], t["messages"])
    rows = [[t["name"], t["type"], t["queues"], t["messages"]] for t in r["topics"]]
    cols = [Col("name", ident=True), Col("type")]
    cols += [Col("queues", justify="right"), Col("messages", justify="right")]
    show("topics", cols, rows, r, as_json)


@topic.command("describe")
@click.argument("name")
@endpoints_option
@json_option
def topic_describe(name: str, endpoints: str, as_json: bool) -> None:
    """Show a topic's queues on every broker and their offset ranges."""
    found = each_member(endpoints, "TopicDescribe", {"name": name}, what=f"topic {name!r}")
    r = {k: v for k, v in found[0][1].items() if k != "queues"}
    r["queues"] = [{**q, "broker": b} for b, got in found for q in got["queues"]]
    r["brokers"] = [b for b, _ in found]
    rows = [[q["broker"], q["queue"], q["min"], q["max"], q["max"] - q["min"]] for q in r["queues"]]
    cols = [Col("broker", ident=True), Col("queue", justify="right")]
    cols += [Col(c, justify="right") for c in ("min offset", "max offset", "messages")]
    show(f"{r['name']} ({r['type']})", cols, rows, r, as_json)


@topic.command("update")
@click.argument("name")
@click.option(
    "--queues",
    required=True,
    type=click.IntRange(1, limits.QUEUES_PER_TOPIC_MAX),
    help="The new number of queues per broker: only growing.",
)
@endpoints_option
@json_option
def topic_update(name: str, queues: int, endpoints: str, as_json: bool) -> None:
    """Grow a topic to more queues on every broker (exit 2 if that would shrink it).

    Existing queues keep their messages and offsets; producers and consumers use the new
    ones at once. A FIFO topic's message groups may move to another queue: see
    docs/operations.md.
    """
    r = call(endpoints, "TopicUpdate", {"name": name, "queues": queues})
    if as_json:
        show("", [], [], r, True)
        return
    if r["result"] == "unchanged":
        click.echo(f"topic {name} already has {queues} queues")
    else:
        click.echo(f"topic {name}: {r['was']} -> {r['queues']} queues")
    for member, outcome in sorted(r.get("members", {}).items()):
        if outcome not in ("grown", "unchanged"):
            click.echo(f"  member {member}: {outcome}")
    if r["type"] == "fifo" and r["result"] == "grown":
        click.echo(
            "  fifo: some message groups now map to a new queue; their messages sent from now "
            "on may be received before older ones still waiting in their old queue"
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
@click.option("--all", "show_all", is_flag=True, help="Throwaway groups of `txmq consume` too.")
@endpoints_option
@json_option
def group_list(show_all: bool, endpoints: str, as_json: bool) -> None:
    """List consumer groups with total lag and messages in flight (all brokers).

    The table leaves out the throwaway groups `txmq consume` and `txmq tail` read with when
    given no --group (txmq-cli-<8 hex digits>) unless --all: they delete their group when they
    end, so these are left by a run that could not (`txmq group delete` removes one). --json
    lists every group, each with "throwaway" true or false.
    """
    found = _groups(endpoints).values()
    r = {"groups": [{**g, "throwaway": is_throwaway_group(g["group"])} for g in found]}
    listed = [g for g in r["groups"] if show_all or not g["throwaway"]]
    rows = [[g["group"], g["lag"], g["inflight"]] for g in listed]
    cols = [
        Col("group", ident=True),
        Col("lag", justify="right"),
        Col("in flight", justify="right"),
    ]
    show("consumer groups", cols, rows, r, as_json)
    hidden = len(r["groups"]) - len(listed)
    if hidden and not as_json:
        groups = "group" if hidden == 1 else "groups"
        click.echo(f"({hidden} throwaway {groups} of `txmq consume` not shown: --all shows them)")


@group.command("describe")
@click.argument("name")
@endpoints_option
@json_option
@wide_option
def group_describe(name: str, endpoints: str, as_json: bool, wide: bool) -> None:
    """Show a group's lag: summed, per broker, and per topic queue (--wide: the acked and
    last offsets too)."""
    g = _groups(endpoints).get(name)
    if g is None:
        raise NotFoundError(f"consumer group {name!r} has no positions on any broker")
    cols = [Col("broker", ident=True), Col("topic", ident=True), Col("queue", justify="right")]
    cols += [Col("acked to", wide=True, justify="right"), Col("max", wide=True, justify="right")]
    cols += [Col("lag", justify="right"), Col("in flight", justify="right")]
    keys = ["broker", "topic", "queue", "acked_to", "max", "lag", "inflight"]
    rows = [[q[k] for k in keys] for q in g["queues"]]
    per_broker = ", ".join(f"{b['broker']} {b['lag']}" for b in g["brokers"])
    show(f"group {name}: lag {g['lag']} ({per_broker})", cols, rows, g, as_json, wide)


def _groups(endpoints: str) -> dict[str, dict[str, Any]]:
    """Every group's positions on every member: lag and in-flight summed, and per broker."""
    groups: dict[str, dict[str, Any]] = {}
    for broker, rows in each_member_pages(endpoints, "GroupList", "groups"):
        for g in rows:
            e = groups.setdefault(
                g["group"],
                {"group": g["group"], "lag": 0, "inflight": 0, "queues": [], "brokers": []},
            )
            e["lag"] += g["lag"]
            e["inflight"] += g["inflight"]
            e["queues"] += [{**q, "broker": broker} for q in g["queues"]]
            e["brokers"].append({"broker": broker, "lag": g["lag"], "inflight": g["inflight"]})
    return groups


@click.group()
def txn() -> None:
    """Pending and dead transactions; operator resolution."""


@txn.command("list")
@endpoints_option
@json_option
@wide_option
def txn_list(endpoints: str, as_json: bool, wide: bool) -> None:
    """List undecided and dead transactions (rolled back after max checks) on every broker
    (--wide: the broker holding each, its check-backs so far and its half message's id)."""
    found = each_member_pages(endpoints, "TxnList", "transactions")
    r = {"transactions": [{**t, "broker": b} for b, rows in found for t in rows]}
    cols = [Col("transaction_id", ident=True), Col("topic", ident=True), Col("state"), Col("dead")]
    cols += [Col("broker", ident=True, wide=True), Col("checks", wide=True, justify="right")]
    cols += [Col("message_id", ident=True, wide=True)]
    rows = [
        [
            *(t.get("transaction_id"), t.get("topic"), t.get("state"), yes_no(t.get("dead"))),
            *(t.get("broker"), t.get("checks"), t.get("message_id")),
        ]
        for t in r["transactions"]
    ]
    show("transactions", cols, rows, r, as_json, wide)


@txn.command("show")
@click.argument("transaction_id")
@endpoints_option
def txn_show(transaction_id: str, endpoints: str) -> None:
    """Everything the broker holding it knows about one transaction (JSON)."""
    r = first_member(endpoints, "TxnShow", {"id": transaction_id}, f"transaction {transaction_id}")
    click.echo(json.dumps(r, indent=2, sort_keys=True))


@txn.command("resolve")
@click.argument("transaction_id")
@click.argument("action", type=click.Choice(["commit", "rollback"]))
@endpoints_option
def txn_resolve(transaction_id: str, action: str, endpoints: str) -> None:
    """Decide a pending or dead transaction as an operator: it answers "committed" or "rolled
    back".

    Repeating the same decision is harmless; contradicting an earlier one fails (exit 1).
    """
    holder = first_member(
        endpoints, "TxnShow", {"id": transaction_id}, f"transaction {transaction_id}"
    )
    r = call(
        _endpoint_of(endpoints, holder["broker"]),
        "TxnResolve",
        {"id": transaction_id, "action": action},
    )
    said = str(r["outcome"]).replace("_", " ")  # "rolled_back" on the wire: "rolled back"
    click.echo(f"transaction {transaction_id} is {said}")


def _endpoint_of(endpoints: str, broker: str) -> str:
    for m in call(endpoints, "ClusterInfo", {})["members"]:
        if m["name"] == broker:
            return str(m["endpoint"])
    raise NotFoundError(f"no broker named {broker!r} in the cluster")


@click.group()
def message() -> None:
    """Look up messages by id or key."""


@message.command("show")
@click.argument("message_id")
@endpoints_option
def message_show(message_id: str, endpoints: str) -> None:
    """One message with its properties and body (JSON), from whichever broker holds it."""
    r = first_member(endpoints, "MessageShow", {"id": message_id}, f"message {message_id}")
    click.echo(json.dumps(r, indent=2, sort_keys=True))


@message.command("find")
@click.option("--message-key", "key", help="A message key (the client's Message.keys).")
@click.option("--key", "key_alias", hidden=True)  # the earlier name
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
@wide_option
def message_find(
    key: str | None,
    key_alias: str | None,
    topic: str | None,
    max_count: int,
    endpoints: str,
    as_json: bool,
    wide: bool,
) -> None:
    """List the messages carrying a key, each body's first 40 characters (`message show`
    prints one whole; --wide: their queue and offset too)."""
    key = key or key_alias
    if not key:
        raise click.UsageError("Missing option '--message-key'.")
    args: dict[str, Any] = {"key": key, "max": max_count}
    if topic is not None:
        args["topic"] = topic
    r = {
        "messages": [
            m for _b, got in each_member(endpoints, "MessageFind", args) for m in got["messages"]
        ][:max_count]
    }
    keys = ["message_id", "topic", "queue_id", "queue_offset", "tag"]
    rows = [[m[k] for k in keys] + [m["body"][:40]] for m in r["messages"]]
    cols = [Col("message_id", ident=True), Col("topic", ident=True)]
    cols += [Col("queue", wide=True, justify="right"), Col("offset", wide=True, justify="right")]
    cols += [Col("tag"), Col("body")]
    show(f"messages with key {key}", cols, rows, r, as_json, wide)
