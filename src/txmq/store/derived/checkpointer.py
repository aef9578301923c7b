"""Taking checkpoints: when the consume queues and the index are synced and recorded.

Owns: ``Checkpointer``, which syncs the dispatcher's files and saves the checkpoint file
(store/derived/checkpoint.py) after every ``CHECKPOINT_EVERY_BYTES`` the group commit made durable
(``after_flush``), before retention deletes segments, after the scrubber rebuilt the index
(``retake``) and at close. A checkpoint bounds recovery's work after a crash; one skipped on a
full disk costs only recovery time, since the previous one still vouches for a prefix of the
log (``checkpoint_if_room``). Must not: checkpoint a fenced store (it would fsync again after a
failed fsync, ADR 0001), write records or read the clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from txmq import limits
from txmq.errors import StoreFencedError, is_disk_full
from txmq.store.derived import checkpoint as cpfile
from txmq.store.derived.dispatch import Dispatcher
from txmq.store.files.disk import Disk

CHECKPOINT_EVERY_BYTES: Final = 64 * limits.MiB
logger = logging.getLogger(__name__)


class Checkpointer:
    """Thread-safe. ``fenced`` tells why the store refuses writes ("" while it accepts them);
    ``sync_log`` is given when the dispatcher runs ahead of the log's fsync (ASYNC mode)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        disk: Disk,
        data_dir: Path,
        *,
        fenced: Callable[[], str],
        sync_log: Callable[[], None] | None,
    ) -> None:
        self._dispatcher = dispatcher
        self._disk = disk
        self._data_dir = data_dir
        self._fenced = fenced
        self._sync_log = sync_log
        self._lock = threading.Lock()
        self._checkpointed = -1

    @property
    def checkpointed(self) -> int:
        """The log offset the last checkpoint vouches for (-1 before the first)."""
        return self._checkpointed

    def after_flush(self, durable_end: int) -> None:
        """The group commit made the log durable up to ``durable_end`` (on its thread)."""
        if durable_end - self._checkpointed >= CHECKPOINT_EVERY_BYTES:
            self.checkpoint_if_room()

    def checkpoint_if_room(self) -> None:
        """Checkpoint, unless the disk is full (logged: the previous checkpoint still vouches
        for a prefix of the log, so skipping one costs only recovery time)."""
        try:
            self.checkpoint()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            logger.warning("disk full: checkpoint not updated (%s)", exc)

    def checkpoint(self) -> None:
        """Sync queues and index and record how far they are consistent with the log.

        Raises:
            StoreFencedError: the store is fenced; nothing is synced or written.
        """
        with self._lock:
            fenced = self._fenced()
            if fenced:
                raise StoreFencedError(fenced)
            snap = self._dispatcher.snapshot()
            if snap.log_offset <= self._checkpointed:
                return
            if self._sync_log is not None:
                self._sync_log()  # ASYNC dispatches before the fsync; the checkpoint may not.
            self._dispatcher.sync()
            cpfile.save(self._disk, self._data_dir, snap)
            self._checkpointed = snap.log_offset

    def retake(self) -> None:
        """Checkpoint even if no record was appended since the last one: the derived files
        changed under it (a rebuilt index, whose entries the checkpoint must count, since
        recovery truncates to them)."""
        with self._lock:
            self._checkpointed = -1
        self.checkpoint_if_room()
