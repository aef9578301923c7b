"""Client-id bindings on a real broker: a user flooding the broker with new client ids cannot take
over a client id bound to another user (an admin's, live or not), and is refused new ones once
all of its own, up to its bound, have an open Telemetry stream.

Method: a broker with an ACL file (plaintext: the bindings do not depend on TLS); raw v2 calls
over grpc.aio with the headers an official client sends (signature, x-mq-client-id); Telemetry
streams opened with a Settings command and held open, as an official client holds them. The
flood is the one the issue measured: 10,050 new client ids, past the 10,000 the broker keeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.conftest import BrokerProcess
from tests.integration.security_fixtures import ACL, SECRETS, write_acl
from txmq import limits
from txmq.protocol.auth import signed_metadata

FLOOD = limits.AUTH_CLIENT_IDS_MAX + 50
IN_FLIGHT = 64
CALL_TIMEOUT_S = 30.0


def headers(who: str, client_id: str) -> list[tuple[str, str]]:
    signed = signed_metadata(who, SECRETS[who], time.time_ns() // 1_000_000)
    return [*signed, ("x-mq-client-id", client_id)]


async def heartbeat(stub: Any, who: str, client_id: str) -> Any:
    """A consumer's heartbeat (inventory-app names its group ``inventory``)."""
    group = pb.Resource(name="inventory" if who == "inventory-app" else "")
    request = sv.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=group)
    reply = await stub.Heartbeat(request, metadata=headers(who, client_id), timeout=CALL_TIMEOUT_S)
    return reply.status


class Stream:
    """One Telemetry stream, opened with a producer's Settings and held open until ``close``."""

    def __init__(self, stub: Any, who: str, client_id: str) -> None:
        self.closed = asyncio.Event()
        settings = pb.Settings(client_type=pb.PRODUCER, request_timeout=_duration(10))
        self.first = sv.TelemetryCommand(settings=settings)
        self.call = stub.Telemetry(self._commands(), metadata=headers(who, client_id))

    async def _commands(self) -> AsyncIterator[Any]:
        yield self.first
        await self.closed.wait()

    async def opened(self) -> Any:
        """The status of the broker's first answer (its Settings, or a refusal)."""
        reply = await asyncio.wait_for(self.call.read(), CALL_TIMEOUT_S)
        assert reply is not grpc.aio.EOF, "the broker answers a Telemetry stream's Settings"
        return reply.status

    async def close(self) -> None:
        self.closed.set()
        self.call.cancel()


def _duration(seconds: int) -> Any:
    from google.protobuf.duration_pb2 import Duration

    return Duration(seconds=seconds)


async def bounded(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run ``calls`` with at most IN_FLIGHT at once; their results in order."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(c) for c in calls))


@pytest.fixture
def acl_broker(tmp_path: Path) -> Any:
    acl = write_acl(tmp_path / "acl.toml", ACL)
    b = BrokerProcess(tmp_path / "broker", ["--acl-file", str(acl)])
    b.start()
    yield b
    b.stop()


def test_a_flood_of_client_ids_takes_over_no_other_users_client_id(
    acl_broker: BrokerProcess,
) -> None:
    async def scenario() -> float:
        async with grpc.aio.insecure_channel(acl_broker.endpoints) as channel:
            stub = sg.MessagingServiceStub(channel)
            admin_producer = Stream(stub, "ops", "admin-producer")  # live: a stream open
            assert (await admin_producer.opened()).code == pb.OK
            assert (await heartbeat(stub, "ops", "admin-cli")).code == pb.OK  # no stream
            for taken in ("admin-producer", "admin-cli"):  # refused before the flood
                status = await heartbeat(stub, "inventory-app", taken)
                assert status.code == pb.UNAUTHORIZED, status
            started = time.monotonic()
            flood = [
                lambda n=n: heartbeat(stub, "inventory-app", f"flood-{n}") for n in range(FLOOD)
            ]
            statuses = await bounded(flood)  # type: ignore[arg-type]
            took = time.monotonic() - started
            # Every one answered: the flooder goes through its own idle ids.
            assert {s.code for s in statuses} == {pb.OK}
            for taken in ("admin-producer", "admin-cli"):  # still the admin's
                status = await heartbeat(stub, "inventory-app", taken)
                assert status.code == pb.UNAUTHORIZED, status
                assert f"client id '{taken}' is in use by another access key" in status.message
            assert (await heartbeat(stub, "ops", "admin-cli")).code == pb.OK
            # Nor is the session table full: another user's new client is served.
            assert (await heartbeat(stub, "orders-app", "orders-new")).code == pb.OK
            await admin_producer.close()
            return took

    took = asyncio.run(scenario())
    print(f"{FLOOD} new client ids in {took:.1f} s")


def test_a_user_whose_client_ids_all_have_streams_is_refused_a_new_one(
    acl_broker: BrokerProcess,
) -> None:
    bound = limits.AUTH_CLIENT_IDS_PER_KEY_MAX

    async def scenario() -> None:
        async with grpc.aio.insecure_channel(acl_broker.endpoints) as channel:
            stub = sg.MessagingServiceStub(channel)
            streams = [Stream(stub, "inventory-app", f"live-{n}") for n in range(bound)]
            opened = await bounded([s.opened for s in streams])
            assert {s.code for s in opened} == {pb.OK}
            try:
                status = await heartbeat(stub, "inventory-app", "one-more")
                assert status.code == pb.TOO_MANY_REQUESTS, status
                assert (
                    f"access key 'inventory-app' already has {bound} client ids in use, each "
                    "with an open Telemetry stream: new client id 'one-more' refused"
                ) in status.message
                refused = Stream(stub, "inventory-app", "one-more-stream")
                assert (await refused.opened()).code == pb.TOO_MANY_REQUESTS
                await refused.close()
                # Its bound ids are still served; other users are not affected.
                assert (await heartbeat(stub, "inventory-app", "live-7")).code == pb.OK
                assert (await heartbeat(stub, "ops", "ops-new")).code == pb.OK
                # One stream closes: its id gives way to a new one.
                await streams[0].close()
                deadline = time.monotonic() + CALL_TIMEOUT_S
                while (await heartbeat(stub, "inventory-app", "one-more")).code != pb.OK:
                    assert time.monotonic() < deadline, "a closed stream's id never gave way"
                    await asyncio.sleep(0.1)  # sleep: poll interval of this bounded wait
            finally:
                for s in streams:
                    await s.close()

    asyncio.run(scenario())
