"""Options of the ``txmq`` data source, and the offset arithmetic of reads. Pure.

Owns: parsing and checking every option (typed ``TxmqOptionError`` naming the option), the
offset specs (``earliest``, ``latest``, JSON per queue) and the admission-control split of a
row budget over queues. Must not: talk to the broker (the source resolves "earliest"/"latest"
with ``txmq.spark.client``) or import pyspark, so it is tested without Spark.

Offsets are JSON objects ``{"<queue number>": <next queue offset to read>, ...}``: exactly what
Spark keeps in its checkpoint (numbers and the cluster form: spark/numbering.py). In a spec, -2
means earliest and -1 latest for that queue (as Kafka's connector does); a queue left out
starts at earliest and ends at latest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from txmq.errors import BadRequestError, ConfigError, TxmqError
from txmq.protocol.client_security import ClientSecurity

EARLIEST: Final = -2
LATEST: Final = -1
_ENDPOINT = r"[A-Za-z0-9_.\-\[\]:]+:\d{1,5}"
# One broker, or several of one cluster as the official clients take them: H:P1;H:P2.
_ENDPOINT_RE = re.compile(rf"^{_ENDPOINT}(;{_ENDPOINT})*$")

# Credentials and TLS (docs/security.md), for the source and the sink alike.
SECURITY_OPTIONS: Final = frozenset(
    {"accesskey", "secretkey", "tls", "cafile", "certfile", "keyfile"}
)
SOURCE_OPTIONS: Final = SECURITY_OPTIONS | frozenset(
    {
        "endpoints",
        "topic",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "maxrecordspertrigger",
        "failondataloss",
    }
)
SINK_OPTIONS: Final = SECURITY_OPTIONS | frozenset({"endpoints", "topic", "sinkid", "batchid"})
# Options Spark itself may pass to every source and sink.
SPARK_OPTIONS: Final = frozenset({"path", "checkpointlocation"})


class TxmqOptionError(BadRequestError):
    """A missing, unknown or malformed option of ``format("txmq")``, or an unusable column."""


class SchemaError(TxmqOptionError):
    """The DataFrame written to the txmq sink lacks a column or has one of the wrong type."""


Offsets = dict[str, int]


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Spark option names are case-insensitive: compare them lower-cased."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def check_known(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(options) - known - SPARK_OPTIONS)
    if unknown:
        raise TxmqOptionError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for the txmq {what}; "
            f"known: {', '.join(sorted(known))} (case-insensitive)"
        )


def require(options: Mapping[str, str], key: str) -> str:
    value = options.get(key, "").strip()
    if not value:
        raise TxmqOptionError(f"option {key!r} is required for format('txmq')")
    return value


def endpoints(options: Mapping[str, str]) -> str:
    value = require(options, "endpoints")
    if not _ENDPOINT_RE.match(value):
        raise TxmqOptionError(
            f"option 'endpoints' must be HOST:PORT or HOST:P1;HOST:P2, got {value!r}"
        )
    return value


def positive_int(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise TxmqOptionError(f"option {key!r} must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise TxmqOptionError(f"option {key!r} must be positive, got {value}")
    return value


def boolean(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise TxmqOptionError(f"option {key!r} must be true or false, got {raw!r}")
    return raw.lower() == "true"


def security(options: Mapping[str, str]) -> ClientSecurity:
    """``accessKey``/``secretKey`` (both or neither), ``tls`` (true/false), ``caFile`` (PEM
    roots on every executor's machine; implies tls) and ``certFile``/``keyFile`` (a client
    certificate and its key, both or neither, for a broker requiring one; imply tls)."""

    def path(key: str) -> Path | None:
        value = options.get(key, "").strip()
        return Path(value) if value else None

    try:
        return ClientSecurity(
            access_key=options.get("accesskey", "").strip(),
            secret_key=options.get("secretkey", ""),
            tls=boolean(options, "tls", False),
            ca_file=path("cafile"),
            cert_file=path("certfile"),
            key_file=path("keyfile"),
        )
    except ConfigError as exc:
        message = str(exc)
        for flag, option in _OPTION_NAMES:
            message = message.replace(flag, option)
        raise TxmqOptionError(f"option {message}") from exc


_OPTION_NAMES = (
    ("--access-key", "accessKey"),
    ("--secret-key", "secretKey"),
    ("--cert-file", "certFile"),
    ("--key-file", "keyFile"),
)


def parse_spec(raw: str, key: str, queues: Sequence[int], default: int) -> dict[int, int]:
    """One value per queue number of ``queues``: an offset >= 0, EARLIEST or LATEST.

    Raises TxmqOptionError for anything but 'earliest', 'latest' or a JSON object of queue
    number -> integer (the numbers must be the read's: spark/numbering.py).
    """
    spec = raw.strip()
    if spec in ("earliest", "latest"):
        return dict.fromkeys(queues, EARLIEST if spec == "earliest" else LATEST)
    hint = f"option {key!r} must be 'earliest', 'latest' or JSON like {{\"0\": 12}}, got {raw!r}"
    try:
        parsed = json.loads(spec)
    except ValueError as exc:
        raise TxmqOptionError(hint) from exc
    if not isinstance(parsed, dict):
        raise TxmqOptionError(hint)
    out = dict.fromkeys(queues, default)
    for q, value in parsed.items():
        if not str(q).isdigit() or int(q) not in out:
            raise TxmqOptionError(
                f"option {key!r} names queue {q!r}; the topic's queues are {_listed(queues)}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
            raise TxmqOptionError(f"option {key!r}: offset of queue {q} must be >= -2")
        out[int(q)] = value
    return out


def _listed(queues: Sequence[int]) -> str:
    """Queue numbers as a reader takes them in: runs shown as first-last."""
    runs: list[list[int]] = []
    for q in sorted(queues):
        if runs and runs[-1][1] + 1 == q:
            runs[-1][1] = q
        else:
            runs.append([q, q])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_checkpointed(offsets: Mapping[str, object]) -> dict[int, int]:
    """Offsets Spark hands back (from its checkpoint): queue id -> offset."""
    out: dict[int, int] = {}
    for q, v in offsets.items():
        if not str(q).isdigit() or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise TxmqOptionError(f"malformed txmq offsets {dict(offsets)!r} in the checkpoint")
        out[int(q)] = v
    return out


@dataclass(frozen=True, slots=True)
class QueueRange:
    """The messages ``start <= queue_offset < end`` of one queue: one input partition."""

    queue_id: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def ranges(start: Mapping[int, int], end: Mapping[int, int]) -> list[QueueRange]:
    """The non-empty per-queue ranges between two offsets, in queue order. Deterministic, so a
    batch re-run from the checkpoint reads exactly the same messages."""
    out = []
    for q in sorted(end):
        r = QueueRange(q, start.get(q, 0), end[q])
        if r.count > 0:
            out.append(r)
    return out


def admit(start: Mapping[int, int], latest: Mapping[int, int], max_rows: int) -> dict[int, int]:
    """The end offsets of a batch of at most ``max_rows`` messages after ``start``.

    The budget is shared fairly: each round gives every queue with a backlog an equal share,
    so one busy queue cannot starve the others (water-filling). Queues only move forward.
    """
    if max_rows <= 0:
        raise TxmqOptionError(f"a read limit must be positive, got {max_rows}")
    backlog = {q: max(0, latest[q] - start.get(q, 0)) for q in latest}
    grant = {q: 0 for q in latest}
    budget = max_rows
    waiting = sorted(q for q, b in backlog.items() if b > 0)
    # Each round either exhausts the budget or drains at least one queue: at most
    # one round per queue (every broker's queues of the topic, on a cluster) plus one.
    for _ in range(len(latest) + 1):
        if budget <= 0 or not waiting:
            break
        share, extra = divmod(budget, len(waiting))
        for i, q in enumerate(waiting):
            take = min(backlog[q] - grant[q], share + (1 if i < extra else 0))
            grant[q] += take
            budget -= take
        waiting = [q for q in waiting if grant[q] < backlog[q]]
    out = dict(start)
    out.update({q: start.get(q, 0) + grant[q] for q in latest})
    return out


class DataLossError(TxmqError):
    """Messages a read needs were deleted by retention before it read them.

    Raised unless the read sets ``failOnDataLoss`` to false (then it resumes at the earliest
    retained message and the lost ones are skipped)."""

    def __init__(self, topic: str, queue_id: int, offset: int, detail: str) -> None:
        super().__init__(
            f"topic {topic!r} queue {queue_id}: offset {offset} is no longer retained ({detail}); "
            "set option failOnDataLoss=false to skip lost messages"
        )
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset
