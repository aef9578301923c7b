"""Redis streams with an append-only file fsynced on every write (appendfsync always).

Owns: a throwaway redis-server on a free port with its own dir, and the workload: a send is
MULTI / SET business key / XADD / EXEC (Redis fsyncs the AOF before it answers); the consumer
reads with XREADGROUP and XACKs each batch. Must not: use the system's redis service.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from ._base import Absent, Running, free_port, terminate, version_of, wait_port, which

TITLE = "Redis streams"
GROUP = "bench"


def start(work: Path) -> Running:
    server = which("redis-server")
    if server is None:
        raise Absent("redis-server not found (apt-get install redis-server)")
    port = free_port()
    argv = [
        server,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(work),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
        "--daemonize",
        "no",
        "--logfile",
        str(work / "redis.log"),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop() -> None:
        terminate(proc)

    try:
        wait_port(port, proc, 30, "redis-server")
    except Absent:
        stop()
        raise
    return Running(
        endpoint=str(port),
        pid=proc.pid,
        version=" ".join(version_of([server, "--version"]).split()[:3]).replace("v=", ""),
        durability="appendonly yes, appendfsync always (AOF fsynced before replies)",
        stop=stop,
        notes=["consumer: XREADGROUP COUNT 100 + XACK per batch"],
    )


def _client(endpoint: str) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=int(endpoint))


def prepare(endpoint: str, name: str) -> None:
    c = _client(endpoint)
    c.xgroup_create(name, GROUP, id="0", mkstream=True)
    c.close()


class Producer:
    def __init__(self, endpoint: str, name: str) -> None:
        self.c = _client(endpoint)
        self.name = name

    def send(self, key: bytes, body: bytes) -> None:
        pipe = self.c.pipeline(transaction=True)  # MULTI ... EXEC
        pipe.set(b"order:" + key, body[:64])
        pipe.xadd(self.name, {b"b": body})
        pipe.execute()

    def close(self) -> None:
        self.c.close()


def consume(
    endpoint: str,
    name: str,
    ready: Callable[[], None],
    stop: Callable[[], bool],
    got: Callable[[bytes], None],
) -> None:
    c = _client(endpoint)
    ready()
    while not stop():
        # redis-py types replies loosely: a list of [stream, [(id, {field: value})]].
        reply: Any = c.xreadgroup(GROUP, "c1", {name: ">"}, count=100, block=100)
        for _stream, entries in reply or []:
            if entries:
                c.xack(name, GROUP, *[eid for eid, _ in entries])
                for _eid, fields in entries:
                    got(fields[b"b"])
    c.close()
