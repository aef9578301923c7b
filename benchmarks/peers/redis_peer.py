# ruff: noqa: B023  -- closures run and finish inside the loop iteration that defines them
"""Redis streams: MULTI/EXEC of a business key + XADD, appendonly yes, appendfsync always."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time

from peers.common import Result, drive, e2e_ms, free_port, pct, stamped, tree_cpu_seconds

DURABILITY = "appendonly yes, appendfsync always: EXEC returns after the AOF fsync"


def available() -> str:
    return "" if shutil.which("redis-server") else "redis-server not installed"


def run(threads_list: list[int], seconds: float) -> list[Result]:
    import redis

    d = tempfile.mkdtemp(prefix="txmq-redis-")
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            d,
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        results = []
        for n in threads_list:
            stream = f"orders-{n}"
            clients = [redis.Redis(port=port) for _ in range(n)]
            lat: list[float] = []
            done = threading.Event()

            def consume(stream: str = stream) -> None:
                c = redis.Redis(port=port)
                last = "0-0"
                while not done.is_set():
                    for _s, entries in c.xread({stream: last}, count=1000, block=100) or []:
                        for eid, fields in entries:
                            lat.append(e2e_ms(fields[b"body"]))
                            last = eid

            threading.Thread(target=consume, daemon=True).start()

            def op(k: int, i: int, stream: str = stream) -> None:
                body = stamped(k, i)
                p = clients[k].pipeline(transaction=True)
                p.set(f"order:{stream}:{k}:{i}", body)
                p.xadd(stream, {"body": body})
                p.execute()

            cpu0 = tree_cpu_seconds(proc.pid)
            rate, send_lat = drive(n, seconds, op)
            cpu = tree_cpu_seconds(proc.pid) - cpu0
            time.sleep(1)
            done.set()
            results.append(
                Result(
                    "redis streams",
                    f"{n} producers",
                    rate,
                    pct(send_lat, 0.5),
                    pct(send_lat, 0.99),
                    1000 * cpu / max(rate * seconds, 1),
                    pct(lat, 0.5),
                    pct(lat, 0.99),
                )
            )
        return results
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(d, ignore_errors=True)
