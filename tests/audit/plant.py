"""The discrepancies the audit tests plant, and the counts the audit must report for them.

One topic and one table per test: 8 orders that agree, 2 rows whose message never came (lost),
1 row whose transaction was rolled back (lost too: rolled back is not committed), 1 committed
message with no row (phantom), 2 keys sent 2 and 3 times (duplicates, 3 extra copies), 1 row
whose transaction is still undecided (lost for now, and undecided), and 1 committed message
without a key or an ``order_id`` (no join value). Every message body is ``{"order_id": KEY}``
and its first key is KEY, so ``--match key`` and ``--match json:order_id`` see the same.
"""

from __future__ import annotations

import json
from typing import Any, Final

from txmq.protocol.client_security import PLAINTEXT, ClientSecurity
from txmq.spark.client import BrokerClient, build_message

AGREE: Final = [f"o{i}" for i in range(1, 9)]
LOST: Final = ["lost-1", "lost-2"]
ROLLED_BACK: Final = "lost-rb"
PHANTOM: Final = "ghost-1"
DUPLICATES: Final = {"dup-1": 2, "dup-2": 3}
PENDING: Final = "pend-1"
# Rows of the table, every one in the audited window.
ROWS: Final = [*AGREE, *LOST, ROLLED_BACK, *DUPLICATES, PENDING]

EXPECTED_TOTALS: Final = {
    "db_rows": len(ROWS),
    "messages": len(AGREE) + 1 + sum(DUPLICATES.values()) + 1,
    "unkeyed_messages": 1,
    "db_duplicate_keys": 0,
}
EXPECTED_COUNTS: Final = {
    "lost": len(LOST) + 2,
    "phantom": 1,
    "duplicate": len(DUPLICATES),
    "duplicate_copies": sum(n - 1 for n in DUPLICATES.values()),
    "undecided": 1,
    "dead": 0,
    "lost_pending": 1,
}


def _message(topic: str, key: str | None) -> Any:
    body = json.dumps({"order_id": key} if key else {"note": "no key"}).encode()
    return build_message(topic, body, keys=[key] if key else [], transactional=True)


def plant_messages(endpoints: str, topic: str, security: ClientSecurity = PLAINTEXT) -> None:
    """The topic's side of the plan (the table's is ``ROWS``)."""
    with BrokerClient(endpoints, security=security) as broker:

        def send(key: str | None, commit: bool | None) -> None:
            [half] = broker.send([_message(topic, key)])
            if commit is not None:
                broker.end_transaction(half, commit=commit)

        for key in [*AGREE, PHANTOM, None]:
            send(key, True)
        for key, copies in DUPLICATES.items():
            for _ in range(copies):
                send(key, True)
        send(ROLLED_BACK, False)
        send(PENDING, None)


def check_result(got: dict[str, Any], *, dead: bool = False) -> None:
    """Every count, and the examples of every kind, of a run over the planted topic (``dead``:
    the undecided transaction was already rolled back at its maximum check-backs)."""
    assert got["consistent"] is False
    assert got["totals"] == EXPECTED_TOTALS
    counts = {**EXPECTED_COUNTS, "dead": 1, "lost_pending": 0} if dead else EXPECTED_COUNTS
    assert got["counts"] == counts
    examples = got["examples"]
    assert sorted(e["key"] for e in examples["lost"]) == sorted([*LOST, ROLLED_BACK, PENDING])
    assert all(e["at"] for e in examples["lost"])  # each row's time, from the time column
    [phantom] = examples["phantom"]
    assert phantom["key"] == PHANTOM and phantom["copies"] == 1 and phantom["message_id"]
    assert {e["key"]: e["copies"] for e in examples["duplicate"]} == DUPLICATES
    for e in examples["duplicate"]:
        assert e["first_message_id"] != e["last_message_id"] and e["first_at"] <= e["last_at"]
    [undecided] = examples["undecided"]
    assert undecided["key"] == PENDING and undecided["db_row"] is True
    if dead:
        assert undecided["state"] == "dead" and undecided["dead"] is True
    else:
        assert undecided["state"] in ("prepared", "checking") and undecided["dead"] is False
    assert undecided["age_ms"] >= 0 and undecided["transaction_id"]
    assert sum(b["db_rows"] for b in got["per_minute"]) == EXPECTED_TOTALS["db_rows"]
    assert sum(b["messages"] for b in got["per_minute"]) == EXPECTED_TOTALS["messages"]
