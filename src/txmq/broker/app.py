"""Running a broker: the grpc.aio server, background loops, clean shutdown.

Owns: binding the port, the executor for blocking store calls, the loops (check-back, delay
release, saving consumer positions, transaction snapshots, retention, client expiry), the
Prometheus endpoint, and SIGINT/SIGTERM handling. Must not: contain protocol or storage logic.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq import limits
from txmq.broker.checkback import CheckBack
from txmq.broker.config import BrokerConfig
from txmq.broker.parts import Parts, wall_ms
from txmq.broker.service import Service

log = logging.getLogger("txmq.broker")


async def _every(period_s: float, step: Callable[[], Awaitable[object]], name: str) -> None:
    """Run ``step`` forever; a failing step is logged with its traceback and retried next
    period, because one bad tick must not stop check-back for every later transaction."""
    while True:
        await asyncio.sleep(period_s)
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background loop %s failed; retrying next period", name)


class Loops:
    """The broker's background work, one method per loop; each runs blocking parts in the
    executor through ``service.run``."""

    def __init__(self, parts: Parts, service: Service) -> None:
        self.parts = parts
        self.service = service
        self.check_back = CheckBack(parts.tx, parts.clients, parts.metrics, service.run).tick

    async def release_delayed(self) -> None:
        touched = await self.service.run(self.parts.delay.release_due, wall_ms())
        for topic, _qid in touched:
            self.service.notify_appended(topic)

    async def housekeeping(self) -> None:
        p = self.parts
        for dead in await self.service.run(p.deliveries.sweep_dead, wall_ms()):
            await self.service.run(p.dead_letter, dead)
        await self.service.run(p.deliveries.save)
        p.clients.expire(wall_ms())

    async def slow_housekeeping(self) -> None:
        p = self.parts
        await self.service.run(p.tx.snapshot)
        await self.service.run(
            lambda: p.store.delete_expired_segments(keep_from_offset=p.tx.oldest_pending_offset)
        )


async def serve(
    config: BrokerConfig,
    *,
    ready: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run one broker until ``stop`` is set (or SIGINT/SIGTERM when run from ``run``)."""
    executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="txmq-io")
    parts = Parts(config)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_SIZE_MAX),
            ("grpc.max_send_message_length", limits.GRPC_MESSAGE_SIZE_MAX),
        ]
    )
    port = server.add_insecure_port(f"{config.host}:{config.port}")
    if port == 0:
        parts.close()
        raise OSError(f"cannot bind {config.host}:{config.port}")
    service = Service(parts, executor, (config.advertised_host or config.host, port))
    sg.add_MessagingServiceServicer_to_server(service, server)
    from txmq.broker.admin import add_admin

    add_admin(server, parts, service)
    if config.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(config.metrics_port, addr=config.host, registry=parts.metrics.registry)
    await server.start()
    loops = Loops(parts, service)
    tick = config.tick_ms / 1000.0
    tasks = [
        asyncio.create_task(_every(tick, loops.check_back, "check-back")),
        asyncio.create_task(_every(tick, loops.release_delayed, "delay")),
        asyncio.create_task(_every(1.0, loops.housekeeping, "housekeeping")),
        asyncio.create_task(_every(30.0, loops.slow_housekeeping, "snapshot+retention")),
    ]
    if ready is not None:
        ready(port)
    stop = stop or asyncio.Event()
    try:
        await stop.wait()
    finally:
        for t in tasks:
            t.cancel()
        await server.stop(grace=1.0)
        executor.shutdown(wait=True)
        parts.close()
        log.info("broker stopped cleanly")


def run(config: BrokerConfig) -> None:
    """Run a broker in the foreground; SIGINT/SIGTERM shut it down cleanly."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(port: int) -> None:
            print(f"txmq broker listening on {config.host}:{port}", flush=True)
            sys.stdout.flush()

        await serve(config, ready=ready, stop=stop)

    asyncio.run(main())
