"""ClientList's entries on real sessions (rpc/sessions.py), pure: client types and languages by
name (an unknown number named, not dropped), a consumer's group from its Settings or its
heartbeats, the idle time, the bound access key, and the filters by topic and group."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from txmq.broker.admin.clients import client_list
from txmq.broker.rpc.sessions import Clients


async def test_entries_name_types_and_filter_by_topic_and_group() -> None:
    clients = Clients()
    p = clients.touch("p1", 1_000)
    p.client_type, p.language, p.settings = pb.PRODUCER, pb.Language.Value("PYTHON"), 2
    p.topics.add("orders")
    stream = p.open_stream()
    c = clients.touch("c1", 2_000)
    c.client_type = pb.SIMPLE_CONSUMER
    clients.note_subscriptions(c, "billing", {"invoices"})
    odd = clients.touch("x1", 3_000)
    odd.client_type = 99
    odd.groups.add("audit")  # named in a heartbeat only

    owners = {"p1": "orders-app"}
    out = client_list(clients, 5_000, owners.get, {})
    by_id = {e["client_id"]: e for e in out["clients"]}
    assert [e["client_id"] for e in out["clients"]] == ["c1", "p1", "x1"]
    assert by_id["p1"]["type"] == "producer" and by_id["p1"]["language"] == "python"
    assert by_id["p1"]["connected"] is True and by_id["p1"]["streams"] == 1
    assert (
        by_id["p1"]["idle_ms"] == 4_000 and by_id["p1"]["last_seen"] == "1970-01-01T00:00:01.000Z"
    )
    assert by_id["p1"]["access_key"] == "orders-app" and by_id["c1"]["access_key"] is None
    assert by_id["c1"]["type"] == "simple_consumer" and by_id["c1"]["group"] == "billing"
    assert by_id["c1"]["subscriptions"] == [{"group": "billing", "topic": "invoices"}]
    assert by_id["x1"]["type"] == "unknown_99" and by_id["x1"]["group"] == "audit"
    assert by_id["x1"]["language"] == "unspecified"

    def ids(**a: str) -> list[str]:
        return [e["client_id"] for e in client_list(clients, 5_000, None, a)["clients"]]

    assert ids(topic="orders") == ["p1"] and ids(topic="invoices") == ["c1"]
    assert ids(group="billing") == ["c1"] and ids(group="audit") == ["x1"]
    assert ids(topic="orders", group="billing") == [] and ids(group="nobody") == []
    p.close_stream(stream)
    assert (
        client_list(clients, 5_000, None, {"topic": "orders"})["clients"][0]["connected"] is False
    )
