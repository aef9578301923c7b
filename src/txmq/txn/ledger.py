"""The Spark sink's ledger resolver: decides the sink's orphaned half messages on check-back.

The sink tags each half message with its sink id and batch id, and the driver appends one ledger
record per committed batch (key ``<sink id>:<batch id>``, body a JSON list of the transaction
ids it commits) BEFORE ending the transactions. So when a driver dies between the two, the
ledger says what the outcome must be: listed -> COMMITTED; batch recorded without it ->
ROLLED_BACK (a replay or a failed attempt); no record yet -> unknown, check again later (and
after the maximum number of checks the broker rolls it back). Pure: lookup is injected.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from txmq.model import PROP_TRANSACTION_ID, Outcome, Record

LEDGER_TOPIC = "txmq-spark-sink-ledger"
PROP_SINK_ID = "SPARK_SINK_ID"
PROP_SINK_BATCH = "SPARK_SINK_BATCH"


def ledger_key(sink_id: str, batch_id: str) -> str:
    return f"{sink_id}:{batch_id}"


class SinkLedger:
    def __init__(self, lookup: Callable[[str, str, int], list[Record]]) -> None:
        self.lookup = lookup  # (topic, key, max) -> records, e.g. Store.find_by_key

    def claims(self, half: Record) -> bool:
        return PROP_SINK_ID in half.properties and PROP_SINK_BATCH in half.properties

    def resolve(self, half: Record) -> Outcome | None:
        key = ledger_key(half.properties[PROP_SINK_ID], half.properties[PROP_SINK_BATCH])
        entries = self.lookup(LEDGER_TOPIC, key, 8)
        if not entries:
            return None
        tid = half.properties.get(PROP_TRANSACTION_ID, "")
        committed: set[str] = set()
        for rec in entries:
            committed.update(str(t) for t in json.loads(rec.body))
        return Outcome.COMMITTED if tid in committed else Outcome.ROLLED_BACK
