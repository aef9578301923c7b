"""The transactional txmq sink for Spark (batch and streaming).

Each task sends its rows as half messages tagged with (sink id, batch id, partition, attempt)
and reports their transaction ids. The driver's commit first looks the batch up in the ledger:
already there (a replayed batch) -> roll these back; otherwise append the ledger record, then
commit each transaction. abort() rolls back. If the driver dies after the ledger record, the
broker's check-back commits the listed transactions (txmq.txn.ledger.SinkLedger).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from txmq.spark.client import Broker
from txmq.spark.source import TxmqOptionError, _require
from txmq.txn.ledger import LEDGER_TOPIC, PROP_SINK_BATCH, PROP_SINK_ID, ledger_key


@dataclass
class SentHalves(WriterCommitMessage):
    # (topic, message id, transaction id) per row
    halves: list[tuple[str, str, str]] = field(default_factory=list)


def _check_schema(schema: StructType) -> None:
    names = {f.name: f.dataType for f in schema.fields}
    body = names.get("body")
    if body is None or not isinstance(body, (BinaryType, StringType)):
        raise TxmqOptionError("the txmq sink needs a 'body' column of type binary or string")
    for col in ("tag", "topic"):
        if col in names and not isinstance(names[col], StringType):
            raise TxmqOptionError(f"column {col!r} must be a string")


class _Writer:
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        _check_schema(schema)
        self.endpoints = _require(options, "endpoints")
        self.topic = options.get("topic", "")
        self.sink_id = options.get("sinkid", self.topic or "default")
        self.fail_after_ledger = options.get("failafterledger", "") == "true"  # test failpoint
        if not self.topic and "topic" not in schema.fieldNames():
            raise TxmqOptionError("set option 'topic' or provide a 'topic' column")

    def _send(self, rows: Iterator[Any], batch_id: str) -> SentHalves:
        ctx = TaskContext.get()
        part = str(ctx.partitionId()) if ctx else "0"
        attempt = str(ctx.attemptNumber()) if ctx else "0"
        broker = Broker(self.endpoints)
        out = SentHalves()
        try:
            for row in rows:
                d = row.asDict()
                body = d["body"]
                body = body.encode() if isinstance(body, str) else bytes(body)
                topic = d.get("topic") or self.topic
                keys = d.get("keys") or []
                props = {str(k): str(v) for k, v in (d.get("properties") or {}).items()}
                props.update(
                    {
                        PROP_SINK_ID: self.sink_id,
                        PROP_SINK_BATCH: batch_id,
                        "SPARK_SINK_PARTITION": part,
                        "SPARK_SINK_ATTEMPT": attempt,
                    }
                )
                mid, tid = broker.send_half(
                    topic, body, keys=list(keys), tag=d.get("tag") or "", properties=props
                )
                out.halves.append((topic, mid, tid))
        finally:
            broker.close()
        return out

    def _commit(self, messages: list[Any], batch_id: str) -> None:
        broker = Broker(self.endpoints)
        try:
            halves = [h for m in messages if isinstance(m, SentHalves) for h in m.halves]
            key = ledger_key(self.sink_id, batch_id)
            recorded = _recorded(broker, key)
            if recorded is None:
                recorded = {tid for _t, _m, tid in halves}
                broker.send_normal(LEDGER_TOPIC, json.dumps(sorted(recorded)).encode(), keys=[key])
                if self.fail_after_ledger:
                    _kill_driver()  # test failpoint: the driver dies between ledger and decisions
            # A retried commit of the same attempt finds its own ids and commits them; a replayed
            # batch (new ids, same batch id) finds other ids and rolls its copies back.
            for topic, mid, tid in halves:
                broker.end(topic, mid, tid, commit=tid in recorded)
        finally:
            broker.close()

    def _abort(self, messages: list[Any], batch_id: str) -> None:
        """Roll back, unless the ledger already records these transactions as committed: the
        ledger record is the decision, so an abort after it must not contradict it."""
        broker = Broker(self.endpoints)
        try:
            recorded = _recorded(broker, ledger_key(self.sink_id, batch_id)) or set()
            for m in messages:
                if isinstance(m, SentHalves):
                    for topic, mid, tid in m.halves:
                        broker.end(topic, mid, tid, commit=tid in recorded)
        finally:
            broker.close()


class TxmqStreamWriter(_Writer, DataSourceStreamWriter):
    def write(self, iterator: Iterator[Any]) -> SentHalves:
        ctx = TaskContext.get()
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        return self._send(iterator, str(batch))

    def commit(self, messages: list[Any], batchId: int) -> None:
        self._commit(messages, str(batchId))

    def abort(self, messages: list[Any], batchId: int) -> None:
        self._abort(messages, str(batchId))


class TxmqBatchWriter(_Writer, DataSourceWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        # One id for the whole write job, fixed on the driver and pickled to the tasks.
        self.batch_id = options.get("batchid") or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SentHalves:
        return self._send(iterator, self.batch_id)

    def commit(self, messages: list[Any]) -> None:
        self._commit(messages, self.batch_id)

    def abort(self, messages: list[Any]) -> None:
        self._abort(messages, self.batch_id)


def _kill_driver() -> None:
    """Failpoint for tests: SIGKILL the whole driver (JVM, Python driver and workers), as a
    crashed driver machine would. Only set failAfterLedger on a driver started in its own
    process group (the tests start it with start_new_session=True)."""
    import os
    import signal

    os.killpg(os.getpgrp(), signal.SIGKILL)


def _recorded(broker: Broker, key: str) -> set[str] | None:
    """Transaction ids the ledger records for a batch; None when the batch is not recorded."""
    entries = broker.find_by_key(LEDGER_TOPIC, key)
    if not entries:
        return None
    out: set[str] = set()
    for entry in entries:
        out.update(str(t) for t in json.loads(entry["body"]))
    return out
