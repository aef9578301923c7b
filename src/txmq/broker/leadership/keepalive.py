"""Renew the etcd lease a leader holds, from a thread of its own (ADR 0005, "keepalives").

Owns: the keepalive's timer and its etcd call (``LeaseRenewal``, one thread per replica). Why
not the event loop: a loop runs its timers only between the callbacks it has ready, so a loop
held up (a long callback, a backlog under CPU load) delays a keepalive by as long, and the lease
lasts only ``REPLICA_LEASE_TTL_MS - REPLICA_LEASE_SAFETY_MS`` by the leader's clock after one was
sent: the leader stopped acknowledging and another replica took over while the process was
alive. This thread waits on its own timer and calls etcd itself; it needs only the GIL.
Fencing is the election's and unchanged: an answer extends the lease only from the time the
keepalive was *sent*, and only the lease still held (``Election.kept_alive``); every call into
the election, here and on the loop, holds ``lock``. A paused process pauses this thread too: on
resuming, its lease has lapsed by its clock whichever thread looks first.
Must not: decide anything (election.py), or touch the loop's objects but through ``lost``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

from txmq import limits
from txmq.broker.leadership.backoff import Backoff, Repeats
from txmq.broker.leadership.election import Election
from txmq.coordination.etcd import Etcd
from txmq.errors import CoordinationError, invariant
from txmq.thread_names import name_os_thread

log = logging.getLogger(__name__)
# After a keepalive that failed (etcd did not answer in ETCD_CALL_TIMEOUT_MS, or refused), the
# next try comes after a backoff delay from RETRY_FIRST_MS up to RETRY_MAX_MS (jittered): several
# fit in what the lease has left, and a dead etcd is not called in a loop.
RETRY_FIRST_MS: Final = 200
RETRY_MAX_MS: Final = 500
# While the loop stalls, how often the thread looks again.
STALLED_LOOK_MS: Final = 200
# The thread renews only while the event loop still runs: a leader whose loop made no election
# step for longer than this (a hung callback, a deadlock: it serves no one) lets its lease lapse,
# so another replica leads, as if it had died. A loop held up for less keeps its lease.
LOOP_STALL_MAX_MS: Final = 10_000


class LeaseRenewal:
    """Keep the lease of ``election`` alive while it leads."""

    def __init__(
        self,
        etcd: Etcd,
        election: Election,
        lock: threading.Lock,
        clock: Callable[[], int],
        lost: Callable[[], None],
        stepped: Callable[[], int],
        stall_max_ms: int = LOOP_STALL_MAX_MS,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self.etcd = etcd
        self.election = election
        self.lock = lock  # held around every call into ``election``
        self.clock = clock
        self.lost = lost  # called (from this thread) when etcd says the lease is gone
        self.stepped = stepped  # when the loop last made an election step (``clock`` time)
        self.stall_max_ms = stall_max_ms
        self.stalled = False  # renewals withheld because the loop stalled (said once)
        self.renewals = 0  # keepalives answered with a TTL
        self.backoff = Backoff(
            rand or election.backoff.rand, first_ms=RETRY_FIRST_MS, max_ms=RETRY_MAX_MS
        )
        self.repeats = Repeats(log, "lease keepalive", clock)
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        invariant(self._thread is None, "one keepalive thread at a time")
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="txmq-keepalive", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look now (this replica began to lead: its first renewal is due a period after its
        lease was granted)."""
        self._wake.set()

    def stop(self) -> None:
        """Stop after the call in flight, if any (at most ETCD_CALL_TIMEOUT_MS); ``join``."""
        self._stopping = True
        self._wake.set()

    def join(self) -> None:
        """Wait for the stopped thread to end (at most a call's deadline and a second)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(limits.ETCD_CALL_TIMEOUT_MS / 1000 + 1)

    def _run(self) -> None:
        name_os_thread()
        while not self._stopping:
            self._wake.clear()  # before looking: a wake while we look makes the wait return
            self._wake.wait(self.renew_once() / 1000)

    def renew_once(self) -> int:
        """Send the keepalive if one is due; the milliseconds until the next look."""
        with self.lock:
            now = self.clock()
            lease = self.election.renewal_due(now)
            if lease is None:
                leads = self.election.leads(now)
                return self._until_due(now) if leads else limits.REPLICA_KEEPALIVE_PERIOD_MS
            if self._loop_stalled(now):
                return STALLED_LOOK_MS
        sent = self.clock()  # before the request leaves: the lease runs from no later
        try:
            ttl = self.etcd.keepalive(lease)
        except CoordinationError as exc:
            self.repeats.failed(str(exc))  # the lease's own deadline bounds the retries
            return self.backoff.next_ms()
        self.repeats.succeeded()
        self.backoff.reset()
        with self.lock:
            self.election.kept_alive(sent, ttl, lease)
            now = self.clock()
            due = self._until_due(now)
        if ttl <= 0:
            log.warning("etcd no longer has lease %x: this replica stops leading", lease)
            self.lost()
            return limits.REPLICA_KEEPALIVE_PERIOD_MS
        self.renewals += 1
        return due

    def _loop_stalled(self, now: int) -> bool:
        """The loop made no election step for over ``stall_max_ms`` (said once per stall)."""
        idle = now - self.stepped()
        stalled = idle > self.stall_max_ms
        if stalled and not self.stalled:
            log.error(
                "the event loop made no step for %d ms (over %d): this replica's lease is no"
                " longer renewed, so another replica leads", idle, self.stall_max_ms,
            )  # fmt: skip
        self.stalled = stalled
        return stalled

    def _until_due(self, now: int) -> int:
        return max(1, self.election.renewal_at() - now)
