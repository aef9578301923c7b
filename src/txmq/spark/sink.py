"""The transactional ``txmq`` sink: ``df.write.format("txmq")`` and ``df.writeStream.format(...)``.

Owns: checking the written DataFrame's columns, the tasks' sends of half messages, and the
driver's commit/abort, which make a batch visible exactly once through the sink ledger (format
and theory of operation in txmq.txn.ledger, which the broker's check-back also reads).

- A task sends its rows as bundles (txn/bundle.py: up to SINK_BUNDLE_BYTES_MAX of rows in ONE
  transaction, one half record, one durable write), tagged with (query, batch, partition,
  attempt) and the batch's ledger home, and returns ``SentHalves`` listing the bundles'
  transaction ids and the broker holding each. Nothing is visible yet. In a cluster the
  bundles go round-robin to every live member (spark/members.py); a member that fails is
  skipped, a busy one (disk watermark, too many pending transactions) is waited out.
- The driver's ``commit`` looks the batch up in the ledger of its home member (one per batch,
  txn/ledger.py ``ledger_home``). Not there: it appends the ledger record listing the
  transactions it commits, then commits each one on the member that holds it (a bundle's
  commit makes all its rows visible in one append). Already there (Spark re-runs the last
  batch after a driver crash between this commit and its own commit record): it rolls back
  this run's copies. A driver that dies between the ledger record and its decisions leaves
  them to check-back (on every member, reading the home's ledger), which commits exactly
  what the ledger lists.
- ``abort`` rolls back (unless the ledger already committed the batch: the record is the
  decision). Halves of failed task attempts are never listed, so check-back rolls them back.

Columns: ``body`` (binary or string, required); optional ``keys`` (array<string> or string),
``tag`` (string), ``properties`` (map<string,string>), ``topic`` (string; option topic wins).
Other columns are ignored, so a txmq read can be written back as it is.
Options: endpoints, topic; batch writes also sinkId and batchId (a write with the same pair is
applied once, however often it runs). A stream uses Spark's query id (kept in its checkpoint).

Must not: make anything visible before the ledger record is durable, or keep a connection on a
writer (Spark pickles writers to executors).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

from txmq import errors, limits
from txmq.spark import options as opt
from txmq.spark.backoff import Backoff
from txmq.spark.client import BrokerClient, SentHalf
from txmq.spark.client import build_message as _message
from txmq.spark.members import Brokers, SinkCluster, Spread
from txmq.spark.options import SchemaError, TxmqOptionError
from txmq.txn import bundle
from txmq.txn.ledger import (
    LEDGER_TOPIC,
    PROP_SINK_ATTEMPT,
    PROP_SINK_BATCH,
    PROP_SINK_LEDGER,
    PROP_SINK_PARTITION,
    PROP_SINK_QUERY,
    LedgerEntry,
    ledger_key,
)

# Bundles one task keeps in flight (PrepareBundle), so its writes share the broker's group-commit
# fsyncs and the broker works while the task encodes the next bundle.
SENDS_IN_FLIGHT: Final = 4
# EndTransaction calls the driver keeps in flight, for the same reason.
DECISIONS_IN_FLIGHT: Final = 16
# What `txmq topic create` reaches without --endpoints: the hint names the flag only otherwise.
CLI_DEFAULT_ENDPOINTS: Final = "127.0.0.1:8081"
# Test-only failpoint: "after-ledger:<batch>" or "after-sink-commit:<batch>" SIGKILLs the whole
# driver process group at that point of that batch's commit (a crashed driver machine).
FAILPOINT_ENV: Final = "TXMQ_SPARK_FAILPOINT"
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
_SINK_PROPS = frozenset(
    {PROP_SINK_QUERY, PROP_SINK_BATCH, PROP_SINK_PARTITION, PROP_SINK_ATTEMPT, PROP_SINK_LEDGER}
)
T = TypeVar("T")


class SinkCommitLostError(errors.TransactionError):
    """The ledger committed a transaction the broker had already rolled back (it reached the
    broker's maximum number of checks before the batch committed): those rows are missing."""

    code = errors.CODE_PRECONDITION_FAILED

    def __init__(self, query: str, batch: str, transaction_id: str, detail: str) -> None:
        super().__init__(
            f"sink batch {query}:{batch}: transaction {transaction_id} was rolled back by the "
            f"broker before the sink committed it ({detail}); raise the broker's "
            "transaction_check_max or shorten batches"
        )
        self.query = query
        self.batch = batch
        self.transaction_id = transaction_id


class SinkTopicMissingError(errors.TopicNotFoundError):
    """The sink's topic does not exist: raised on the driver before any task runs, as one line
    that names the topic and the command creating it (not a failed task per partition)."""

    def __init__(self, topic: str, endpoints: str) -> None:
        super().__init__(topic)
        quoted = f'"{endpoints}"' if ";" in endpoints else endpoints
        where = "" if endpoints == CLI_DEFAULT_ENDPOINTS else f" --endpoints {quoted}"
        self.args = (
            f"the txmq sink's topic {topic!r} does not exist at {endpoints}; create it with: "
            f"txmq topic create {topic} --type transaction{where}",
        )
        self.endpoints = endpoints


@dataclass
class SentHalves(WriterCommitMessage):
    """One task's report: the half messages it sent, all undecided."""

    query: str
    batch: str
    partition: int
    attempt: int
    halves: list[SentHalf] = field(default_factory=list)


def check_schema(schema: StructType) -> None:
    """Raises SchemaError naming the column when the DataFrame cannot be written."""
    cols = {f.name: f.dataType for f in schema.fields}
    string_list = ArrayType(StringType())
    wanted: dict[str, tuple[tuple[Any, ...], str]] = {
        "body": ((BinaryType(), StringType()), "binary or string"),
        "keys": ((string_list, ArrayType(StringType(), False), StringType()), "array<string>"),
        "tag": ((StringType(),), "string"),
        "topic": ((StringType(),), "string"),
        "properties": (
            (MapType(StringType(), StringType()), MapType(StringType(), StringType(), False)),
            "map<string,string>",
        ),
    }
    if "body" not in cols:
        raise SchemaError(
            f"the txmq sink needs a 'body' column (binary or string); got {schema.simpleString()}"
        )
    for name, (types, text) in wanted.items():
        if name in cols and cols[name] not in types:
            raise SchemaError(
                f"column {name!r} of the txmq sink must be {text}, not {cols[name].simpleString()}"
            )


def _rows(rb: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    wanted = ("body", "keys", "tag", "topic", "properties")
    cols = {n: rb.column(n).to_pylist() for n in wanted if n in rb.schema.names}
    for i in range(rb.num_rows):
        yield {n: cols[n][i] if n in cols else None for n in wanted}


class _Sink:
    """What the batch and the streaming sink share: options, task sends, driver decisions."""

    def __init__(self, options: Mapping[str, str], schema: StructType, *, batch: bool) -> None:
        opts = opt.lower_keys(options)
        known = opt.SINK_OPTIONS if batch else opt.SINK_OPTIONS - {"sinkid", "batchid"}
        opt.check_known(opts, known, "sink" if batch else "streaming sink")
        check_schema(schema)
        self.endpoints = opt.endpoints(opts)
        self.security = opt.security(opts)
        self.topic = opts.get("topic", "").strip()
        if not self.topic and "topic" not in schema.fieldNames():
            raise TxmqOptionError("the txmq sink needs option 'topic' or a 'topic' column")
        self.sink_id = opts.get("sinkid", "spark-batch").strip()
        # Fixed on the driver and pickled to the tasks: one id for the whole write job.
        self.batch_id = opts.get("batchid", "").strip() or uuid.uuid4().hex
        ledger_key(self.sink_id, self.batch_id)  # checks both now, not in every task
        if self.topic:
            self._require_topic()

    def _require_topic(self) -> None:
        """Runs where Spark builds the writer, on the driver, before any task: a missing topic
        fails the write there, in one line, with nothing sent (a broker that creates topics on
        first use creates it, as for the first send). A ``topic`` column's topics are known
        only row by row, in the tasks."""
        with BrokerClient(self.endpoints, security=self.security) as broker:
            if not broker.topic_routed(self.topic):
                raise SinkTopicMissingError(self.topic, self.endpoints)

    def cluster(self) -> SinkCluster:
        """The members, asked now (each task and each commit asks: liveness changes)."""
        return SinkCluster.discover(self.endpoints, self.security)

    def _encode(self, row: dict[str, Any], born_ms: int) -> tuple[str, bytes]:
        """One row as (topic, message of a bundle). Raises SchemaError for a row no topic
        could take."""
        body, keys, props = row["body"], row["keys"], row["properties"] or []
        if body is None or len(body) == 0:
            raise SchemaError("the txmq sink cannot send a row with a null or empty body")
        user = {str(k): str(v) for k, v in props if v is not None}
        if _SINK_PROPS & user.keys():
            raise SchemaError(f"properties {sorted(_SINK_PROPS)} are reserved for the sink")
        # As in Spark's Kafka sink, the topic option wins over a topic column, so a txmq read
        # (which has one) can be written to another topic.
        topic = self.topic or row["topic"]
        if not topic:
            raise SchemaError("a row has a null topic and the txmq sink has no option 'topic'")
        return topic, bundle.encode_message(
            topic,
            body.encode() if isinstance(body, str) else bytes(body),
            message_id=uuid.uuid4().hex.upper(),
            keys=[keys] if isinstance(keys, str) else [k for k in keys or [] if k],
            tag=row["tag"] or "",
            properties=user,
            born_timestamp_ms=born_ms,
        )

    def send_halves(self, batches: Iterator[pa.RecordBatch], query: str, batch: str) -> SentHalves:
        """Executor side: send the rows as bundles (txn/bundle.py: one transaction, one half
        record and one durable write per bundle); nothing becomes visible. One connection per
        task; at most SENDS_IN_FLIGHT bundles in flight and SINK_OPEN_BUNDLES_MAX being filled,
        so a task holds a bounded number of bytes whatever its rows."""
        ctx = TaskContext.get()
        part, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
        cluster = self.cluster()
        tags = {
            PROP_SINK_QUERY: query,
            PROP_SINK_BATCH: batch,
            PROP_SINK_PARTITION: str(part),
            PROP_SINK_ATTEMPT: str(attempt),
        }
        home = cluster.home(query, batch)[0]
        if home:  # else unnamed: the broker holding each half reads its own ledger
            tags[PROP_SINK_LEDGER] = home
        out = SentHalves(query, batch, part, attempt)
        born_ms = int(time.time() * 1000)
        with Brokers(self.security) as brokers, ThreadPoolExecutor(SENDS_IN_FLIGHT) as pool:
            spread = Spread.over(cluster, brokers, start=part)
            sending: deque[Future[SentHalf]] = deque()

            def ship(topic: str, messages: list[bytes]) -> None:
                while len(sending) >= SENDS_IN_FLIGHT:  # in order; a failure fails the task
                    out.halves.append(sending.popleft().result())
                sending.append(pool.submit(_prepare, spread, topic, messages, tags))

            filling: dict[str, _Filling] = {}
            for rb in batches:
                for row in _rows(rb):
                    topic, message = self._encode(row, born_ms)
                    got = filling.setdefault(topic, _Filling())
                    if not got.fits(message):
                        ship(topic, got.messages)
                        got = filling[topic] = _Filling()
                    got.add(message)
                    if len(filling) > limits.SINK_OPEN_BUNDLES_MAX:
                        for t, f in filling.items():
                            ship(t, f.messages)
                        filling.clear()
            for t, f in filling.items():
                if f.messages:
                    ship(t, f.messages)
            while sending:
                out.halves.append(sending.popleft().result())
        return out

    def commit_batch(self, messages: Sequence[Any], query: str, batch: str) -> None:
        """Driver side: ledger record first, then the decisions (see the module docstring)."""
        sent = _sent(messages, query, batch)
        _, home = self.cluster().home(query, batch)
        with Brokers(self.security) as brokers:
            recorded = _ledger(brokers.get(home), query, batch)
            if recorded:
                committed = frozenset().union(*(e.committed for e in recorded))
            else:
                entry = LedgerEntry(
                    query,
                    batch,
                    frozenset(h.transaction_id for m in sent for h in m.halves),
                    tuple(sorted((m.partition, m.attempt) for m in sent)),
                )
                _append_ledger(brokers.get(home), entry)
                _failpoint("after-ledger", batch)
                committed = entry.committed
            _decide(brokers, home, sent, committed, query, batch)
        _failpoint("after-sink-commit", batch)

    def abort_batch(self, messages: Sequence[Any], query: str, batch: str) -> None:
        """Roll back, unless the ledger already committed the batch: it is the decision."""
        sent = _sent(messages, query, batch)
        _, home = self.cluster().home(query, batch)
        with Brokers(self.security) as brokers:
            recorded = _ledger(brokers.get(home), query, batch)
            committed = frozenset().union(*(e.committed for e in recorded))
            _decide(brokers, home, sent, committed, query, batch)


@dataclass
class _Filling:
    """A bundle being filled: messages and their bytes."""

    messages: list[bytes] = field(default_factory=list)
    size: int = 0

    def fits(self, message: bytes) -> bool:
        """Whether ``message`` joins this bundle (an empty bundle takes any one message: the
        broker refuses one larger than its bounds, naming them)."""
        return not self.messages or (
            self.size + len(message) <= limits.SINK_BUNDLE_BYTES_MAX
            and len(self.messages) < limits.SINK_BUNDLE_MESSAGES_MAX
        )

    def add(self, message: bytes) -> None:
        self.messages.append(message)
        self.size += len(message)


def _prepare(
    to: Spread | BrokerClient, topic: str, messages: list[bytes], tags: Mapping[str, str]
) -> SentHalf:
    """PrepareBundle on the next member of the spread, waiting out back-pressure: a busy broker
    (disk above its watermark, too many pending transactions) or one that does not answer is
    skipped for another member at once while one is believed live, else asked again after
    doubling pauses, for up to SINK_BUSY_RETRY_S_MAX. A bundle stored twice (an answer lost)
    is never listed in the ledger, so check-back rolls the stray copy back."""
    spread = to if isinstance(to, Spread) else Spread.single(to)
    backoff = Backoff()
    # Bounded by the deadline: each turn pauses at least SINK_BUSY_BACKOFF_S_MIN, except a
    # turn that skips a failed member, at most one per member between two pauses.
    while True:
        broker = spread.next()
        try:
            return broker.prepare_bundle(topic, messages, tags)
        except errors.TxmqError as exc:
            # Retriable: busy (back-pressure) or unreachable (BrokerUnavailableError).
            if not exc.retriable or backoff.expired():
                raise
            if spread.failed(broker.endpoints):
                continue
        backoff.pause()


def _sent(messages: Sequence[Any], query: str, batch: str) -> list[SentHalves]:
    sent = [m for m in messages if isinstance(m, SentHalves)]
    for m in sent:
        errors.invariant(
            (m.query, m.batch) == (query, batch),
            f"task report for {m.query}:{m.batch} reached the commit of {query}:{batch}",
        )
    return sent


def _until_acknowledged(call: Callable[[], T]) -> T:
    """``call()``, again after doubling pauses for up to SINK_BUSY_RETRY_S_MAX while it fails
    with a retriable error: a replica group that stored the write on its leader but could not
    confirm it on enough replicas in time (ReplicationTimeoutError: a follower catching up,
    paused or restarting), a failover that outlasted the client's own (NotLeaderError,
    BrokerUnavailableError), back-pressure. Only for calls that may be repeated: a decision
    (EndTransaction is idempotent on the broker, and a repeated one is acknowledged, as the
    first, only once the group holds it) and the ledger record (a second copy lists the same
    transactions: readers take the union)."""
    backoff = Backoff()
    while True:
        try:
            return call()
        except errors.TxmqError as exc:
            if not exc.retriable or backoff.expired():
                raise
        backoff.pause()  # the group catches up or elects


def _append_ledger(broker: BrokerClient, entry: LedgerEntry) -> None:
    """Append the batch's ledger record, creating the ledger topic first on a broker that does
    not create topics on first use."""
    record = _message(LEDGER_TOPIC, entry.encode(), keys=[entry.key])
    try:
        _until_acknowledged(lambda: broker.send([record]))
    except errors.TopicNotFoundError:
        broker.create_topic(LEDGER_TOPIC, 1, "normal")
        _until_acknowledged(lambda: broker.send([record]))


def _ledger(broker: BrokerClient, query: str, batch: str) -> list[LedgerEntry]:
    key = ledger_key(query, batch)
    found = broker.find_by_key(LEDGER_TOPIC, key, limits.LEDGER_RECORDS_PER_KEY_MAX)
    return [LedgerEntry.decode(key, body) for keys, body in found if key in keys]


def _decide(
    brokers: Brokers,
    home: str,
    sent: list[SentHalves],
    committed: frozenset[str],
    query: str,
    batch: str,
) -> None:
    """Commit the listed halves and roll back the rest, each on the member that holds it (a
    half that names none: the ledger's home), concurrently (shared fsyncs)."""
    halves = [h for m in sent for h in m.halves]

    def one(h: SentHalf) -> None:
        commit = h.transaction_id in committed
        broker = brokers.get(h.endpoint or home)
        try:
            _until_acknowledged(lambda: broker.end_transaction(h, commit=commit))
        except errors.TransactionConflictError as exc:
            if commit:
                raise SinkCommitLostError(query, batch, h.transaction_id, str(exc)) from exc
            raise

    with ThreadPoolExecutor(DECISIONS_IN_FLIGHT) as pool:
        for f in [pool.submit(one, h) for h in halves]:
            f.result()


def _failpoint(name: str, batch: str) -> None:
    """Kill the driver's whole session, the way a crashed machine ends it. Spark's Python
    worker daemon moves its workers to a process group of their own, so the session id (the
    test's child driver, started with start_new_session) names the driver's group."""
    if os.environ.get(FAILPOINT_ENV) == f"{name}:{batch}":
        os.killpg(os.getsid(0), signal.SIGKILL)


def _task_property(name: str) -> str:
    ctx = TaskContext.get()
    value = ctx.getLocalProperty(name) if ctx else None
    if not value:
        raise TxmqOptionError(f"the streaming txmq sink runs only in a streaming query ({name})")
    return str(value)


class TxmqBatchWriter(_Sink, DataSourceArrowWriter):
    def __init__(
        self, options: Mapping[str, str], schema: StructType, *, overwrite: bool = False
    ) -> None:
        if overwrite:
            raise TxmqOptionError("a topic cannot be overwritten: use mode('append')")
        super().__init__(options, schema, batch=True)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentHalves:
        return self.send_halves(iterator, self.sink_id, self.batch_id)

    def commit(self, messages: list[Any]) -> None:
        self.commit_batch(messages, self.sink_id, self.batch_id)

    def abort(self, messages: list[Any]) -> None:
        self.abort_batch(messages, self.sink_id, self.batch_id)


class TxmqStreamWriter(_Sink, DataSourceStreamArrowWriter):
    """The query id comes from the tasks (Spark sets it as a task property), because
    ``commit`` runs where Spark tells it nothing but the batch id."""

    def __init__(
        self, options: Mapping[str, str], schema: StructType, *, overwrite: bool = False
    ) -> None:
        super().__init__(options, schema, batch=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentHalves:
        query = _task_property(QUERY_ID_PROPERTY)
        return self.send_halves(iterator, query, _task_property(BATCH_ID_PROPERTY))

    def _query(self, messages: list[Any]) -> str | None:
        queries = {m.query for m in messages if isinstance(m, SentHalves)}
        errors.invariant(len(queries) <= 1, f"one batch of one query, got {sorted(queries)}")
        return queries.pop() if queries else None

    def commit(self, messages: list[Any], batchId: int) -> None:
        query = self._query(messages)
        if query is not None:  # no task ran: nothing was sent
            self.commit_batch(messages, query, str(batchId))

    def abort(self, messages: list[Any], batchId: int) -> None:
        query = self._query(messages)
        if query is not None:
            self.abort_batch(messages, query, str(batchId))
