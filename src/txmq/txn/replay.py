"""Rebuild the transaction book at open: the snapshot file, then the log after it.

Owns: ``load_book``. The snapshot (written by ``Transactions.snapshot``) only saves replay time:
the log holds every transaction record, so a damaged snapshot is reported and replaced by a full
replay, and replay is idempotent (a decision is never lost nor applied twice).
Must not: write anything itself; the caller rewrites the snapshot when told to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from txmq import limits
from txmq.model import Record, TxnFlag
from txmq.store.store import Store
from txmq.txn import records
from txmq.txn.book import TxnBook

log = logging.getLogger(__name__)


def load_book(
    store: Store,
    path: Path,
    book: TxnBook,
    *,
    timeout_ms: int,
    claimed: Callable[[Record], bool],
) -> tuple[TxnBook, bool]:
    """(the book after the snapshot at ``path`` and the log tail, whether the snapshot must
    be rewritten now). ``book`` is an empty book with the broker's check settings."""
    offset = store.log_start_offset
    if store.disk.exists(path):
        try:
            loaded = records.decode_snapshot(store.disk.read_all(path), book)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("transaction snapshot %s is unreadable (%r); replaying the log", path, exc)
            loaded = -1
        if loaded < 0:
            book = TxnBook(check_interval_ms=book.check_interval_ms, check_max=book.check_max)
        offset = max(offset, loaded)
    # Through records held back from readers (a SYNC leader's read hold, ADR 0005): they are
    # this leader's log, and their transactions are decided and checked here like any other.
    end = store.durable_end_offset
    rewrite = False
    if offset > end:
        # The log ends below the snapshot (a tail was truncated). Keep what the snapshot knows
        # (every decision in it was acknowledged) and replay what the log still has after
        # ``end``; the snapshot must be rewritten so later records are not skipped.
        log.warning("transaction snapshot offset %d is past the log end %d", offset, end)
        offset, rewrite = end, True
    for _ in range(1 + (end - offset) // 64):  # bounded: every record is >= 64 bytes
        if offset >= end:
            break
        batch = store.scan(offset, limits.TRANSACTION_REPLAY_BATCH, held=True)
        if not batch:
            break
        for rec in batch:
            is_claimed = rec.flag is TxnFlag.PREPARED and claimed(rec)
            records.replay(book, rec, default_timeout_ms=timeout_ms, claimed=is_claimed)
        offset = batch[-1].next_physical_offset
    return book, rewrite
