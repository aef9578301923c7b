"""Values the transaction layer exchanges with the broker: check requests, metrics, resolvers.

Owns: plain frozen dataclasses and the resolver types. Must not: hold state or do I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeGuard

from txmq.model import DecisionSource, Outcome, Record
from txmq.txn.book import Txn


class ClaimingResolver(Protocol):
    """A server-side resolver that owns the half messages it claims (e.g. the Spark ledger)."""

    def claims(self, half: Record) -> bool: ...

    def resolve(self, half: Record) -> Outcome | None: ...


ResolverFn = Callable[[Record], Outcome | None]
Resolver = ClaimingResolver | ResolverFn
LiveGroups = Callable[[str], bool] | Mapping[str, object]


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """Ask a live producer of ``producer_group`` about a transaction (RocketMQ check-back).

    ``client_id`` is the producer instance that sent the half message (ask it first if it is
    still connected); ``half`` is the stored half record for the check command.
    """

    transaction_id: str
    producer_group: str
    client_id: str
    check_number: int
    half: Record

    @property
    def message_id(self) -> str:
        return self.half.message_id

    @property
    def half_offset(self) -> int:
        return self.half.physical_offset


@dataclass(frozen=True, slots=True)
class TxnMetrics:
    """Plain values the broker exports."""

    pending: int = 0
    dead: int = 0
    oldest_pending_age_ms: int = 0
    checks_sent: int = 0
    check_errors: int = 0
    # By source value ("producer", "check_back", "max_checks", "operator").
    outcomes_by_source: Mapping[str, int] = field(default_factory=dict)
    # By "<source>:<outcome>", e.g. "max_checks:rolled_back".
    outcomes: Mapping[str, int] = field(default_factory=dict)


def is_claiming(resolver: Resolver) -> TypeGuard[ClaimingResolver]:
    return callable(getattr(resolver, "claims", None)) and callable(
        getattr(resolver, "resolve", None)
    )


def live_predicate(live_groups: LiveGroups) -> Callable[[str], bool]:
    if isinstance(live_groups, Mapping):
        mapping = live_groups
        return lambda group: bool(mapping.get(group))
    return live_groups


@dataclass(frozen=True, slots=True)
class TickDecision:
    """A decision a check-back tick makes itself (a resolver's answer, a max-checks rollback)."""

    txn: Txn
    commit: bool
    source: DecisionSource
