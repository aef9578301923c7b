"""``txmq client list``: the clients connected to each broker of the cluster (what RocketMQ's
mqadmin shows as producerConnection and consumerConnection), over the admin channel.

Owns: its arguments, its table and its ``--json`` (stable field names: each entry as the
broker's ClientList gives it, broker/admin/clients.py, plus "broker"). A client is a session of
one broker: a client that talks to several members is listed once per member.
Must not: talk the RocketMQ protocol.
"""

from __future__ import annotations

from typing import Any

import click

from txmq.cli.admin_commands import endpoints_option
from txmq.cli.tables import Col, json_option, show, wide_option, yes_no
from txmq.client.admin import cluster_call
from txmq.errors import TxmqError


@click.group("client")
def client() -> None:
    """Producers and consumers connected to the brokers."""


def _what(c: dict[str, Any]) -> str:
    """A consumer's group, else the topics a producer publishes."""
    return str(c["group"]) if c["groups"] else ", ".join(c["topics"])


@client.command("list")
@click.option("--topic", default=None, help="Only clients publishing or subscribing to it.")
@click.option("--group", default=None, help="Only consumers of this group.")
@endpoints_option
@json_option
@wide_option
def client_list(
    topic: str | None, group: str | None, endpoints: str, as_json: bool, wide: bool
) -> None:
    """List the clients connected to every broker: client id, type (producer, push consumer,
    simple consumer, ...), its group or the topics it publishes, and whether it has an open
    Telemetry stream (live: transaction check-backs can reach it). --wide adds the broker,
    streams, Settings received, idle time, last seen, access key (under an ACL), address and
    client version.

    \b
    Needs an admin access key under an ACL.
    Exit codes: 0 ok (a broker that does not answer is named in a warning line),
    1 refused (not an admin), 2 bad input, 3 broker unreachable.
    """
    args: dict[str, Any] = {}
    if topic:
        args["topic"] = topic
    if group:
        args["group"] = group
    found: list[dict[str, Any]] = []
    failed: list[tuple[dict[str, Any], TxmqError]] = []
    answered = 0
    for m, got in cluster_call(endpoints, "ClientList", args):
        if isinstance(got, TxmqError):
            failed.append((m, got))
            continue
        answered += 1
        found += [{**c, "broker": m["name"]} for c in got["clients"]]
    if failed and not answered:
        raise failed[0][1]  # the same refusal everywhere (not an admin): say it once
    for m, exc in failed:
        click.echo(f"txmq: warning: broker {m['name']} ({m['endpoint']}): {exc}", err=True)
    r = {"clients": found}
    cols = [Col("client id", ident=True), Col("type"), Col("group / topics"), Col("live")]
    cols += [Col("broker", ident=True, wide=True), Col("streams", wide=True, justify="right")]
    cols += [Col("settings", wide=True, justify="right"), Col("idle", wide=True)]
    cols += [Col("last seen", ident=True, wide=True), Col("access key", ident=True, wide=True)]
    cols += [Col("address", ident=True, wide=True), Col("version", wide=True)]
    rows = [
        [
            *(c["client_id"], str(c["type"]).replace("_", " "), _what(c), yes_no(c["connected"])),
            *(c["broker"], c["streams"], c["settings"], f"{c['idle_ms'] / 1000:.1f} s"),
            *(c["last_seen"], c["access_key"], c["address"], f"{c['language']} {c['version']}"),
        ]
        for c in found
    ]
    show(f"clients ({len(found)})", cols, rows, r, as_json, wide)
