"""Reserving disk space for derived files before the log write that causes them (ADR 0003).

Owns: ``reserve``, one fallocate (KEEP_SIZE) of a file span, checked first against the store's
watermark, trying a step ahead and falling back to only what is needed when that does not fit.
Must not: write data, or decide what to reserve (the consume queue and the index do).
"""

from __future__ import annotations

from collections.abc import Callable

from txmq.errors import DiskFullError, is_disk_full
from txmq.store.files.disk import FileHandle


def reserve(
    handle: FileHandle,
    start: int,
    need_end: int,
    ahead_end: int,
    before_growth: Callable[[int], None],
) -> int:
    """Reserve bytes ``[start, ahead_end)`` of ``handle``, or ``[start, need_end)`` when the
    longer span does not fit; returns the end reserved (``ahead_end`` as well where the file
    system cannot reserve: nothing is then promised, a full disk meets the derived write).

    Raises:
        DiskFullError: not even ``need_end`` fits (or it would pass the watermark).
        OSError: a failure other than a full disk.
    """
    for end in (ahead_end, need_end) if ahead_end > need_end else (need_end,):
        try:
            before_growth(end - start)
            handle.allocate(start, end - start)
            return end
        except DiskFullError:
            if end == need_end:
                raise
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            if end == need_end:
                raise DiskFullError(f"cannot reserve space for derived data: {exc}") from exc
    raise AssertionError("unreachable: the last span either returns or raises")
