"""ClientList, the operator's view of the clients connected to a broker, with the official
Python client: a producer and a simple consumer show up with their type, topics, group and
Settings count; they stop showing as connected when they shut down; the filters by topic and
group; under an ACL, each client's access key, and a non-admin key refused (admin channel and
CLI).

Method: official Producer/SimpleConsumer against a real broker; the admin channel through
txmq.client.admin (plain) or signed calls over TLS (security_fixtures.py).
"""

from __future__ import annotations

import json
from typing import Any

from rocketmq import ClientConfiguration, Credentials, Producer

from tests.cli.test_cli import txmq
from tests.integration.clients import consumer, producer
from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.security_fixtures import SECRETS, TOPIC, admin
from txmq.client.admin import call
from txmq.demo.certs import Bundle


def _clients(endpoints: str, **filters: str) -> dict[str, dict[str, Any]]:
    reply = call(endpoints, "ClientList", filters)
    return {c["client_id"]: c for c in reply["clients"]}


def test_a_producer_and_a_simple_consumer_are_listed_then_leave(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("cl-orders",))
    c = consumer(broker.endpoints, "cl-group", "cl-events")
    try:
        wait_until(
            lambda: {p.client_id, c.client_id} <= set(_clients(broker.endpoints)),
            15,
            "both clients listed",
        )
        listed = _clients(broker.endpoints)
        pe, ce = listed[p.client_id], listed[c.client_id]
        assert pe["type"] == "producer", pe
        assert pe["topics"] == ["cl-orders"] and pe["groups"] == [], pe
        assert pe["connected"] is True and pe["streams"] >= 1, pe
        assert pe["settings"] >= 1 and pe["language"] == "python", pe
        assert pe["access_key"] is None, pe  # no ACL
        assert pe["last_seen"].endswith("Z") and pe["idle_ms"] >= 0, pe
        assert ce["type"] == "simple_consumer", ce
        assert ce["group"] == "cl-group" and ce["topics"] == [], ce
        assert ce["subscriptions"] == [{"group": "cl-group", "topic": "cl-events"}], ce
        assert ce["connected"] is True, ce
        # The filters: by a published topic, a subscribed topic, a group; none matching.
        assert set(_clients(broker.endpoints, topic="cl-orders")) == {p.client_id}
        assert set(_clients(broker.endpoints, topic="cl-events")) == {c.client_id}
        assert set(_clients(broker.endpoints, group="cl-group")) == {c.client_id}
        assert _clients(broker.endpoints, group="cl-nobody") == {}
        # The official client repeats its Settings a second after start: counted.
        wait_until(
            lambda: _clients(broker.endpoints)[p.client_id]["settings"] >= 2,
            15,
            "the producer's second Settings",
        )
    finally:
        p.shutdown()
        c.shutdown()

    def gone_or_disconnected(cid: str) -> bool:
        entry = _clients(broker.endpoints).get(cid)
        return entry is None or entry["connected"] is False

    wait_until(lambda: gone_or_disconnected(p.client_id), 15, "the producer gone")
    wait_until(lambda: gone_or_disconnected(c.client_id), 15, "the consumer gone")


def test_under_an_acl_clients_show_their_key_and_only_an_admin_may_list(
    secure: BrokerProcess, pki: Bundle
) -> None:
    writer = ClientConfiguration(secure.endpoints, Credentials("orders-app", SECRETS["orders-app"]))
    p = Producer(writer, (TOPIC,), tls_enable=True)
    p.startup()
    try:

        def listed() -> dict[str, Any]:
            reply = admin(secure, pki, "ClientList", {"topic": TOPIC}, "ops")
            assert reply["ok"], reply
            return {c["client_id"]: c for c in reply["clients"]}

        wait_until(lambda: p.client_id in listed(), 15, "the producer listed")
        assert listed()[p.client_id]["access_key"] == "orders-app"
        for who in ("orders-app", "inventory-app"):
            refused = admin(secure, pki, "ClientList", {}, who)
            assert refused["ok"] is False, refused
            assert refused["error"] == f"access key {who!r} is not an admin", refused
        # The CLI: the admin sees the producer and its key, another key is refused.
        ep = ["--endpoints", secure.endpoints, "--ca-file", str(pki.ca)]
        ops = ["--access-key", "ops", "--secret-key", SECRETS["ops"]]
        r = txmq("client", "list", "--topic", TOPIC, "--json", *ep, *ops)
        assert r.returncode == 0, r.stderr
        (entry,) = [c for c in json.loads(r.stdout)["clients"] if c["client_id"] == p.client_id]
        assert entry["access_key"] == "orders-app", entry
        orders = ["--access-key", "orders-app", "--secret-key", SECRETS["orders-app"]]
        r = txmq("client", "list", *ep, *orders)
        assert r.returncode == 1, r
        assert r.stderr.strip() == "txmq: access key 'orders-app' is not an admin", r.stderr
    finally:
        p.shutdown()
