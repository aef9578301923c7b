"""The space reserve: a file of reserved blocks the store gives back when the disk is full.

Owns: ``store/reserve`` (STORE_RESERVE_BYTES reserved with fallocate KEEP_SIZE, so its size
reads 0). Why (ADR 0003): the log and the derived data an append causes refuse writes that
do not fit before writing anything, but recovery's derived writes, derived writes where the
file system cannot reserve, the checkpoint, the abort marker and the broker's small state files
must still be writable on a full disk, or a broker could neither stop cleanly nor start
again. The store deletes the reserve when a derived write meets ENOSPC (then retries it
once), at close (so the last saves fit) and at open (so recovery fits), and takes it again
after open when there is room. Must not: hold data, or be counted on for more than one retry.
"""

from __future__ import annotations

import logging
from pathlib import Path

from txmq import limits
from txmq.errors import is_disk_full
from txmq.store.files.disk import Disk

RESERVE_NAME = "reserve"
log = logging.getLogger(__name__)


class Ballast:
    def __init__(self, disk: Disk, data_dir: Path) -> None:
        self.disk = disk
        self.path = data_dir / RESERVE_NAME

    def release(self, *, disk_full: bool = False) -> bool:
        """Delete the reserve; True if there was one to free. Logged at INFO at a routine open
        or close, at WARNING when a full disk made the store give it back (``disk_full``)."""
        if not self.disk.exists(self.path):
            return False
        self.disk.remove(self.path)
        level = logging.WARNING if disk_full else logging.INFO
        log.log(level, "released the %d-byte disk reserve", limits.STORE_RESERVE_BYTES)
        return True

    def retake(self, free_bytes: int) -> None:
        """After a release while running: take the reserve again once the disk has room for
        it twice over (so taking it does not itself fill the disk). Quiet when it cannot."""
        if free_bytes < 2 * limits.STORE_RESERVE_BYTES or self.disk.exists(self.path):
            return
        if self.take():
            log.warning(
                "disk space is back: the %d-byte reserve is held again", limits.STORE_RESERVE_BYTES
            )

    def take(self) -> bool:
        """Reserve the space again; False (logged) when the disk has no room for it.

        Raises:
            OSError: a failure other than a full disk.
        """
        handle = self.disk.open(self.path)
        try:
            handle.allocate(0, limits.STORE_RESERVE_BYTES)
            return True
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            log.warning("no room for the disk reserve (%s); running without it", exc)
            self.disk.remove(self.path)
            return False
        finally:
            handle.close()
