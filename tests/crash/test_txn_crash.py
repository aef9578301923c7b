"""Kill -9 crash test of transactions (after sled's crash tests).

Method: a child process (txn_child.py) runs transactional producers and a check-back loop over
a real store; it reports each prepare, decision and check only after the call returned. The
parent SIGKILLs it at a seeded random moment (between prepare and decision, during a commit
append, during check recording or a snapshot write: all of them run all the time), then reopens
the store and the transactions and checks them against two models: the child's acknowledgments
and an independent scan of the log. Rounds accumulate in one data directory, so each round also
recovers what earlier kills left; the parent alternates a clean close (snapshot) with a crash-like
abandon of its own view. Replay with TXMQ_SEED.

After every kill: each committed message is delivered exactly once and only if its producer
meant to commit it; an acknowledged decision is final; nothing rolled back or undecided is
delivered; no transaction has two decision records; the pending set equals the log's undecided
half messages and contains every acknowledged, undecided prepare; check counts are at least
what was acknowledged and equal the log's; dead transactions are exactly the max-checks ones.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.crash.txn_child import QUEUES, open_transactions
from txmq import limits
from txmq.model import (
    HALF_TOPIC,
    OP_TOPIC,
    PROP_CHECK_NUMBER,
    PROP_DECISION_SOURCE,
    PROP_TRANSACTION_ID,
    Record,
    TxnFlag,
)

CHILD = Path(__file__).with_name("txn_child.py")


@dataclass
class Model:
    """What the children acknowledged, accumulated over rounds."""

    intents: dict[str, str] = field(default_factory=dict)  # p lines: tid -> intent
    mids: dict[str, str] = field(default_factory=dict)
    prepared: set[str] = field(default_factory=set)  # P lines
    decided: dict[str, str] = field(default_factory=dict)  # D lines: tid -> outcome
    checks: dict[str, int] = field(default_factory=dict)  # K lines: highest check acked
    # Calls in flight when a kill landed, summed over rounds (printed: evidence of coverage).
    killed_in_prepare: int = 0
    killed_in_decision: int = 0

    def read(self, lines: list[str]) -> None:
        began = {(ln.split()[0], ln.split()[1]) for ln in lines if ln[0] in "pd"}
        ended = {("p" if ln[0] == "P" else "d", ln.split()[1]) for ln in lines if ln[0] in "PDE"}
        self.killed_in_prepare += sum(1 for k, _ in began - ended if k == "p")
        self.killed_in_decision += sum(1 for k, _ in began - ended if k == "d")
        for line in lines:
            parts = line.split()
            if parts[0] == "p":
                self.intents[parts[1]], self.mids[parts[1]] = parts[3], parts[2]
            elif parts[0] == "P":
                self.prepared.add(parts[1])
            elif parts[0] == "D":
                assert self.decided.get(parts[1], parts[2]) == parts[2], "a decision changed"
                self.decided[parts[1]] = parts[2]
            elif parts[0] == "K":
                self.checks[parts[1]] = max(self.checks.get(parts[1], 0), int(parts[2]))


def _round(data_dir: Path, round_no: int, rng: random.Random) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    threads = rng.choice([1, 4, 8])
    proc = subprocess.Popen(
        [
            sys.executable,
            str(CHILD),
            str(data_dir),
            str(round_no),
            str(rng.randrange(1 << 30)),
            str(threads),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    # Short kills catch prepares in flight; longer ones let checks, backoff and max checks run.
    time.sleep(rng.choice([rng.uniform(0.0, 0.05), rng.uniform(0.05, 0.6)]))  # sleep: kill point
    proc.send_signal(signal.SIGKILL)
    # Read through the same buffered stream as readline() above: communicate() would read the
    # raw pipe and lose whatever readline() had already buffered past "ready".
    out = proc.stdout.read()
    proc.wait(timeout=30)
    # A torn last line (the kill landed mid-write) is not an acknowledgment.
    complete = out.split("\n")[:-1]
    return [line for line in complete if line and line[0] in "pPdDKE"]


@dataclass
class LogView:
    """The transactions as an independent scan of the log sees them."""

    halves: dict[str, Record] = field(default_factory=dict)
    decisions: dict[str, list[Record]] = field(default_factory=lambda: defaultdict(list))
    checks: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def scan(cls, records: list[Record]) -> LogView:
        view = cls()
        for rec in records:
            tid = rec.properties.get(PROP_TRANSACTION_ID, "")
            if rec.topic == HALF_TOPIC:
                assert tid not in view.halves, "one half message per transaction"
                view.halves[tid] = rec
            elif rec.flag in (TxnFlag.COMMIT, TxnFlag.ROLLBACK):
                assert rec.prepared_offset == view.halves[tid].physical_offset
                view.decisions[tid].append(rec)
            elif rec.topic == OP_TOPIC and PROP_CHECK_NUMBER in rec.properties:
                view.checks[tid].add(int(rec.properties[PROP_CHECK_NUMBER]))
        return view


def _verify(data_dir: Path, model: Model, close_cleanly: bool) -> None:
    store, tx = open_transactions(data_dir)
    try:
        view = LogView.scan(store.scan(0, 10**7))
        delivered: list[Record] = []
        for q in range(QUEUES):
            offset, end = store.queue_offsets("crash", q)
            for _ in range(1 + end // limits.READ_BATCH_MAX):  # reads are capped per call
                if offset >= end:
                    break
                read = store.read_queue("crash", q, offset, limits.READ_BATCH_MAX)
                delivered.extend(read.records)
                offset = read.next_offset
        by_tid = defaultdict(list)
        for rec in delivered:
            by_tid[rec.properties[PROP_TRANSACTION_ID]].append(rec)
        _check_delivery(model, view, by_tid)
        _check_book(model, view, tx.pending(), {t.transaction_id for t in tx.dead()})
        for tid, outcome in model.decided.items():
            assert tx.show(tid)["outcome"] == outcome, "an acknowledged decision is final"
    finally:
        if close_cleanly:
            tx.close()
        store.close()


def _check_delivery(model: Model, view: LogView, by_tid: dict[str, list[Record]]) -> None:
    for tid, recs in view.decisions.items():
        assert len(recs) == 1, f"{tid}: {len(recs)} decision records"
    for tid, recs in by_tid.items():
        assert len(recs) == 1, f"{tid} delivered {len(recs)} times"
        assert model.intents[tid] == "committed", f"{tid} delivered against its intent"
        assert recs[0].message_id == model.mids[tid]
        assert recs[0].body == (model.mids[tid] * 10).encode()[: len(recs[0].body)]
    for tid, outcome in model.decided.items():
        assert len(by_tid.get(tid, [])) == (1 if outcome == "committed" else 0), (
            tid,
            outcome,
            view.halves.get(tid),
            view.decisions.get(tid),
        )
    for tid, recs in view.decisions.items():
        assert (recs[0].flag is TxnFlag.COMMIT) == (tid in by_tid)


def _check_book(model: Model, view: LogView, pending: list[object], dead: set[str]) -> None:
    pending_ids = {t.transaction_id for t in pending}  # type: ignore[attr-defined]
    undecided = {tid for tid in view.halves if not view.decisions.get(tid)}
    assert pending_ids == undecided, "the pending set is the log's undecided halves"
    assert pending_ids <= set(model.intents), "nothing pending that no child prepared"
    assert not pending_ids & set(model.decided), "nothing acknowledged-decided is pending"
    missing = model.prepared - set(view.halves)
    assert not missing, f"acknowledged prepares lost: {sorted(missing)[:3]}"
    max_checked = {
        tid
        for tid, recs in view.decisions.items()
        if recs[0].properties.get(PROP_DECISION_SOURCE) == "max_checks"
    }
    assert dead == max_checked, "dead transactions are exactly the max-checks rollbacks"
    for txn in pending:
        tid = txn.transaction_id  # type: ignore[attr-defined]
        logged = max(view.checks.get(tid, {0}))
        assert txn.checks == logged, f"{tid}: {txn.checks} checks, log has {logged}"  # type: ignore[attr-defined]
        assert logged >= model.checks.get(tid, 0), "an acknowledged check was lost"


def _run(tmp_path: Path, seed: int, rounds: int, budget_s: float) -> None:
    rng = random.Random(seed)
    model = Model()
    started = time.monotonic()
    done = 0
    for r in range(rounds):
        if time.monotonic() - started > budget_s:
            break
        model.read(_round(tmp_path, r, rng))
        _verify(tmp_path, model, close_cleanly=rng.random() < 0.5)
        done += 1
    print(
        f"{done} rounds, {len(model.prepared)} prepares, {len(model.decided)} decisions, "
        f"{sum(model.checks.values())} checks acknowledged, "
        f"killed during {model.killed_in_prepare} prepares, {model.killed_in_decision} decisions"
    )
    assert model.prepared and model.decided, "the child acknowledged nothing"
    assert done >= min(rounds, 5)


def test_kill9_transactions(tmp_path: Path, seed: int) -> None:
    # A 12 s budget (at least 5 rounds); test_kill9_transactions_long (slow) runs 600 s.
    _run(tmp_path, seed, rounds=40, budget_s=12.0)


@pytest.mark.slow
@pytest.mark.timeout(900)  # its 600 s budget, then the last verification: past the 300 s default
def test_kill9_transactions_long(tmp_path: Path, seed: int) -> None:
    _run(tmp_path, seed, rounds=400, budget_s=600.0)
