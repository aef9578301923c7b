"""A follower's side of Replica.Follow: one stream from its leader.

Owns: ``follow`` (open the stream with a fetch, write each pushed group of records as it
arrives, and send the durable end up the stream as soon as the flusher synced it) and the
coalescing ack sender. The leader pushes the next group while this one's fsync runs, so a SYNC
write waits for one push, one fsync and one ack, not for the round of fetches before it.
Every frame must carry the epoch the stream was opened in, from the leader etcd still names
(else the stream ends); a divergent tail is cut as after a fetch (Follower._diverged).
Must not: decide leadership (leadership.py) or ship (replication.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc

from txmq import limits
from txmq.broker.election import Leader
from txmq.broker.replication import SERVICE
from txmq.errors import CorruptRecordError, StoreFencedError
from txmq.protocol import channels
from txmq.store.flush import Group
from txmq.store.replica import append_shipped_nowait, durable_end, last_of, shipped_durable

if TYPE_CHECKING:
    from txmq.broker.follower import Follower

log = logging.getLogger(__name__)

DIVERGED = "is not the leader's"  # in a refusal: the follower's tail is not the leader's


class Acks:
    """The follower's durable end, written up the stream by one task (a write at a time):
    ends that arrive while one is being written are coalesced to the latest."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.end = -1
        self.failed: Exception | None = None
        self._due = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def send(self, end: int) -> None:
        self.end = max(self.end, end)
        self._due.set()

    def fail(self, exc: Exception) -> None:
        self.failed = exc
        self._due.set()

    async def _run(self) -> None:
        for _ in range(limits.REPLICA_STREAM_FRAMES_MAX):
            await self._due.wait()
            self._due.clear()
            if self.failed is not None:
                raise self.failed
            await self.call.write(json.dumps({"durable": self.end}).encode())


async def follow(f: Follower, leader: Leader, stop: asyncio.Event | None) -> None:
    """Follow ``leader`` on one stream until it ends, fails, or another leader is named."""
    channel = f.channel(leader.endpoint)
    # Signed with the wall clock: the lease clock is monotonic, not a date.
    metadata = f.security.metadata(time.time_ns() // 1_000_000)
    call = channel.stream_stream(f"/{SERVICE}/Follow")(metadata=metadata)
    acks: Acks | None = None
    timeout = (limits.REPLICA_FETCH_WAIT_MS + limits.ETCD_CALL_TIMEOUT_MS) / 1000
    try:
        await call.write(json.dumps(f.fetch_args(leader, topics=True)).encode())
        acks = Acks(call)
        for _ in range(limits.REPLICA_STREAM_FRAMES_MAX):
            reply = await asyncio.wait_for(call.read(), timeout)
            if reply is grpc.aio.EOF:
                return
            header, payload = channels.split(reply, "Follow")
            if not header.get("ok"):
                if DIVERGED in str(header.get("error", "")):
                    await f.diverged(leader.endpoint, leader.epoch)
                    return
                log.info("leader refused to ship: %s", header.get("error"))
                await asyncio.sleep(limits.REPLICA_OBSERVE_PERIOD_MS / 1000)
                return
            now = f.leadership.clock()
            if int(header["epoch"]) != leader.epoch or f.leadership.leader != leader:
                return  # fenced: nothing from a leader etcd no longer names
            await _frame(f, header, bytes(payload), now, acks)
            if acks.task.done():
                acks.task.result()  # raises what stopped the acks
                return
            if f.leadership.leads() or (stop is not None and stop.is_set()):
                return
    except grpc.aio.AioRpcError as exc:
        await f.failed("Follow", leader.endpoint, exc)
    except TimeoutError:
        log.info("no frame from the leader %s within %.1f s", leader.endpoint, timeout)
    finally:
        call.cancel()
        if acks is not None:
            acks.task.cancel()


async def _frame(f: Follower, header: dict[str, Any], data: bytes, now: int, acks: Acks) -> None:
    """Write one pushed frame; confirm it (and ack) once it is durable."""
    if "topics" in header:
        f.define_topics(header["topics"])
    if "positions" in header:
        await f.keep_positions(header["positions"])
    if not data:
        end = durable_end(f.store)
        f.confirmed(header, now, end)
        acks.send(end)
        return
    start = f.store.log_end_offset
    pairs = [(int(e), int(s)) for e, s in header.get("epochs", [])]
    group: Group | None = None
    if len(data) > limits.REPLICA_INLINE_SHIP_BYTES:
        end = await asyncio.to_thread(f.append_blocking, data, pairs)  # durable on return
    else:
        f.epochs.adopt(pairs, start, start + len(data))
        group, end = append_shipped_nowait(f.store, data)
    if end != header["next_offset"]:
        raise CorruptRecordError(end, f"leader said next offset {header['next_offset']}")
    f.last = last_of(data)
    f.fetched_bytes += end - start
    loop = asyncio.get_running_loop()

    def durable() -> None:  # on the loop, once the group's fsync returned
        try:
            shipped_durable(f.store, group, end)
        except StoreFencedError as exc:
            acks.fail(exc)
            return
        f.confirmed(header, now, end)
        acks.send(end)

    if group is None:
        durable()
        return

    def wake() -> None:  # on the flusher thread, or here if the group is done
        if not loop.is_closed():
            loop.call_soon_threadsafe(durable)

    group.on_done(wake)
