"""The transaction check-back loop: ask live producers about transactions left undecided.

Owns: one tick of check-back. It snapshots which topics have a producer on an open Telemetry
stream, asks the coordinator (in the executor) for the due checks of those, and pushes a
``RecoverOrphanedTransactionCommand`` down the stream of the producer instance that sent the
half message, else of another live producer of the same topic. The producer's
TransactionChecker answers with EndTransaction (source SOURCE_SERVER_CHECK), handled by the
send path like any decision.
Must not: decide transactions itself (the coordinator does, including the max-checks
rollback) or block the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from txmq.broker.metrics.prometheus import Metrics
from txmq.broker.rpc.sessions import Clients
from txmq.protocol.telemetry import recover_orphaned_command
from txmq.txn.coordinator import Transactions

log = logging.getLogger("txmq.broker")
Run = Callable[..., Awaitable[Any]]


class CheckBack:
    def __init__(self, tx: Transactions, clients: Clients, metrics: Metrics, run: Run) -> None:
        self.tx = tx
        self.clients = clients
        self.metrics = metrics
        self.run = run

    async def tick(self) -> int:
        """Send the checks due now; returns how many commands were queued on a stream."""
        # The coordinator runs in an executor thread: hand it an immutable snapshot, never the
        # sessions dict the event loop keeps changing.
        live = self.clients.live_topics()
        requests = await self.run(self.tx.due_checks, live.__contains__)
        sent = 0
        for req in requests:
            session = self.clients.pick_checker(req.producer_group, req.client_id)
            # The check was already counted: if nobody can take it now, the coordinator asks
            # again at the next interval (bounded by the max-checks rollback).
            if session is None:
                log.info("no live producer for %s; check deferred", req.transaction_id)
                continue
            if not session.push(recover_orphaned_command(req.half, req.transaction_id)):
                log.warning(
                    "telemetry outbox of %s is full or closed; check of %s deferred",
                    session.client_id,
                    req.transaction_id,
                )
                continue
            sent += 1
            self.metrics.checks.inc()
        await self.update_gauges()
        return sent

    async def update_gauges(self) -> None:
        # The coordinator's figures take its lock: read them off the event loop.
        m = await self.run(lambda: self.tx.metrics)
        self.metrics.pending.set(m.pending)
        self.metrics.dead.set(m.dead)
        self.metrics.oldest_pending.set(m.oldest_pending_age_ms / 1000.0)
