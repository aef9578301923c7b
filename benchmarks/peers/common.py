"""The shared workload and measurements for the comparison benchmark."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

BODY = b"x" * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_cpu_seconds(root_pid: int) -> float:
    """utime+stime of a process and all its descendants, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid = int(rest[1])
        cpu = (int(rest[11]) + int(rest[12])) / tick
        stats[int(name)] = (ppid, cpu)
        children.setdefault(ppid, []).append(int(name))
    total, stack = 0.0, [root_pid]
    while stack:
        pid = stack.pop()
        total += stats.get(pid, (0, 0.0))[1]
        stack.extend(children.get(pid, []))
    return total


@dataclass
class Result:
    system: str
    scenario: str
    rate: float
    p50_ms: float
    p99_ms: float
    cpu_s_per_1k: float
    e2e_p50_ms: float = 0.0
    e2e_p99_ms: float = 0.0
    notes: list[str] = field(default_factory=list)


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def drive(
    threads: int, seconds: float, op: Callable[[int, int], None], max_ops: int = 200_000
) -> tuple[float, list[float]]:
    lat: list[list[float]] = [[] for _ in range(threads)]
    stop = time.perf_counter() + seconds

    def worker(k: int) -> None:
        i = 0
        while time.perf_counter() < stop and i < max_ops // threads:
            t = time.perf_counter()
            op(k, i)
            lat[k].append((time.perf_counter() - t) * 1000)
            i += 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    flat = [x for chunk in lat for x in chunk]
    return len(flat) / (time.perf_counter() - t0), flat


def stamped(k: int, i: int) -> bytes:
    """A 1 KiB body carrying the wall time of its commit, for end-to-end latency."""
    return f"{time.time():.6f}|{k}|{i}|".encode().ljust(len(BODY), b".")


def e2e_ms(body: bytes) -> float:
    return (time.time() - float(body.split(b"|", 1)[0])) * 1000
