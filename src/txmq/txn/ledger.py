"""The Spark sink's ledger: its record format and the server-side resolver for its half messages.

Owns: the ledger topic name, the properties the sink puts on each half message, the ledger
record's key and body (``LedgerEntry``), and ``SinkLedger``, the resolver the transaction
coordinator consults on check-back. Pure: the lookup of ledger records is injected; no I/O, no
clock, no gRPC. The sink (txmq.spark.sink) writes what this module reads, so both import it.
Must not: decide anything the ledger does not say.

Theory of operation. Each Spark task sends its rows as half messages tagged with (query,
batch, partition, attempt) and reports their transaction ids. The driver's commit first appends
ONE ledger record for the batch (a normal message to LEDGER_TOPIC, key ``<query>:<batch>``, body
the transaction ids it commits), and only then commits each transaction. The ledger record is
therefore the batch's decision, made durable in one append:

- a half whose batch is in the ledger and whose id is listed -> COMMITTED (the driver died
  between the ledger record and its EndTransaction calls);
- a half whose batch is in the ledger but whose id is not listed -> ROLLED_BACK (a failed task
  attempt, or a replay of an already committed batch);
- no ledger record for its batch yet -> None: the batch may still commit; the coordinator asks
  again later and rolls back after its maximum number of checks.

A replayed batch (Spark re-runs the last batch when the driver died after the sink committed but
before Spark's own commit record) finds its key in the ledger, so the driver rolls back the new
copies instead of committing them: no duplicates.

In a cluster the tasks spread a batch's bundles over every live member (each bundle is decided
on the member that holds it), but the batch has ONE ledger record, on its home member
(``ledger_home``: a function of the batch's key and the cluster's member names). Every half
names its home (PROP_SINK_LEDGER); a member's check-back reads the home's ledger over the
cluster's admin channel (``SinkLedger.place``), and while the home does not answer the half
waits without spending a check, so a batch is never decided from a partial view.

Registering (the broker does this in broker/state/parts.py)::

    Transactions(store, ..., resolvers=[SinkLedger(store.find_by_key)])

``SinkLedger`` is a claiming resolver (``claims``/``resolve``): the coordinator checks the halves
it claims on schedule without any live producer, which a dead Spark driver never is.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from txmq import limits
from txmq.errors import BadRequestError
from txmq.model import PROP_TRANSACTION_ID, Outcome, Record

# A user topic, not a system one: the sink appends to it with an ordinary SendMessage, which
# refuses system topics (names starting with '%', 'RMQ_SYS_', ...).
LEDGER_TOPIC: Final = "txmq-spark-sink-ledger"

# Properties on every half message the sink sends (user properties, so consumers of the output
# topic can trace a row to its query and batch).
PROP_SINK_QUERY: Final = "SPARK_SINK_QUERY"
PROP_SINK_BATCH: Final = "SPARK_SINK_BATCH"
PROP_SINK_PARTITION: Final = "SPARK_SINK_PARTITION"
PROP_SINK_ATTEMPT: Final = "SPARK_SINK_ATTEMPT"
# The cluster member (group) whose ledger holds the half's batch record (``ledger_home``): the
# sink spreads a batch's bundles over every live member, but writes its ONE ledger record on
# this member, and every member's check-back reads it there. Absent: this broker's own ledger.
PROP_SINK_LEDGER: Final = "SPARK_SINK_LEDGER"


Lookup = Callable[[str, str, int], Sequence[Record]]
# (member, topic, key, max_count) -> (keys, body) of the records with that key in the member's
# log; raises (any TxmqError) when the member cannot answer now.
RemoteLookup = Callable[[str, str, str, int], Sequence[tuple[Sequence[str], bytes | str]]]


class LedgerFormatError(BadRequestError):
    """A ledger record's body is not a ledger entry (written by something else)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"ledger record {key!r} is malformed: {reason}")
        self.key = key
        self.reason = reason


def ledger_key(query: str, batch: str) -> str:
    """The ledger record's key for one batch of one query (a message key, so <= 255 chars)."""
    key = f"{query}:{batch}"
    if not query or not batch or len(key) > limits.KEY_LENGTH_MAX or key.strip() != key:
        raise BadRequestError(
            f"sink query id {query!r} and batch id {batch!r} must be non-blank and together "
            f"at most {limits.KEY_LENGTH_MAX - 1} characters"
        )
    return key


