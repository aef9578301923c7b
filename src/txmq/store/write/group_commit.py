"""Group commit: the writers' lock, the flusher thread, durability waits and fencing.

Owns: ``GroupCommit``. Writers hold ``lock`` while they write a record (page cache only) and
hand its dispatch entry to ``add``, which returns the ``Group`` the write joined; in SYNC mode
they then release the lock and wait for that group (``wait_durable``), or ask it to call them
back (``Group.on_done``: how the broker's event loop waits without a thread). One flusher
thread takes everything written when it wakes, starts a new group, writes the log bytes the
writers staged (``take_writes``: one pwrite per staged write, off the writers' thread), runs
``sync_log`` (one fdatasync), ``publish``es the entries (to consume queues and the index), moves
``durable_end`` and sets the group done. So one fsync serves every writer that arrived
meanwhile, a record is visible to readers only once durable, and waking a group's writers never
goes through the writer lock. After a group of two or more writes the flusher lingers (up
to ``linger_us``, or until the group holds as many writes as were lately outstanding at once:
``_should_linger``) before taking the next, so concurrent writers share fewer fsyncs (issue
17); a lone writer never waits. In ASYNC mode
``add`` publishes at once and the flusher syncs once per ``flush_interval_ms`` (or when
``flush`` asks). An ``inline`` group commit (a
follower's store: one writer, which waits for each write) does not wake the flusher: its
writer runs the group in its own thread (``sync_here``), the same steps in the same order; the
flusher still serves ``flush`` and ``stop``. Groups run one at a time (``_running``).

A failed fsync (or any OSError in the flusher) fences: every waiting and later writer gets
StoreFencedError. The fsync is never retried (ADR 0001: after a failed fsync the kernel may
have dropped the dirty pages, so a retry can report success for data that is gone).
Must not: touch files itself, read the clock, or call back into a writer while holding ``lock``
except ``publish`` in ASYNC mode (lock order: ``_running``, writer lock, the dispatcher's lock).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from txmq import limits
from txmq.errors import StoreFencedError, invariant
from txmq.format.record import Entry
from txmq.model import AppendResult
from txmq.thread_names import name_os_thread

Publish = Callable[[Sequence[Entry], int], None]
log = logging.getLogger(__name__)


class Group:
    """The writes one fsync covers: done once that fsync returned or the store fenced (then
    ``GroupCommit.check_durable`` tells which).

    Why no ``threading.Event`` per group: the flusher makes one group per fsync and the broker
    waits through ``on_done`` callbacks, never in a thread; an Event (a Condition and two
    locks, built and notified in Python) cost the flusher ~10 us per group for nobody. A
    thread that does ``wait`` gets a lock of its own, released by ``set``."""

    __slots__ = ("_callbacks", "_done", "_lock", "_sleepers")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._callbacks: list[Callable[[], None]] = []
        self._sleepers: list[threading.Lock] = []

    def wait(self) -> None:
        with self._lock:
            if self._done:
                return
            sleeper = threading.Lock()
            sleeper.acquire()
            self._sleepers.append(sleeper)
        sleeper.acquire()  # released by ``set``

    def on_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once done: from the thread that completes the group, or now if it
        is done already. It must not block or take the writer lock (it may run under it)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback()

    def set(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
            sleepers, self._sleepers = self._sleepers, []
        for sleeper in sleepers:
            sleeper.release()
        for callback in callbacks:
            try:
                callback()
            except Exception:
                # Why not raise: the flusher calls this, and one waiter's broken callback must
                # not stop durability for every other writer.
                log.exception("a durability callback failed")


@dataclass(init=False)
class Pending:
    """A write ``Store.append_many_nowait`` made: durable once ``group`` is done (None: at once,
    in ASYNC mode or for an empty batch). Its own ``__init__``: a native class when compiled,
    built without a Python frame (txmq.model's docstring)."""

    results: Final[list[AppendResult]]
    end: Final[int]
    group: Final[Group | None]

    def __init__(self, results: list[AppendResult], end: int, group: Group | None) -> None:
        self.results, self.end, self.group = results, end, group


class GroupCommit:
    def __init__(
        self,
        *,
        sync_mode: bool,
        interval_ms: int,
        end: int,
        sync_log: Callable[[], None],
        publish: Publish,
        take_writes: Callable[[], Callable[[], None]],
        after_flush: Callable[[int], None],
        inline: bool = False,
        linger_us: int = 0,
    ) -> None:
        self.lock = threading.Lock()
        # Held by whoever runs a group (the flusher, or a writer in ``sync_here``), from taking
        # its writes until it is done: groups run one at a time, in order. Order: this, then
        # ``lock``.
        self._running = threading.Lock()
        # SYNC writes wait for a ``sync_here`` instead of waking the flusher (a follower, which
        # writes one shipment at a time and waits for it: no thread hop per round);
        # the flusher still runs ``flush`` and ``stop``.
        self.inline = inline
        # Writers wake only the flusher (``_wake_flusher``). SYNC writers wait, without the
        # writer lock, for the group their write belongs to (``_group``): the flusher sets it
        # once that group is durable, so waking them costs no trip through the writer lock.
        # ``_durable`` wakes ``flush()`` callers (``_flush_waiters`` of them).
        # Why no Condition for the flusher's sleep: a Condition's wait and notify run ~10
        # Python calls per group commit; the flusher sleeps on a lock of its own
        # instead (``_sleep``), released by whoever wakes it.
        self._wake = threading.Lock()
        self._wake.acquire()  # held except to wake the sleeping flusher
        self._sleeping = False  # the flusher sleeps on ``_wake`` (under ``lock``)
        # Group commit linger (``_linger``): after a group of two or more writes, the flusher
        # waits up to ``_linger_s`` before taking the next group, or until ``_linger_target``
        # writes joined it; only ``flush``, ``stop`` and ``fence`` cut it short otherwise.
        self._linger_s = linger_us / 1_000_000
        self._lingering = False
        self._linger_target = 0
        self._adds = 0  # writes (``add`` calls) in the group being filled
        self._last_adds = 0  # writes in the group taken last
        self._in_flight_adds = 0  # writes in the group being synced (0 once it is done)
        self._peak = self._peak_last = 0  # most writes outstanding at once (``_should_linger``)
        self.lingers = 0  # lingers the flusher began: lets tests see the policy
        self.linger_timeouts = 0  # lingers that ran their full length
        self._durable = threading.Condition(self.lock)
        self._flush_waiters = 0
        self._group = Group()
        self._in_flight: Group | None = None
        self._sync_mode = sync_mode
        self._interval_s = interval_ms / 1000.0
        self._sync_log = sync_log
        self._take_writes = take_writes
        self._publish = publish
        self._after_flush = after_flush
        self.written_end = end
        # Bytes below this are in the log file (page cache), durable or not: what a leader may
        # ship to its followers, whose fsync then runs alongside its own (replication.py).
        self.written_out_end = end
        # Told (on the flusher thread, outside the lock) once a group's bytes are written out,
        # before its fsync; set once, by a leader (store/replica/shipping.py ``Hold``).
        self.on_written: Callable[[], None] | None = None
        self.durable_end = end
        self.fenced = ""
        self._pending: list[Entry] = []
        self._flush_requested = False
        self._stopping = False
        self._halted = False
        self.syncs = 0  # fdatasync calls made by the flusher: lets tests see grouping
        self._flusher = threading.Thread(target=self._run, name="txmq-flusher", daemon=True)
        self._flusher.start()

    # --- Called by writers with ``lock`` held. -------------------------------------------------

    def check_writable(self) -> None:
        invariant(self.lock.locked(), "check_writable without the writer lock")
        if self.fenced:
            raise StoreFencedError(self.fenced)

    def add(self, entries: Sequence[Entry], end: int) -> Group | None:
        """Record that bytes up to ``end`` are written; ``entries`` await durability.

        Returns the group to pass to ``wait_durable`` (SYNC), or None (ASYNC: published now).
        """
        invariant(end >= self.written_end, "written end moves forward only")
        self.written_end = end
        if not self._sync_mode:
            self.written_out_end = end  # ASYNC writes go to the file at once (no staging)
            self._publish(entries, end)
            return None
        self._pending.extend(entries)
        adds = self._adds = self._adds + 1
        if adds + self._in_flight_adds > self._peak:
            self._peak = adds + self._in_flight_adds
        if not self.inline:
            self._wake_flusher()
        return self._group

    def replace_publish(self, publish: Publish) -> Publish:
        """Route publication through ``publish`` from now on; returns the one it replaces
        (store/replica/shipping.py holds records back until replicas have them)."""
        with self.lock:
            old, self._publish = self._publish, publish
        return old

    def fence(self, reason: str) -> None:
        if not self.fenced:
            self.fenced = reason
        self._group.set()
        if self._in_flight is not None:
            self._in_flight.set()
        self._durable.notify_all()
        self._wake_flusher(urgent=True)

    def _wake_flusher(self, *, urgent: bool = False) -> None:
        """Wake the flusher if it sleeps, or if it lingers and this is ``urgent`` (flush, stop,
        fence) or the group reached its linger target (``lock`` held, as when it went to
        sleep)."""
        if self._sleeping or (self._lingering and (urgent or self._adds >= self._linger_target)):
            self._sleeping = self._lingering = False
            self._wake.release()

    # --- Called without ``lock``. ----------------------------------------------------------------

    def wait_durable(self, group: Group | None, end: int) -> None:
        """SYNC: block until the fsync of ``group`` (from ``add``) covers ``end``.

        Raises:
            StoreFencedError: the fsync that would have covered ``end`` failed.
        """
        if group is not None:
            group.wait()  # Always set: by the flusher after the fsync, or by fence().
        self.check_durable(group, end)

    def check_durable(self, group: Group | None, end: int) -> None:
        """After ``group`` is done: raise StoreFencedError unless ``end`` is durable."""
        if group is not None and self.durable_end < end:
            raise StoreFencedError(self.fenced)

    def sync_here(self) -> None:
        """Run the group commit of everything written so far in this thread (pwrite,
        fdatasync, publish), as the flusher would; returns once it is done or fenced (then
        ``check_durable`` tells). For an ``inline`` group commit, whose SYNC writers call it
        instead of waking the flusher."""
        with self._running:
            work = self._take_now()
            if work is not None:
                self._complete(*work)

    def flush(self) -> None:
        """Block until everything written so far is durable (either mode)."""
        with self.lock:
            end = self.written_end
            self._flush_requested = True
            self._wake_flusher(urgent=True)
            self._flush_waiters += 1
            try:
                while self.durable_end < end and not self.fenced:
                    self._durable.wait()
            finally:
                self._flush_waiters -= 1
            if self.durable_end < end:
                raise StoreFencedError(self.fenced)

    def stop(self, *, flush: bool = True) -> None:
        """Stop the flusher; with ``flush`` it first syncs what was written (close), without it
        it just stops (a simulated crash: unsynced bytes stay unsynced)."""
        with self.lock:
            self._stopping = True
            self._halted = not flush
            self._wake_flusher(urgent=True)
        self._flusher.join(timeout=30)
        invariant(not self._flusher.is_alive(), "flusher did not stop")

    # --- The flusher thread. ---------------------------------------------------------------------

    def _wait(self) -> bool:
        """Wait until there is a group for the flusher to run; False to exit."""
        lingered = False
        with self.lock:
            while True:
                if self._halted or self.fenced:
                    return False
                has_work = self.written_end > self.durable_end
                urgent = self._flush_requested or self._stopping
                if has_work and ((self._sync_mode and not self.inline) or urgent):
                    if lingered or urgent or not self._should_linger():
                        return True
                    lingered = True
                    self._linger()
                    continue
                if self._stopping:
                    return False
                if self._sync_mode:
                    self._sleep(-1)
                elif not self._sleep(self._interval_s) and self.written_end > self.durable_end:
                    return True  # The interval passed: flush what ASYNC writers left behind.

    def _should_linger(self) -> bool:
        """Whether to linger before taking the group now waiting (``lock`` held; ``_wait`` asks
        only for a SYNC group nobody hurries, in a store that is not ``inline``): when
        configured, after a group of two or more writes (writers are concurrent, so more are
        likely on their way), and while the group holds fewer writes than were outstanding at
        once (written, not durable yet: the group in flight's and the one being filled) since
        the last group was taken (``_peak``) or in the window before (``_peak_last``): how many
        writers there are, as far as the flusher can tell. With no group in flight, only
        writers beyond those in the group can still come, so two writers in lockstep end the
        linger as soon as both wrote instead of waiting it out for writers that do not exist.
        A lone writer never lingers: each of its groups holds one write."""
        if self._linger_s <= 0.0 or self._last_adds < 2:
            return False
        seen = max(self._peak, self._peak_last)
        self._linger_target = min(seen, limits.GROUP_COMMIT_WRITERS_MAX)
        return self._adds < self._linger_target

    def _linger(self) -> None:
        """Group commit linger (``lock`` held; released while waiting), the delay databases
        call commit_delay: one fsync for more writes, at the cost of up to ``_linger_s`` more
        latency for the writes in the group. Writers wake it only once the group reached
        ``_linger_target`` (one wake per group, not per write)."""
        self.lingers += 1
        if not self._sleep(self._linger_s, linger=True):
            self.linger_timeouts += 1

    def _sleep(self, timeout_s: float, *, linger: bool = False) -> bool:
        """Release ``lock`` until a writer wakes the flusher (``_wake_flusher``) or ``timeout_s``
        passes (-1: no timeout), then take it again; whether it was woken. Every release of
        ``_wake`` is taken by the sleep it ended, so the next sleep blocks. ``linger``: a
        linger, which writers end only at the group's target (``_wake_flusher``)."""
        if linger:
            self._lingering = True
        else:
            self._sleeping = True
        self.lock.release()
        try:
            woken = self._wake.acquire(timeout=timeout_s)
        finally:
            self.lock.acquire()
        if not woken:
            if self._sleeping or self._lingering:
                self._sleeping = self._lingering = False  # nobody woke it
            else:
                # A writer woke it (under ``lock``) after the timeout: take that release.
                self._wake.acquire()
                woken = True
        return woken

    def _take_locked(self) -> tuple[int, list[Entry], Group, Callable[[], None]]:
        """Under ``lock`` and ``_running``: (target end, entries to publish, the group, the
        function that writes the log bytes writers staged). Writers that write after this join
        the next group."""
        self._flush_requested = False
        self._last_adds, self._adds = self._adds, 0
        # Outstanding now: the taken group's writes, until it is done (``_complete``).
        self._in_flight_adds = self._last_adds
        self._peak_last, self._peak = self._peak, self._last_adds
        batch, self._pending = self._pending, []
        group, self._group = self._group, Group()
        self._in_flight = group
        return self.written_end, batch, group, self._take_writes()

    def _take_now(self) -> tuple[int, list[Entry], Group, Callable[[], None]] | None:
        """Under ``_running``: take what is written and not durable yet; None if nothing is
        (a writer's ``sync_here`` ran it meanwhile) or the group commit stopped."""
        with self.lock:
            if self._halted or self.fenced or self.written_end <= self.durable_end:
                return None
            return self._take_locked()

    def _run(self) -> None:
        name_os_thread()  # "txmq-flusher" in /proc, perf and bench_broker's per-thread CPU
        while self._wait():
            with self._running:
                work = self._take_now()
                ok = work is None or self._complete(*work)
            if not ok:
                return

    def _complete(
        self, target: int, batch: list[Entry], group: Group, write_out: Callable[[], None]
    ) -> bool:
        """Write a taken group out, sync and publish it, set it done; False once fenced."""
        try:
            write_out()  # first: it releases what a roll waits for, whatever happens
            self.written_out_end = max(self.written_out_end, target)
            if self.on_written is not None:
                self.on_written()
            self._sync_log()
            self.syncs += 1
            if batch:
                self._publish(batch, target)
        except OSError as exc:
            with self.lock:
                self.fence(f"log flush failed: {exc}")
            return False
        with self.lock:
            self.durable_end = max(self.durable_end, target)
            self._in_flight = None
            self._in_flight_adds = 0
            if self._flush_waiters:
                self._durable.notify_all()
        group.set()
        try:
            self._after_flush(target)
        except OSError as exc:
            with self.lock:
                self.fence(f"checkpoint failed: {exc}")
            return False
        return True
