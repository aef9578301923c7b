"""Group commit: the writers' lock, the flusher thread, durability waits and fencing.

Owns: ``GroupCommit``. Writers hold ``lock`` while they write a record (page cache only), hand
its dispatch entry to ``add`` and, in SYNC mode, wait in ``wait_durable``. One flusher thread
takes everything written when it wakes, runs ``sync_log`` (one fdatasync), then ``publish``es
the entries (to consume queues and the index) and only then moves ``durable_end`` and wakes
every writer it covered. So one fsync serves every writer that arrived meanwhile, and a record
is visible to readers only once durable. In ASYNC mode ``add`` publishes at once and the flusher
syncs once per ``flush_interval_ms`` (or when ``flush`` asks).

A failed fsync (or any OSError in the flusher) fences: every waiting and later writer gets
StoreFencedError. The fsync is never retried (ADR 0001: after a failed fsync the kernel may
have dropped the dirty pages, so a retry can report success for data that is gone).
Must not: touch files itself, read the clock, or call back into a writer while holding ``lock``
except ``publish`` in ASYNC mode (lock order: writer lock, then the dispatcher's lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from txmq.errors import StoreFencedError, invariant
from txmq.store.record import Entry

Publish = Callable[[Sequence[Entry], int], None]


class GroupCommit:
    def __init__(
        self,
        *,
        sync_mode: bool,
        interval_ms: int,
        end: int,
        sync_log: Callable[[], None],
        publish: Publish,
        after_flush: Callable[[int], None],
    ) -> None:
        self.lock = threading.Lock()
        # Two conditions on one lock: writers wake only the flusher (``_work``), the flusher
        # wakes only the writers (``_durable``), so an append does not wake every waiting writer.
        self._work = threading.Condition(self.lock)
        self._durable = threading.Condition(self.lock)
        self._sync_mode = sync_mode
        self._interval_s = interval_ms / 1000.0
        self._sync_log = sync_log
        self._publish = publish
        self._after_flush = after_flush
        self.written_end = end
        self.durable_end = end
        self.fenced = ""
        self._pending: list[Entry] = []
        self._flush_requested = False
        self._stopping = False
        self._halted = False
        self.syncs = 0  # fdatasync calls made by the flusher: lets tests see grouping
        self._thread = threading.Thread(target=self._run, name="txmq-flusher", daemon=True)
        self._thread.start()

    # --- Called by writers with ``lock`` held. -------------------------------------------------

    def check_writable(self) -> None:
        invariant(self.lock.locked(), "check_writable without the writer lock")
        if self.fenced:
            raise StoreFencedError(self.fenced)

    def add(self, entries: Sequence[Entry], end: int) -> None:
        """Record that bytes up to ``end`` are written; ``entries`` await durability."""
        invariant(end >= self.written_end, "written end moves forward only")
        self.written_end = end
        if self._sync_mode:
            self._pending.extend(entries)
            self._work.notify()
        else:
            self._publish(entries, end)

    def wait_durable(self, end: int) -> None:
        """SYNC: block until an fsync covers ``end``. ASYNC: return at once.

        Raises:
            StoreFencedError: the fsync that would have covered ``end`` failed.
        """
        if not self._sync_mode:
            return
        while self.durable_end < end and not self.fenced:
            self._durable.wait()
        if self.durable_end < end:
            raise StoreFencedError(self.fenced)

    def fence(self, reason: str) -> None:
        if not self.fenced:
            self.fenced = reason
        self._durable.notify_all()
        self._work.notify_all()

    # --- Called without ``lock``. ----------------------------------------------------------------

    def flush(self) -> None:
        """Block until everything written so far is durable (either mode)."""
        with self.lock:
            end = self.written_end
            self._flush_requested = True
            self._work.notify()
            while self.durable_end < end and not self.fenced:
                self._durable.wait()
            if self.durable_end < end:
                raise StoreFencedError(self.fenced)

    def stop(self, *, flush: bool = True) -> None:
        """Stop the flusher; with ``flush`` it first syncs what was written (close), without it
        it just stops (a simulated crash: unsynced bytes stay unsynced)."""
        with self.lock:
            self._stopping = True
            self._halted = not flush
            self._work.notify()
        self._thread.join(timeout=30)
        invariant(not self._thread.is_alive(), "flusher did not stop")

    # --- The flusher thread. ---------------------------------------------------------------------

    def _take(self) -> tuple[int, list[Entry]] | None:
        """Wait for work; return (target end, entries to publish) or None to exit."""
        with self.lock:
            while True:
                if self._halted or self.fenced:
                    return None
                has_work = self.written_end > self.durable_end
                if has_work and (self._sync_mode or self._flush_requested or self._stopping):
                    break
                if self._stopping:
                    return None
                if self._sync_mode:
                    self._work.wait()
                elif not self._work.wait(self._interval_s) and self.written_end > self.durable_end:
                    break  # The interval passed: flush what ASYNC writers left in the page cache.
            self._flush_requested = False
            batch, self._pending = self._pending, []
            return self.written_end, batch

    def _run(self) -> None:
        while True:
            work = self._take()
            if work is None:
                return
            target, batch = work
            try:
                self._sync_log()
                self.syncs += 1
                if batch:
                    self._publish(batch, target)
            except OSError as exc:
                with self.lock:
                    self.fence(f"log flush failed: {exc}")
                return
            with self.lock:
                self.durable_end = max(self.durable_end, target)
                self._durable.notify_all()
            try:
                self._after_flush(target)
            except OSError as exc:
                with self.lock:
                    self.fence(f"checkpoint failed: {exc}")
                return
