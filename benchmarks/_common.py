"""Shared benchmark helpers: percentiles, the raw fsync floor, a bounded thread-pool driver."""

from __future__ import annotations

import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def fsync_floor(seconds: float = 2.0, size: int = 1024) -> tuple[float, float, float]:
    """Raw single-writer write + fdatasync of ``size`` bytes: (ops/s, p50 ms, p99 ms)."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("TXMQ_BENCH_DIR")) as d:
        fd = os.open(os.path.join(d, "floor"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        data = b"x" * size
        lat: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end and len(lat) < 200_000:
            t = time.perf_counter()
            os.write(fd, data)
            os.fdatasync(fd)
            lat.append((time.perf_counter() - t) * 1000)
        os.close(fd)
    return len(lat) / seconds, pct(lat, 0.5), pct(lat, 0.99)


def run_threads(
    n: int, seconds: float, op: Callable[[int, int], None], max_ops: int = 500_000
) -> tuple[float, list[float]]:
    """Run ``op(thread, i)`` from n threads for ``seconds`` (bounded by max_ops)."""
    lat: list[list[float]] = [[] for _ in range(n)]
    stop = time.perf_counter() + seconds
    per_thread = max_ops // n

    def worker(k: int) -> None:
        i = 0
        while time.perf_counter() < stop and i < per_thread:
            t = time.perf_counter()
            op(k, i)
            lat[k].append((time.perf_counter() - t) * 1000)
            i += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    flat = [x for chunk in lat for x in chunk]
    return len(flat) / elapsed, flat


def machine() -> str:
    return f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}"
