"""The event loop's side of durable writes (txmq.broker.produce.durable) over a real store.

Goal: a transaction prepared and decided through ``drive`` ends exactly as through the blocking
API; a request cancelled while its write waits for the fsync still gets its write booked (the
transaction stays pending, so check-back or a decision can reach it); a decision that meets
another in flight is refused without blocking the loop. Method: a real Store and Transactions
on a simulated disk whose fsync a test holds (GatedDisk), a real event loop and executor.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from tests.unit.test_store_flush import ROOT, GatedDisk, wait_until
from txmq.broker.produce import durable
from txmq.model import DecisionSource, Outcome, RecordDraft
from txmq.store.store import Store
from txmq.txn.coordinator import Transactions
from txmq.txn.steps import DecisionInFlightError

P = DecisionSource.PRODUCER


def draft(n: int) -> RecordDraft:
    return RecordDraft(topic="orders", queue_id=0, body=b"b%d" % n, message_id=f"m{n}")


async def test_prepare_and_decide_on_the_loop(tmp_path: Path, clock: Clock) -> None:
    store = Store.open(tmp_path / "store", SMALL, now_ms=clock)
    tx = Transactions(store, tmp_path, now_ms=clock)
    with ThreadPoolExecutor(1) as pool:
        tid, _ = await durable.drive(tx.prepare_steps(draft(1), producer_group="g"), pool)
        assert tid in tx.book.pending
        steps = tx.end_steps(tid, commit=True, source=P, block=False)
        assert await durable.drive(steps, pool) is Outcome.COMMITTED
        again = tx.end_steps(tid, commit=True, source=P, block=False)
        assert await durable.drive(again, pool) is Outcome.COMMITTED, "idempotent, no write"
    assert store.queue_offsets("orders", 0) == (0, 1)
    tx.close()
    store.close()


async def test_a_cancelled_request_still_books_its_write(clock: Clock) -> None:
    disk = GatedDisk()
    store = Store.open(ROOT / "store", SMALL, now_ms=clock, disk=disk)
    tx = Transactions(store, ROOT, now_ms=clock)
    disk.gated = True
    steps = tx.prepare_steps(draft(1), producer_group="g", transaction_id="t1")
    with ThreadPoolExecutor(1) as pool:
        task = asyncio.ensure_future(durable.drive(steps, pool))
        assert await asyncio.to_thread(disk.entered.acquire, True, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert "t1" not in tx.book.pending, "not durable yet"
        disk.gated = False
        disk.gate.set()
        await asyncio.to_thread(wait_until, lambda: "t1" in tx.book.pending, "the booking")
        # The decision meets nothing in flight now, and lands.
        end = tx.end_steps("t1", commit=True, source=P, block=False)
        assert await durable.drive(end, pool) is Outcome.COMMITTED
    tx.close()
    store.close()


async def test_a_decision_in_flight_is_refused_without_blocking(clock: Clock) -> None:
    disk = GatedDisk()
    store = Store.open(ROOT / "store", SMALL, now_ms=clock, disk=disk)
    tx = Transactions(store, ROOT, now_ms=clock)
    tid, _ = tx.prepare(draft(1), producer_group="g")
    disk.gated = True
    with ThreadPoolExecutor(2) as pool:
        first = asyncio.ensure_future(
            durable.drive(tx.end_steps(tid, commit=True, source=P, block=False), pool)
        )
        assert await asyncio.to_thread(disk.entered.acquire, True, 10)
        with pytest.raises(DecisionInFlightError):
            await durable.drive(tx.end_steps(tid, commit=True, source=P, block=False), pool)
        disk.gated = False
        disk.gate.set()
        assert await first is Outcome.COMMITTED
    tx.close()
    store.close()


async def test_one_wake_per_group_resumes_every_request_in_it(clock: Clock) -> None:
    """Goal: the loop registers one callback per group commit, however many requests wait on
    it, and that one wake resumes them all. Method: hold the first fsync, let 8 more prepares
    write meanwhile (they share the next group), then release the gate."""
    disk = GatedDisk()
    store = Store.open(ROOT / "store", SMALL, now_ms=clock, disk=disk)
    tx = Transactions(store, ROOT, now_ms=clock)
    disk.gated = True
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1) as pool:
        first = asyncio.ensure_future(
            durable.drive(tx.prepare_steps(draft(0), producer_group="g"), pool)
        )
        assert await asyncio.to_thread(disk.entered.acquire, True, 10), "first fsync started"
        rest = [
            asyncio.ensure_future(
                durable.drive(tx.prepare_steps(draft(n), producer_group="g"), pool)
            )
            for n in range(1, 9)
        ]
        waiters = durable._waiters[loop]
        for _ in range(1000):  # bounded: each pass lets the new tasks reach their await
            if sum(len(f) for f in waiters.futures.values()) == 9:
                break
            await asyncio.sleep(0)  # sleep: one event-loop turn per pass of this bounded poll
        sizes = sorted(len(f) for f in waiters.futures.values())
        assert sizes == [1, 8], "the 8 later writes share one group, the first has its own"
        callbacks = [len(group._callbacks) for group in waiters.futures]
        assert callbacks == [1, 1], "one flusher -> loop wake per group, not per request"
        disk.gated = False
        disk.gate.set()
        tids = await asyncio.wait_for(asyncio.gather(first, *rest), 10)
    assert {tid for tid, _ in tids} <= set(tx.book.pending)
    assert len(tids) == 9
    assert not waiters.futures, "every group's waiters were resumed and dropped"
    tx.close()
    store.close()
