"""The CLI's tables in an 80-column terminal, against a real broker: every line fits, no cell is
elided (no "…"), and every name, endpoint and id a command lists is there whole, so an operator
can copy it; ``--wide`` adds the other columns, still without eliding anything. The cluster
views are checked the same way in test_cluster_cli.py and test_cluster_replicas_cli.py."""

from __future__ import annotations

import json

from tests.cli.test_cli import ok, txmq
from tests.integration.conftest import BrokerProcess

ELLIPSIS = "…"


def narrow(*args: str, wide: bool = False) -> str:
    """The command's stdout at COLUMNS=80; fails on an exit code other than 0, an elided cell
    or (but with ``--wide``, which may take the width it needs) a line longer than 80."""
    r = txmq(*args, *(["--wide"] if wide else []), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert ELLIPSIS not in r.stdout, r.stdout
    too_long = [line for line in r.stdout.splitlines() if len(line) > 80]
    assert wide or not too_long, r.stdout
    return r.stdout


def assert_whole(table: str, names: list[str]) -> None:
    """Each of ``names`` appears on one line of ``table``, not cut and not folded."""
    missing = [n for n in names if n not in table]
    assert not missing, f"{missing} not whole in:\n{table}"


def test_every_table_fits_80_columns_with_identifiers_whole(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    # Names as long as real deployments use: each must survive an 80-column table.
    topic, plain, group = "payments-eu-west-orders", "audit-trail-eu-west-1", "inventory-service-eu"
    ok("topic", "create", topic, "--type", "transaction", *ep)
    ok("send", topic, "undecided", "--transactional", "--outcome", "none", *ep)
    body = "a body of many words, longer than the forty characters a table shows"
    sent = ok("send", plain, body, "--message-key", "order-4711", *ep).strip()
    ok("consume", plain, "--group", group, "--max", "1", "--wait-s", "10", *ep)
    pending = json.loads(ok("txn", "list", "--json", *ep))["transactions"]
    assert len(pending) == 1
    txn_id, half_id = pending[0]["transaction_id"], pending[0]["message_id"]

    assert_whole(narrow("topic", "list", *ep), [topic, plain])
    assert_whole(narrow("topic", "describe", topic, *ep), [topic, "txmq"])
    assert_whole(narrow("group", "list", *ep), [group])
    assert_whole(narrow("group", "describe", group, *ep), [group, plain])
    listed = narrow("txn", "list", *ep)
    assert_whole(listed, [txn_id, topic])
    assert "transaction_id" in listed and "False" not in listed and " no " in listed
    assert_whole(narrow("message", "find", "--message-key", "order-4711", *ep), [sent, plain])
    assert_whole(narrow("cluster", "status", *ep), ["txmq", broker.endpoints])
    assert_whole(narrow("store", "status", *ep), ["writes", "accepted"])
    # --wide: every column, squeezed or as wide as it takes, never an identifier cut.
    assert_whole(narrow("txn", "list", *ep, wide=True), [txn_id, half_id, "checks", "txmq"])
    assert_whole(narrow("group", "describe", group, *ep, wide=True), [group, plain, "acked"])
    found = narrow("message", "find", "--message-key", "order-4711", *ep, wide=True)
    assert_whole(found, [sent, plain])
    assert_whole(narrow("cluster", "status", *ep, wide=True), [broker.endpoints, "disk"])
    broker.stop()
    assert_whole(narrow("store", "verify", "--data-dir", str(broker.data_dir)), ["closed cleanly"])
    broker.start()