def ledger_home(key: str, members: Sequence[str]) -> str:
    """The member whose ledger holds batch ``key``'s record: rendezvous hashing over the names
    of EVERY member of the cluster, live or not, so the driver of any run of the batch (a replay
    after a crash too) and every broker's check-back find the same one whoever is up. A batch
    whose home is down cannot commit until it is back; it is never decided twice."""
    if not members:
        raise BadRequestError("a ledger home needs at least one cluster member")

    def weight(member: str) -> bytes:
        return hashlib.sha256(f"{member}\0{key}".encode()).digest()

    return max(members, key=weight)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One batch's decision: the transactions it commits, and which task attempts sent them."""

    query: str
    batch: str
    committed: frozenset[str]
    tasks: tuple[tuple[int, int], ...] = ()  # (partition, attempt) whose halves are committed

    @property
    def key(self) -> str:
        return ledger_key(self.query, self.batch)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "query": self.query,
                "batch": self.batch,
                "committed": sorted(self.committed),
                "tasks": [list(t) for t in sorted(self.tasks)],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, key: str, body: bytes | str) -> LedgerEntry:
        """Parse a ledger body. Raises LedgerFormatError, never guesses."""
        try:
            raw = json.loads(body)
            query, batch = str(raw["query"]), str(raw["batch"])
            committed = frozenset(str(t) for t in raw["committed"])
            tasks = tuple((int(p), int(a)) for p, a in raw.get("tasks", []))
        except (ValueError, TypeError, KeyError) as exc:
            raise LedgerFormatError(key, repr(exc)) from exc
        if ledger_key(query, batch) != key:
            raise LedgerFormatError(key, f"its body names batch {query}:{batch}")
        return cls(query, batch, committed, tasks)


def sink_batch(half: Record) -> tuple[str, str] | None:
    """(query, batch) of a half message the sink sent, or None for any other half."""
    query = half.properties.get(PROP_SINK_QUERY)
    batch = half.properties.get(PROP_SINK_BATCH)
    if not query or not batch:
        return None
    return query, batch


def decide(half: Record, entries: Sequence[LedgerEntry]) -> Outcome | None:
    """The outcome the ledger entries of the half's batch dictate (None: not recorded yet)."""
    if not entries:
        return None
    tid = half.properties.get(PROP_TRANSACTION_ID, "")
    if any(tid in e.committed for e in entries):
        return Outcome.COMMITTED
    return Outcome.ROLLED_BACK


class SinkLedger:
    """Claiming resolver for the Spark sink's half messages (see the module docstring).

    Args:
        lookup: ``(topic, key, max_count) -> records`` with that key, e.g. ``Store.find_by_key``.

    Found entries are kept (the last SINK_LEDGER_CACHE_KEYS_MAX batches): a batch's ledger
    record never changes once written, and each of its halves is checked against it, so
    reading and decoding it once per half cost O(halves x ledger size) per batch. Only a
    second driver racing the first on one batch (which Spark never runs) could append a second
    record for a key after the first was cached; its halves are then rolled back, as they
    would be had check-back come between the two appends.
    """

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        # In a cluster (``place``): this member's name and how to read another member's ledger.
        self.here = ""
        self.remote: RemoteLookup | None = None
        self._found: OrderedDict[str, list[LedgerEntry]] = OrderedDict()
        self._lock = threading.Lock()

    def place(self, here: str, remote: RemoteLookup | None) -> None:
        """This broker is member ``here`` of a cluster; ``remote`` reads another's ledger."""
        self.here, self.remote = here, remote

    def claims(self, half: Record) -> bool:
        return sink_batch(half) is not None

    def entries(self, query: str, batch: str, home: str = "") -> list[LedgerEntry]:
        """The batch's ledger entries, read on member ``home`` (here when empty, this member,
        or outside a cluster). Raises what ``remote`` raises when the home cannot answer: the
        coordinator then asks again later without spending a check."""
        key = ledger_key(query, batch)
        with self._lock:
            found = self._found.get(key)
            if found is not None:
                self._found.move_to_end(key)
                return found
        max_count = limits.LEDGER_RECORDS_PER_KEY_MAX
        if home and home != self.here and self.remote is not None:
            pairs = self.remote(home, LEDGER_TOPIC, key, max_count)
        else:
            pairs = [(r.keys, r.body) for r in self.lookup(LEDGER_TOPIC, key, max_count)]
        found = [LedgerEntry.decode(key, body) for keys, body in pairs if key in keys]
        if found:  # "not recorded yet" may change at any moment: never kept
            with self._lock:
                self._found[key] = found
                while len(self._found) > limits.SINK_LEDGER_CACHE_KEYS_MAX:
                    self._found.popitem(last=False)
        return found

    def resolve(self, half: Record) -> Outcome | None:
        found = sink_batch(half)
        if found is None:
            return None
        return decide(half, self.entries(*found, half.properties.get(PROP_SINK_LEDGER, "")))

    def __call__(self, half: Record) -> Outcome | None:
        """Plain-resolver form, for a coordinator that takes callables only."""
        return self.resolve(half)
