"""txmq driven by the official RocketMQ Python client (rocketmq-python-client).

Owns: a throwaway broker (``python -m txmq.broker --data-dir D --port 0 --flush-mode sync``)
and the workload: a send is begin_transaction / send (half message) / commit, each durable
before the broker answers; the consumer is a SimpleConsumer that receives batches and acks each
message. Must not: import broker internals (it measures the product as a user runs it).

Producer threads of one process share one client (the client is thread-safe and multiplexes
over one gRPC channel, which is how an application would use it); see SHARED_CLIENT.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._base import Absent, Running, terminate

TITLE = "txmq"
SHARED_CLIENT = os.environ.get("TXMQ_BENCH_CLIENT", "shared") == "shared"
# Diagnostic knob only (how much of the cost is fsync): the comparison runs with "sync".
FLUSH_MODE = os.environ.get("TXMQ_BENCH_FLUSH_MODE", "sync")
DURABILITY = {
    "sync": "flush-mode sync: half message and commit each fsynced before the reply (group commit)",
    "async": "flush-mode async: DIAGNOSTIC ONLY, acks before fsync (not comparable)",
}
_clients: dict[tuple[str, str], list[Any]] = {}  # (endpoint, topic) -> [producer, users]
_lock = threading.Lock()


def start(work: Path) -> Running:
    try:
        import rocketmq  # noqa: F401
    except ImportError as e:
        raise Absent(f"rocketmq-python-client not installed ({e})") from e
    argv = [
        sys.executable,
        "-m",
        "txmq.broker",
        "--data-dir",
        str(work / "data"),
        "--port",
        "0",
        "--auto-create-topics",
        "--flush-mode",
        FLUSH_MODE,
    ]
    with open(work / "broker.log", "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        terminate(proc)
        tail = (work / "broker.log").read_text(errors="replace").strip()[-300:]
        raise Absent(f"txmq broker did not start: {line.strip() or 'no output'}; log: {tail}")
    endpoint = line.strip().rsplit(" ", 1)[1]

    def stop() -> None:
        terminate(proc)

    from importlib.metadata import version

    return Running(
        endpoint=endpoint,
        pid=proc.pid,
        version=f"txmq {version('txmq')}, rocketmq-python-client "
        f"{version('rocketmq-python-client')}",
        durability=DURABILITY[FLUSH_MODE],
        stop=stop,
        notes=[
            "one client per producer process shared by its threads"
            if SHARED_CLIENT
            else "one client per producer thread",
            "SimpleConsumer receive(32) + ack_async per message (acks do not block receiving,"
            " as with the other consumers)",
        ],
    )


def prepare(endpoint: str, name: str) -> None:
    pass  # the broker auto-creates topics on first use


def _new_producer(endpoint: str, topic: str) -> Any:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        Producer,
        TransactionChecker,
        TransactionResolution,
    )

    class Commit(TransactionChecker):  # type: ignore[misc]
        # Every transaction this benchmark opens is committed; a check-back means a lost reply.
        def check(self, message: object) -> TransactionResolution:
            return TransactionResolution.COMMIT

    p = Producer(ClientConfiguration(endpoint, Credentials()), (topic,), Commit())
    p.startup()
    return p


class Producer:
    def __init__(self, endpoint: str, name: str) -> None:
        from rocketmq import Message

        self._message = Message
        self.key = (endpoint, name)
        self.topic = name
        with _lock:
            entry = _clients.get(self.key) if SHARED_CLIENT else None
            if entry is None:
                entry = [_new_producer(endpoint, name), 0]
                if SHARED_CLIENT:
                    _clients[self.key] = entry
            entry[1] += 1
            self.entry = entry
        self.client = entry[0]

    def send(self, key: bytes, body: bytes) -> None:
        tx = self.client.begin_transaction()
        m = self._message()
        m.topic = self.topic
        m.body = body
        self.client.send(m, tx)
        tx.commit()

    def close(self) -> None:
        with _lock:
            self.entry[1] -= 1
            last = self.entry[1] == 0
            if last and SHARED_CLIENT:
                del _clients[self.key]
        if last:
            self.client.shutdown()


def consume(
    endpoint: str,
    name: str,
    ready: Callable[[], None],
    stop: Callable[[], bool],
    got: Callable[[bytes], None],
) -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    cfg = ClientConfiguration(endpoint, Credentials())
    # A short long-poll keeps shutdown prompt; it does not delay delivery of new messages.
    c = SimpleConsumer(cfg, f"{name}-g", {name: FilterExpression()}, await_duration=1)
    c.startup()
    ready()
    while not stop():
        for m in c.receive(32, 15) or []:
            c.ack_async(m)
            got(m.body)
    c.shutdown()
