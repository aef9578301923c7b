"""Allocator tuning for processes that move megabytes per request (broker, Spark readers).

Owns: ``keep_large_blocks`` and ``give_back_free`` (glibc malloc) and ``collect_less_often``
(CPython's cyclic garbage collector, explained at its threshold below).

By default glibc serves each block over 128 KiB (or a threshold it raises as blocks are freed)
with its own mmap and gives it back with munmap, and trims the heap top when freeing, so every 1
MiB gRPC message or record pull costs a map, ~256 page faults and an unmap. On the VMs this
project is measured on a page fault costs microseconds: a sync gRPC client spent 2.4 ms of CPU
per 1 MiB reply that way, 0.7 ms with large blocks kept on the heap (benchmarks/README:
"malloc"). Keeping them trades memory for CPU: freed blocks stay in the process, up to
_TRIM_BYTES above what is in use.

Must not: fail a process where it does not apply (another libc, another OS): it does nothing
there and says so by returning False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys
from typing import Final

from txmq import limits

# mallopt parameter numbers from glibc's <malloc.h>.
_M_TRIM_THRESHOLD: Final = -1
_M_TOP_PAD: Final = -2
_M_MMAP_THRESHOLD: Final = -3
# Blocks below this come from the heap: glibc's largest allowed threshold on 64-bit, above a
# record pull (PULL_BYTES_MAX) and the default 4 MiB body, so those never take the mmap path.
_MMAP_THRESHOLD_BYTES: Final = 32 * limits.MiB
# The heap top is returned to the OS only when this much is free there; and grown this much
# ahead, so a burst of large blocks does not move the break once per block.
_TRIM_BYTES: Final = 256 * limits.MiB
_TOP_PAD_BYTES: Final = 64 * limits.MiB

_done = False


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc's malloc functions, or None where they do not apply (another OS or libc). Looked
    up once: ``find_library`` runs ``ldconfig`` in a subprocess."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 (looked up to tell glibc from musl, which has no mallopt)
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None  # not glibc: nothing to tune
    return libc


def keep_large_blocks() -> bool:
    """Tune this process's malloc once; True if it took effect (glibc on Linux)."""
    global _done
    if _done:
        return True
    libc = _libc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES),
            (_M_TRIM_THRESHOLD, _TRIM_BYTES),
            (_M_TOP_PAD, _TOP_PAD_BYTES),
        )
    )
    _done = ok
    return ok


def give_back_free() -> bool:
    """Return every arena's free pages to the OS now (glibc ``malloc_trim(0)``); True if done.

    Why: with ``keep_large_blocks`` each thread's arena keeps up to _TRIM_BYTES freed above
    what it uses. A one-off burst in a thread that then idles (the broker's open and recovery,
    run off the event loop) would keep its reads' buffers for the life of the process: 12
    never-read receive streams peaked at 505-525 MiB that way instead of ~340 (the bound
    tests/integration/test_receive_memory.py holds). Call it after such a burst, not per request.
    """
    libc = _libc()
    if libc is None:
        return False
    trim = libc.malloc_trim
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    trim(0)  # 1 if memory was released, 0 if there was none: both fine
    return True


# Container allocations between two young-generation collections (CPython's default is 700).
# A 1,024-record pull or a batch of 32 received messages allocates thousands of short-lived
# tuples, lists and memoryviews, none of them in a reference cycle, so the default collects
# several times per RPC for nothing: on the record pull that was ~5 % of the broker's CPU
# (py-spy), and this threshold with the freeze below cut the broker's CPU per pulled record
# from ~2.2 to ~1.8 us. Older generations keep CPython's ratios.
_YOUNG_THRESHOLD: Final = 100_000


def collect_less_often() -> None:
    """Move everything alive now (a broker's recovered indexes, imported modules) out of the
    collector's view for good, and collect young objects less often. Call once, after startup.

    Why freeze: those objects live as long as the process, and a full collection would
    otherwise walk all of them again (a recovered transaction book can hold millions).
    """
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(_YOUNG_THRESHOLD, older, oldest)
