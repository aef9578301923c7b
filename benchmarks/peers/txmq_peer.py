# ruff: noqa: B023  -- closures run and finish inside the loop iteration that defines them
"""txmq with the official RocketMQ client: transactional send + commit (SYNC: fsync per ack)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from peers.common import Result, drive, e2e_ms, pct, stamped, tree_cpu_seconds

DURABILITY = "SYNC flush: every send and decision acknowledged after fdatasync (group commit)"


def run(threads_list: list[int], seconds: float) -> list[Result]:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
        TransactionChecker,
        TransactionResolution,
    )

    class Commit(TransactionChecker):  # type: ignore[misc]
        def check(self, message: object) -> TransactionResolution:
            return TransactionResolution.COMMIT

    results = []
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [sys.executable, "-m", "txmq.broker", "--data-dir", d, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        endpoints = proc.stdout.readline().strip().rsplit(" ", 1)[1]
        try:
            for n in threads_list:
                topic = f"cmp-{n}"
                cfg = ClientConfiguration(endpoints, Credentials())
                producer = Producer(cfg, (topic,), Commit())
                producer.startup()
                consumer = SimpleConsumer(cfg, f"cmp-g-{n}", {topic: FilterExpression()})
                consumer.startup()
                lat: list[float] = []
                done = threading.Event()

                def consume() -> None:
                    while not done.is_set():
                        for m in consumer.receive(32, 1) or []:
                            lat.append(e2e_ms(m.body))
                            consumer.ack(m)

                threading.Thread(target=consume, daemon=True).start()

                def op(k: int, i: int) -> None:
                    tx = producer.begin_transaction()
                    m = Message()
                    m.topic = topic
                    m.body = stamped(k, i)
                    producer.send(m, tx)
                    tx.commit()

                cpu0 = tree_cpu_seconds(proc.pid)
                rate, send_lat = drive(n, seconds, op)
                cpu = tree_cpu_seconds(proc.pid) - cpu0
                import time

                time.sleep(2)
                done.set()
                producer.shutdown()
                consumer.shutdown()
                total = rate * seconds
                results.append(
                    Result(
                        "txmq",
                        f"{n} producers",
                        rate,
                        pct(send_lat, 0.5),
                        pct(send_lat, 0.99),
                        1000 * cpu / max(total, 1),
                        pct(lat, 0.5),
                        pct(lat, 0.99),
                    )
                )
        finally:
            proc.terminate()
            proc.wait(30)
    return results


__all__ = ["DURABILITY", "Path", "run"]
