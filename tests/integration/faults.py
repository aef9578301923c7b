"""Fault helpers for the replication tests: what a process cost, and (below) cuttable links.

``cpu_seconds(pid)``: user + system CPU time a live process used so far, from /proc/PID/stat
(every thread counted), to bound what a replica spends while it cannot reach etcd.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid``, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command name (which may hold spaces, inside parentheses): state is
    # field 3, utime field 14 and stime field 15 (proc(5)).
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def line_count(path: Path) -> int:
    """Lines in the file at ``path`` (0 when it does not exist)."""
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(1 for _ in f)
