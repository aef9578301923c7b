"""One measured phase against one running system: N producers spread over worker processes,
one consumer process, server and client CPU from /proc, end-to-end latency by message key.

Owns: process orchestration and the raw figures of a phase. Must not: know any peer's API
beyond the module contract in _base.py, or print (compare.py reports).

Clock: time.monotonic() is CLOCK_MONOTONIC, one clock for every process on the machine, so a
producer's commit time and the consumer's receipt time can be subtracted across processes.
A message's key leads its 1 KiB body (``key|....``) so the consumer can report it.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._base import tree_cpu_seconds

BODY_SIZE = 1024
DRAIN_SECONDS = 15.0
SETUP_SECONDS = 120.0


@dataclass
class PhaseResult:
    producers: int
    sent: int
    errors: int
    first_error: str
    seconds: float
    rate: float
    send_p50_ms: float
    send_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    undelivered: int
    server_cpu_s: float
    client_cpu_s: float
    machine_busy_cores: float  # everything on the machine, others' work included


def machine_ticks() -> tuple[int, int]:
    """(all ticks, idle + iowait ticks) summed over CPUs, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def body_for(key: bytes) -> bytes:
    return (key + b"|").ljust(BODY_SIZE, b".")


def _producer_main(
    mod_name: str,
    endpoint: str,
    name: str,
    first: int,
    count: int,
    cap: int,
    seconds: float,
    ready: Any,
    go: Any,
    release: Any,
    out: Any,
) -> None:
    mod = importlib.import_module(mod_name)
    producers = [mod.Producer(endpoint, name) for _ in range(count)]
    records: list[list[tuple[bytes, float, float]]] = [[] for _ in range(count)]
    errors: list[str] = []
    ready.put(os.getpid())
    if not go.wait(SETUP_SECONDS):
        return
    deadline = time.monotonic() + seconds

    def loop(k: int) -> None:
        p, mine = producers[k], records[k]
        i = 0
        while i < cap and time.monotonic() < deadline:
            key = f"p{first + k}-{i}".encode()
            i += 1
            t = time.monotonic()
            try:
                p.send(key, body_for(key))
            except Exception as e:  # counted and reported: a failed send is a result here
                errors.append(f"{type(e).__name__}: {e}")
                time.sleep(0.01)
                continue
            mine.append((key, t, time.monotonic()))

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(([r for chunk in records for r in chunk], errors))
    release.wait(SETUP_SECONDS)
    for p in producers:
        p.close()


def _consumer_main(
    mod_name: str, endpoint: str, name: str, ready: Any, stop: Any, counter: Any, out: Any
) -> None:
    mod = importlib.import_module(mod_name)
    receipts: list[tuple[bytes, float]] = []

    def got(body: bytes) -> None:
        receipts.append((body.split(b"|", 1)[0], time.monotonic()))
        counter.value += 1

    mod.consume(endpoint, name, ready.set, stop.is_set, got)
    out.put(receipts)


def _split(producers: int, procs: int) -> list[tuple[int, int]]:
    n = max(1, min(procs, producers))
    sizes = [producers // n + (1 if i < producers % n else 0) for i in range(n)]
    starts = [sum(sizes[:i]) for i in range(n)]
    return list(zip(starts, sizes, strict=True))


def run_phase(
    mod_name: str,
    endpoint: str,
    server_pid: int,
    name: str,
    producers: int,
    procs: int,
    seconds: float,
    messages: int,
) -> PhaseResult:
    importlib.import_module(mod_name).prepare(endpoint, name)
    ctx = mp.get_context("spawn")  # no fork: gRPC and event loops do not survive fork
    c_ready, c_stop, counter = ctx.Event(), ctx.Event(), ctx.RawValue("q", 0)
    c_out: Any = ctx.Queue()
    consumer = ctx.Process(
        target=_consumer_main, args=(mod_name, endpoint, name, c_ready, c_stop, counter, c_out)
    )
    consumer.start()
    if not c_ready.wait(SETUP_SECONDS):
        consumer.terminate()
        raise RuntimeError(f"{mod_name} consumer did not start")
    ready: Any = ctx.Queue()
    out: Any = ctx.Queue()
    go, release = ctx.Event(), ctx.Event()
    cap = max(1, -(-messages // producers))
    workers = [
        ctx.Process(
            target=_producer_main,
            args=(mod_name, endpoint, name, first, count, cap, seconds, ready, go, release, out),
        )
        for first, count in _split(producers, procs)
    ]
    try:
        for w in workers:
            w.start()
        for _ in workers:
            ready.get(timeout=SETUP_SECONDS)
        client_pids = [consumer.pid or 0, *[w.pid or 0 for w in workers]]
        cpu0, ccpu0 = tree_cpu_seconds(server_pid), tree_cpu_seconds(*client_pids)
        m0 = machine_ticks()
        t0 = time.monotonic()
        go.set()
        outs = [out.get(timeout=seconds + SETUP_SECONDS) for _ in workers]
        cpu1, ccpu1 = tree_cpu_seconds(server_pid), tree_cpu_seconds(*client_pids)
        m1 = machine_ticks()
        records = [r for recs, _ in outs for r in recs]
        errors = [e for _, errs in outs for e in errs]
        end = max((r[2] for r in records), default=t0 + 1e-9)
        drain_until = time.monotonic() + DRAIN_SECONDS
        while counter.value < len(records) and time.monotonic() < drain_until:
            time.sleep(0.05)
        c_stop.set()
        receipts: list[tuple[bytes, float]] = c_out.get(timeout=SETUP_SECONDS)
    finally:
        go.set()
        release.set()
        c_stop.set()
        for p in [*workers, consumer]:
            p.join(60)
            if p.is_alive():
                p.terminate()
    busy = (1 - (m1[1] - m0[1]) / max(1, m1[0] - m0[0])) * (os.cpu_count() or 1)
    res = _summarise(producers, records, errors, receipts, end - t0, cpu1 - cpu0, ccpu1 - ccpu0)
    res.machine_busy_cores = busy
    return res


def _summarise(
    producers: int,
    records: list[tuple[bytes, float, float]],
    errors: list[str],
    receipts: list[tuple[bytes, float]],
    elapsed: float,
    server_cpu: float,
    client_cpu: float,
) -> PhaseResult:
    received: dict[bytes, float] = {}
    for key, at in receipts:
        received.setdefault(key, at)
    e2e = [(received[k] - done) * 1000 for k, _, done in records if k in received]
    send = [(done - start) * 1000 for _, start, done in records]
    return PhaseResult(
        producers=producers,
        sent=len(records),
        errors=len(errors),
        first_error=errors[0] if errors else "",
        seconds=elapsed,
        rate=len(records) / elapsed if elapsed > 0 else 0.0,
        send_p50_ms=pct(send, 0.5),
        send_p99_ms=pct(send, 0.99),
        e2e_p50_ms=pct(e2e, 0.5),
        e2e_p99_ms=pct(e2e, 0.99),
        undelivered=len(records) - len(e2e),
        server_cpu_s=server_cpu,
        client_cpu_s=client_cpu,
        machine_busy_cores=0.0,
    )
