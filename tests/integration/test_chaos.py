"""Chaos: the broker is killed with SIGKILL while official-client producers run transactions and
a consumer consumes. After each restart and at the end:

- every transaction whose half message was acknowledged and whose local outcome was COMMIT is
  delivered at least once (committed by the producer, or by check-back when the commit call was
  lost or never made);
- nothing whose local outcome was ROLLBACK is ever delivered (rolled back by the producer, by
  check-back, or never decided);
- every acknowledged transaction left undecided on purpose with outcome COMMIT was resolved
  through the producer's TransactionChecker.

Method: like an application, each producer thread fixes the local outcome of a transaction
before sending its half message, and the checker answers from that record (unknown bodies:
ROLLBACK, which is what an application whose local transaction never ran would say). Sends or
decisions that fail during a kill promise nothing beyond that rule. Producers and the consumer
are recreated after each restart, because rocketmq-python-client 5.1.2 rebuilds its Telemetry
stream (the check-back channel) only when its 5-minute settings sync fails. Seeded: replay with
TXMQ_SEED. Bounded: a few kills by default; the slow variant kills more often with more
producers."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import pytest
from rocketmq import FilterExpression, Producer, SimpleConsumer
from rocketmq import TransactionResolution as R

from tests.integration.clients import Checker, config, message
from tests.integration.conftest import BrokerProcess

TOPIC = "chaos-tx"


@dataclass
class Ledger:
    """What the application knows, shared by all threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    outcome: dict[bytes, R] = field(default_factory=dict)  # fixed before the half is sent
    acked: set[bytes] = field(default_factory=set)  # the half message was acknowledged
    left_undecided: dict[bytes, str] = field(default_factory=dict)  # body -> message id
    received: list[bytes] = field(default_factory=list)

    def answer(self, m: object) -> R:
        with self.lock:
            return self.outcome.get(m.body, R.ROLLBACK)  # type: ignore[attr-defined]

    def must_deliver(self) -> set[bytes]:
        with self.lock:
            return {b for b in self.acked if self.outcome[b] == R.COMMIT}

    def must_not_deliver(self) -> set[bytes]:
        with self.lock:
            return {b for b, o in self.outcome.items() if o == R.ROLLBACK}


def _produce(
    p: Producer, ledger: Ledger, rng: random.Random, name: str, stop: threading.Event
) -> None:
    n = 0
    while not stop.is_set() and n < 10_000:
        n += 1
        body = f"{name}-{n}".encode()
        choice = rng.choice(["commit", "rollback", "undecided"])
        outcome = (
            R.ROLLBACK if choice == "rollback" else rng.choice([R.COMMIT, R.COMMIT, R.ROLLBACK])
        )
        with ledger.lock:
            ledger.outcome[body] = outcome
        try:
            tx = p.begin_transaction()
            receipt = p.send(message(TOPIC, body), tx)
        except Exception:  # the half may or may not be stored: check-back answers by outcome
            time.sleep(0.05)  # sleep: back-off of a workload while the broker is down
            continue
        with ledger.lock:
            ledger.acked.add(body)
            if choice == "undecided":
                ledger.left_undecided[body] = receipt.message_id
        try:
            if choice == "commit":
                tx.commit() if outcome == R.COMMIT else tx.rollback()
            elif choice == "rollback":
                tx.rollback()
        except Exception:  # a lost decision is recovered by check-back
            time.sleep(0.05)  # sleep: back-off of a workload while the broker is down


def _consume(endpoints: str, ledger: Ledger, stop: threading.Event) -> None:
    c = SimpleConsumer(
        config(endpoints), "g-chaos-tx", {TOPIC: FilterExpression()}, await_duration=1
    )
    try:
        c.startup()
        while not stop.is_set():
            try:
                for m in c.receive(32, 10) or []:
                    with ledger.lock:
                        ledger.received.append(m.body)
                    c.ack(m)
            except Exception:  # the broker is down: try again until told to stop
                time.sleep(0.2)  # sleep: back-off of a workload while the broker is down
    except Exception:  # a consumer that cannot start during a kill consumes in a later epoch
        return
    finally:
        c.shutdown()


def _epoch(
    broker: BrokerProcess,
    ledger: Ledger,
    checker: Checker,
    rng: random.Random,
    *,
    epoch: int,
    producers: int,
    run_s: float,
    kill: bool,
) -> None:
    """Run producers and a consumer for ``run_s``, then SIGKILL and restart the broker when
    ``kill``. With ``producers`` = 0 one idle producer only answers check-backs."""
    stop = threading.Event()
    instances = [
        Producer(config(broker.endpoints), (TOPIC,), checker) for _ in range(max(1, producers))
    ]
    for p in instances:
        p.startup()
    threads = [
        threading.Thread(
            target=_produce,
            args=(p, ledger, random.Random(rng.random()), f"e{epoch}p{k}", stop),
        )
        for k, p in enumerate(instances[:producers])
    ]
    threads.append(threading.Thread(target=_consume, args=(broker.endpoints, ledger, stop)))
    for t in threads:
        t.start()
    time.sleep(run_s)  # sleep: the chaos runs for a duration; the kill lands mid-traffic
    if kill:
        broker.kill9()  # while transactions are in flight
    stop.set()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a client thread hung"
    if kill:
        broker.start()
    for p in instances:
        p.shutdown()


def _chaos(broker: BrokerProcess, seed: int, kills: int, producers: int) -> None:
    rng = random.Random(seed)
    ledger = Ledger()
    checker = Checker(ledger.answer)
    for epoch in range(kills):
        run_s = rng.uniform(1.5, 3.0)
        _epoch(
            broker, ledger, checker, rng, epoch=epoch, producers=producers, run_s=run_s, kill=True
        )
    # Calm epochs: an idle live producer answers check-backs while the consumer drains.
    want = ledger.must_deliver()
    deadline = time.monotonic() + 90
    while not want <= set(ledger.received) and time.monotonic() < deadline:
        _epoch(broker, ledger, checker, rng, epoch=-1, producers=0, run_s=3.0, kill=False)
    got = set(ledger.received)
    lost = sorted(want - got)
    leaked = sorted(got & ledger.must_not_deliver())
    assert not lost, (
        f"seed {seed}: lost {len(lost)} committed, e.g. {lost[:5]}\n{broker.log_tail()}"
    )
    assert not leaked, f"seed {seed}: delivered rolled-back {leaked[:5]}"
    with ledger.lock:
        resolved = {
            b: mid for b, mid in ledger.left_undecided.items() if ledger.outcome[b] == R.COMMIT
        }
    unasked = [b for b, mid in resolved.items() if mid not in checker.calls]
    assert not unasked, f"seed {seed}: undecided but never checked: {unasked[:5]}"
    print(
        f"chaos seed {seed}: {len(ledger.outcome)} transactions, {len(want)} to deliver, "
        f"{len(resolved)} resolved by check-back, {len(ledger.received)} receipts"
    )
    assert len(want) > 0 and resolved, "the run made committed and undecided transactions"


def test_chaos_sigkill_during_transactions(broker: BrokerProcess, seed: int) -> None:
    _chaos(broker, seed, kills=2, producers=2)


@pytest.mark.slow
def test_chaos_sigkill_during_transactions_long(broker: BrokerProcess, seed: int) -> None:
    _chaos(broker, seed, kills=8, producers=4)
