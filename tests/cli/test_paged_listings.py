"""Paged admin listings: ``txmq txn list`` with 50,000 pending transactions.

Goal: the listing works however many transactions are pending (one unpaged TxnList reply passed
gRPC's 4 MiB limit at ~12,000), every page is bounded, and the CLI follows the pages to list
each transaction exactly once. Method: prepare 50,000 half messages through the real store and
coordinator in a broker data directory (1,000 per shared fsync), start a real broker on it
(it recovers them from its snapshot), then list them with the CLI and page by hand over the
admin channel.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import txmq
from tests.integration.conftest import BrokerProcess
from txmq import limits
from txmq.client.admin import call, call_pages
from txmq.errors import BadRequestError
from txmq.model import RecordDraft
from txmq.spark.client import BrokerClient, build_message
from txmq.store.store import Store
from txmq.txn.coordinator import Transactions
from txmq.txn.steps import run_all

PENDING = 50_000


def _prepare(data_dir: Path, topic: str, n: int) -> set[str]:
    """n undecided transactions in the broker's data directory, as its send path stores them."""
    clock = lambda: 1_700_000_000_000  # noqa: E731  (fixed: none is due before the broker runs)
    store = Store.open(data_dir / "store", now_ms=clock)
    tx = Transactions(store, data_dir, now_ms=clock, resolvers=[])
    tids: set[str] = set()
    try:
        for start in range(0, n, 1000):
            steps = [
                tx.prepare_steps(
                    RecordDraft(topic=topic, queue_id=0, body=b"x", message_id=f"M{i:08d}"),
                    producer_group=topic,
                )
                for i in range(start, min(n, start + 1000))
            ]
            for result in run_all(steps):
                assert not isinstance(result, Exception), result
                tids.add(result[0])
    finally:
        tx.close()
        store.close()
    return tids


def test_txn_list_pages_through_50000_pending(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    tids = _prepare(data_dir, "paged", PENDING)
    assert len(tids) == PENDING
    broker = BrokerProcess(data_dir)
    broker.start()
    try:
        ep = broker.endpoints
        first = call(ep, "TxnList", {})
        assert len(first["transactions"]) == limits.ADMIN_PAGE_ROWS_MAX and first["next"]
        assert len(json.dumps(first)) < limits.ADMIN_PAGE_BYTES_MAX + 4096, "a bounded page"
        small = call(ep, "TxnList", {"limit": 7, "after": first["next"]})
        assert [t["transaction_id"] for t in small["transactions"]] == [
            t["transaction_id"]
            for t in call(ep, "TxnList", {"after": first["next"]})["transactions"][:7]
        ], "pages continue where the cursor says, in one order"
        r = txmq("txn", "list", "--endpoints", ep, "--json")
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)["transactions"]
        listed = [t["transaction_id"] for t in rows]
        assert len(listed) == PENDING and set(listed) == tids, "each one exactly once"
        assert {t["state"] for t in rows} == {"prepared"}
        with pytest.raises(BadRequestError, match="cursor"):
            call(ep, "TxnList", {"after": "topic-name"})  # another listing's cursor: refused
        for name in ("paged-b", "paged-a", "paged-c"):
            call(ep, "TopicCreate", {"name": name, "queues": 1})
        names = [t["name"] for t in call_pages(ep, "TopicList", {"limit": 1}, "topics")]
        assert names == ["paged-a", "paged-b", "paged-c"], "one per page, in name order"
        with BrokerClient(ep) as client:  # MessageFind is bounded in bytes, not only in count
            for i in range(3):
                body = bytes([65 + i]) * (limits.ADMIN_PAGE_BYTES_MAX // 2)
                client.send([build_message("paged-a", body, keys=["big"])])
        found = call(ep, "MessageFind", {"key": "big", "topic": "paged-a", "max": 3})
        assert len(found["messages"]) == 1 and found["truncated"], "the newest, and a flag"
        assert len(json.dumps(found)) < 2 * limits.ADMIN_PAGE_BYTES_MAX
    finally:
        broker.stop()
