"""Transaction ids from the pooled source (txn/ids.py): the uuid4-hex shape, never repeated,
and one getrandom call per pool rather than per id (a GIL hand-off per call)."""

from __future__ import annotations

import os
import re
import threading

import pytest

from txmq import limits
from txmq.txn import ids


def test_ids_look_like_uuid4_hex_and_never_repeat() -> None:
    n = 3 * limits.TRANSACTION_ID_POOL_IDS + 7  # crosses several refills
    got = [ids.new_transaction_id() for _ in range(n)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t in got)
    assert len(set(got)) == n


def test_one_urandom_call_per_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.urandom

    def counting(size: int) -> bytes:
        calls.append(size)
        return real(size)

    monkeypatch.setattr(ids.os, "urandom", counting)
    for _ in range(2 * limits.TRANSACTION_ID_POOL_IDS):
        ids.new_transaction_id()
    # The pool left over from earlier calls may need one refill more than the two.
    assert 2 <= len(calls) <= 3
    assert all(size == 16 * limits.TRANSACTION_ID_POOL_IDS for size in calls)


def test_threads_share_the_pool_without_repeats() -> None:
    per_thread = limits.TRANSACTION_ID_POOL_IDS
    results: list[list[str]] = [[] for _ in range(4)]

    def take(k: int) -> None:
        results[k] = [ids.new_transaction_id() for _ in range(per_thread)]

    threads = [threading.Thread(target=take, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    every = [t for r in results for t in r]
    assert len(every) == 4 * per_thread
    assert len(set(every)) == len(every)
