"""How the Spark connector addresses brokers and replica groups, and how long it waits for one.

Owns: a replica group's address (``group_address``: its endpoints joined by
``REPLICA_SEPARATOR``, the replica believed to lead first), the gRPC target of an endpoint list
(``channel_target``), and the deadlines of a call and of one attempt at one replica
(``attempt_deadline``). Must not: open channels or call anything (client.py does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from txmq.errors import invariant

# Per-call deadline: long enough for a 1024-message pull of large bodies on a loaded machine.
CALL_TIMEOUT_S: Final = 30.0
# At a replica of a group, one attempt first gets this long (doubled at a replica each time it
# ran out there): a paused (SIGSTOPped) leader accepts the connection and answers nothing until
# the deadline, and a new leader is elected within ~4 s (ADR 0005) ...
ATTEMPT_S: Final = 5.0
# ... and at least this long, whatever is left of SPARK_FAILOVER_S_MAX.
ATTEMPT_S_MIN: Final = 1.0
# Joins a replica group's endpoints in the connector's own addresses (partitions, sent halves,
# sink members); never in user input, where ";" separates members of a cluster.
REPLICA_SEPARATOR: Final = "|"


def group_address(replicas: Sequence[str]) -> str:
    """The address of a replica group: its endpoints, the one believed to lead first."""
    invariant(bool(replicas), "a group has a replica")
    return REPLICA_SEPARATOR.join(replicas)


def replicas_of(address: str) -> list[str]:
    """The endpoints of ``group_address``'s group (one for a broker alone)."""
    return address.split(REPLICA_SEPARATOR)


def channel_target(endpoints: str) -> str:
    """The gRPC target for ``H:P`` or the official clients' ``H:P1;H:P2`` (several brokers of
    one cluster): IPv4 addresses become one ``ipv4:`` target that gRPC connects to the first
    live one of, as the official client does; names cannot share a target, so the first is
    used (any member answers for the cluster's members and topic definitions)."""
    parts = [e.strip() for e in endpoints.split(";") if e.strip()]
    if len(parts) <= 1:
        return endpoints
    hosts = [p.rpartition(":")[0] for p in parts]
    if all(h.count(".") == 3 and h.replace(".", "").isdigit() for h in hosts):
        return "ipv4:" + ",".join(parts)
    return parts[0]


def attempt_deadline(call_s: float, timed_out: int, left_s: float) -> float:
    """The deadline of one attempt at a replica of a group: ATTEMPT_S, doubled for each
    attempt that ran out at that replica during this call (a leader slow rather than paused
    gets the time it needs), never more than the call's deadline ``call_s`` nor much past the
    failover's end ``left_s`` from now (SPARK_FAILOVER_S_MAX bounds the whole call)."""
    grown = ATTEMPT_S * float(2 ** min(timed_out, 8))
    return min(call_s, grown, max(left_s, ATTEMPT_S_MIN))
