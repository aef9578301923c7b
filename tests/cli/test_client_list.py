"""``txmq client list`` against a real broker with official clients connected: the table at 80
columns keeps client ids, group and topic whole, ``--wide`` adds the other columns, ``--json``
carries every field, ``--topic`` and ``--group`` filter. Under an ACL:
tests/integration/test_client_list.py."""

from __future__ import annotations

import json

from tests.cli.test_cli import ok
from tests.cli.test_narrow_tables import assert_whole, narrow
from tests.integration.clients import consumer, producer
from tests.integration.conftest import BrokerProcess, wait_until


def test_client_list_table_json_and_filters(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    topic, group, consumed = "payments-eu-west-orders", "inventory-service-eu", "audit-trail-eu-1"
    p = producer(broker.endpoints, (topic,))
    c = consumer(broker.endpoints, group, consumed)
    try:

        def listed(*args: str) -> dict[str, dict[str, object]]:
            out = json.loads(ok("client", "list", "--json", *args, *ep))
            return {e["client_id"]: e for e in out["clients"]}

        wait_until(lambda: {p.client_id, c.client_id} <= set(listed()), 15, "both listed")
        both = listed()
        assert both[p.client_id]["type"] == "producer"
        assert both[p.client_id]["topics"] == [topic]
        assert both[p.client_id]["broker"] == "txmq"
        assert both[c.client_id]["type"] == "simple_consumer"
        assert both[c.client_id]["group"] == group
        assert set(listed("--topic", topic)) == {p.client_id}
        assert set(listed("--group", group)) == {c.client_id}
        assert listed("--topic", "no-such-topic") == {}

        table = narrow("client", "list", *ep)
        assert_whole(table, [p.client_id, c.client_id, group, topic, "simple", "producer"])
        wide = narrow("client", "list", *ep, wide=True)
        assert_whole(wide, [p.client_id, c.client_id, "settings", "python"])
    finally:
        p.shutdown()
        c.shutdown()
