"""OS names for the threads a process starts, so per-thread CPU can be told apart from outside.

Owns: ``name_os_thread``. CPython 3.11 names a ``threading.Thread`` for Python only; the kernel
keeps the process's name ("python") for every thread, so /proc/PID/task/*/comm, top -H, perf
and bench_broker's per-thread CPU split cannot say which thread is the flusher and which an
executor worker. Setting the name costs one prctl per thread start.
Must not: fail where it does not apply (not Linux, no libc): it does nothing there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from typing import Final

_PR_SET_NAME: Final = 15  # <linux/prctl.h>
_TASK_COMM_LEN: Final = 16  # the kernel's name buffer, its NUL included

_prctl = None
if sys.platform.startswith("linux"):
    _libc_name = ctypes.util.find_library("c")
    if _libc_name is not None:
        _prctl = ctypes.CDLL(_libc_name, use_errno=True).prctl


def name_os_thread(name: str | None = None) -> bool:
    """Give the calling thread the OS name ``name`` (default: its ``threading`` name), cut to
    15 bytes; True if it took effect."""
    if _prctl is None:
        return False
    raw = (name or threading.current_thread().name).encode(errors="replace")[: _TASK_COMM_LEN - 1]
    return bool(_prctl(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0) == 0)
