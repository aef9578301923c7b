"""The disk watermark (ADR 0003): writes are refused once the disk is fuller than it.

Owns: ``Watermark``, asked before each write (``check``: disk usage read every
``_CHECK_EVERY`` writes or ``_CHECK_MS``, whichever comes first, since a statvfs per write would
cost more than the write) and before each reservation of log or derived space (``check_growth``:
the bytes about to be added must stay below the watermark). Also takes the disk reserve back
(store/files/ballast.py) once there is room again. Must not: write anything but the reserve, or read
the clock (the writer passes its reading).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from txmq.errors import DiskFullError
from txmq.store.files.ballast import Ballast
from txmq.store.files.disk import Disk

_CHECK_EVERY: Final = 256
_CHECK_MS: Final = 1_000


class Watermark:
    """Not thread-safe on its own: ``check`` runs under the store's writer lock."""

    def __init__(self, disk: Disk, data_dir: Path, watermark: float, ballast: Ballast) -> None:
        self._disk = disk
        self._data_dir = data_dir
        self._watermark = watermark
        self._ballast = ballast
        self._writes = 0
        self._checked_ms = -_CHECK_MS
        self._used = 0.0

    def check(self, now: int) -> None:
        """Before a write at ``now`` (ms): refuse it if the disk was fuller than the watermark
        when last looked at.

        Raises:
            DiskFullError: disk usage is above the watermark.
        """
        self._writes += 1
        if self._writes % _CHECK_EVERY == 1 or now - self._checked_ms >= _CHECK_MS:
            self._used = self._disk.used_ratio(self._data_dir)
            self._checked_ms = now
            self._ballast.retake(self._disk.space(self._data_dir)[1])
        if self._used > self._watermark:
            raise DiskFullError.above_watermark(self._used, self._watermark)

    def check_growth(self, nbytes: int) -> None:
        """Refuse a reservation (log or derived data) that would pass the watermark.

        Raises:
            DiskFullError: ``nbytes`` more would pass it.
        """
        total, free = self._disk.space(self._data_dir)
        after = (total - free + nbytes) / total if total else 0.0
        if after > self._watermark:
            self._used = (total - free) / total
            raise DiskFullError.above_watermark(after, self._watermark, nbytes <= free)
