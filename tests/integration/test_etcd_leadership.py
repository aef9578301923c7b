"""Leader election and fencing of a replica group against a real etcd (ADR 0005)."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from txmq import limits
from txmq.broker.leadership.runner import Leadership, monotonic_ms
from txmq.coordination.etcd import Etcd
from txmq.coordination.etcd_server import start_local_etcd, wait_ready
from txmq.errors import CoordinationError

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

TTL = limits.REPLICA_LEASE_TTL_MS


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def test_compare_and_put_gives_the_key_to_one_lease_and_its_revision_is_the_epoch(
    etcd_endpoint: str,  # noqa: F811
) -> None:
    etcd = Etcd(etcd_endpoint)
    key = f"/txmq/t/{_group()}/leader"
    a, ttl = etcd.grant(TTL)
    assert ttl >= TTL
    b, _ = etcd.grant(TTL)
    won = etcd.put_if_absent(key, b"a", a)
    lost = etcd.put_if_absent(key, b"b", b)
    assert won.won and not lost.won
    assert won.holder is not None and lost.holder is not None
    assert lost.holder.value == b"a" and lost.holder.create_revision == won.holder.create_revision
    assert etcd.keepalive(a) >= TTL
    etcd.revoke(a)  # the key goes with the lease
    assert etcd.get(key) is None
    assert etcd.keepalive(a) == 0
    again = etcd.put_if_absent(key, b"b", b)
    assert again.won and again.holder is not None
    assert again.holder.create_revision > won.holder.create_revision  # epochs only grow


async def _until(cond, timeout_s: float, *tasks_owner: Leadership) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    for _ in itertools.count():
        if cond():
            return time.monotonic() - start
        assert time.monotonic() - start < timeout_s, "condition not met in time"
        await asyncio.sleep(0.05)  # sleep: polling a bounded condition between election steps
    raise AssertionError("unreachable")


async def _leader_and_follower(
    endpoint: str,
) -> tuple[Leadership, Leadership, asyncio.Task[None], asyncio.Task[None]]:
    """r0 campaigns first and leads; r1 then runs and sees r0 as its leader."""
    group = _group()
    r0 = Leadership(Etcd(endpoint), "t", group, "r0", "h:1")
    r1 = Leadership(Etcd(endpoint), "t", group, "r1", "h:2")
    t0 = asyncio.create_task(r0.run())
    await _until(r0.leads, 10)
    t1 = asyncio.create_task(r1.run())
    await _until(lambda: r1.leader is not None, 10)
    return r0, r1, t0, t1


def test_one_replica_leads_and_a_follower_takes_over_after_the_leader_stops(
    etcd_endpoint: str,  # noqa: F811
) -> None:
    async def main() -> None:
        r0, r1, t0, t1 = await _leader_and_follower(etcd_endpoint)
        assert r1.leader is not None and r1.leader.name == "r0" and not r1.leads()
        first_epoch = r1.leader.epoch
        # r0 "pauses": its steps stop, so its lease is no longer renewed.
        t0.cancel()
        stopped = monotonic_ms()
        took = await _until(r1.leads, 10)
        assert r1.leader is not None and r1.leader.epoch > first_epoch
        # Fencing: by the time r1 led, r0 had stopped acknowledging by its own clock.
        assert not r0.leads()
        assert r0.election.lease_deadline_ms <= stopped + TTL
        assert took < 10
        await r1.resign()
        t1.cancel()
        await asyncio.gather(t0, t1, return_exceptions=True)

    asyncio.run(main())


def test_a_resigning_leader_hands_over_within_an_observe_period(
    etcd_endpoint: str,  # noqa: F811
) -> None:
    async def main() -> None:
        r0, r1, t0, t1 = await _leader_and_follower(etcd_endpoint)
        t0.cancel()
        await asyncio.gather(t0, return_exceptions=True)
        await r0.resign()
        took = await _until(r1.leads, 10)
        assert took < TTL / 1000  # no lease expiry to wait for
        t1.cancel()
        await asyncio.gather(t1, return_exceptions=True)

    asyncio.run(main())


def test_a_leader_keeps_its_lease_while_its_event_loop_is_held_up(
    etcd_endpoint: str,  # noqa: F811
) -> None:
    """The lease is renewed from its own thread (keepalive.py): a loop held up for longer than
    a lease lasts after its last keepalive (one long callback, or a backlog under CPU load)
    leaves the leader leading, with the same epoch. A paused process is another matter (the
    fencing tests): its keepalive thread pauses with it."""

    async def main() -> None:
        r0, r1, t0, t1 = await _leader_and_follower(etcd_endpoint)
        assert r1.leader is not None
        epoch, renewals = r1.leader.epoch, r0.renewal.renewals
        held_up = time.monotonic() + TTL / 1000 + 1
        while time.monotonic() < held_up:
            pass  # CPU work on the loop: no step of either replica runs meanwhile
        assert r0.leads(), "the lease lapsed while the loop was held up"
        assert r0.renewal.renewals - renewals >= 3  # a keepalive a second, for 4 s
        key = Etcd(etcd_endpoint).get(r0.key)
        assert key is not None and key.create_revision == epoch  # never deleted, never retaken
        await r0.resign()
        for t in (t0, t1):
            t.cancel()
        await asyncio.gather(t0, t1, return_exceptions=True)

    asyncio.run(main())


def test_a_leader_whose_loop_stalls_past_its_bound_lets_its_lease_lapse(
    etcd_endpoint: str,  # noqa: F811
) -> None:
    """The keepalive thread renews only while the loop still steps (keepalive.py,
    LOOP_STALL_MAX_MS): a loop hung for longer (here a bound of 1.5 s, the loop held up for a
    lease and a second) serves no one, so the lease lapses and another replica may lead."""

    async def main() -> None:
        group = _group()
        r0 = Leadership(Etcd(etcd_endpoint), "t", group, "r0", "h:1", loop_stall_max_ms=1_500)
        t0 = asyncio.create_task(r0.run())
        await _until(r0.leads, 10)
        renewals = r0.renewal.renewals
        held_up = time.monotonic() + TTL / 1000 + 1
        while time.monotonic() < held_up:
            pass  # a hung loop: no election step runs
        assert not r0.leads(), "the lease was renewed for a loop that had stalled"
        assert r0.renewal.stalled and r0.renewal.renewals - renewals <= 1
        t0.cancel()
        await asyncio.gather(t0, return_exceptions=True)
        await r0.resign()

    asyncio.run(main())


def test_revoking_a_lease_etcd_no_longer_has_is_no_error(
    etcd_endpoint: str,  # noqa: F811
) -> None:
    etcd = Etcd(etcd_endpoint)
    lease, _ = etcd.grant(1_000)
    etcd.revoke(lease)
    etcd.revoke(lease)  # gone already (as after a lapse): the step down is done, no error


def test_an_unreachable_etcd_is_one_coordination_error() -> None:
    with pytest.raises(CoordinationError, match=r"etcd at 127\.0\.0\.1:1: kv/range failed"):
        Etcd("127.0.0.1:1").get("/k")


def test_missing_etcd_binary_names_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CoordinationError, match="install Debian's etcd-server package"):
        start_local_etcd(tmp_path / "etcd")


def test_a_campaign_loses_when_the_in_sync_set_changed_since_it_was_read(
    etcd_endpoint: str,  # noqa: F811
) -> None:
    etcd = Etcd(etcd_endpoint)
    base = f"/txmq/t/groups/{_group()}/"
    lease, _ = etcd.grant(TTL)
    etcd.put(base + "insync", b'{"epoch": 1, "members": ["r0", "r1"]}')
    read = etcd.get(base + "insync")
    assert read is not None
    etcd.put(base + "insync", b'{"epoch": 2, "members": ["r1"]}')  # shrunk after our read
    stale = etcd.put_if_absent(base + "leader", b"r0", lease, (base + "insync", read.mod_revision))
    assert not stale.won and stale.holder is None
    fresh = etcd.get(base + "insync")
    assert fresh is not None
    won = etcd.put_if_absent(base + "leader", b"r0", lease, (base + "insync", fresh.mod_revision))
    assert won.won
    etcd.revoke(lease)
    fresh_group = f"/txmq/t/groups/{_group()}/"
    lease, _ = etcd.grant(TTL)
    assert etcd.put_if_absent(fresh_group + "leader", b"r0", lease, (fresh_group + "insync", 0)).won
    etcd.revoke(lease)


def test_the_operators_put_needs_no_leader_and_the_set_as_read(
    etcd_endpoint: str,  # noqa: F811
) -> None:
    """``Etcd.put_if_unchanged``, what ``cluster unclean-election`` writes the set with."""
    etcd = Etcd(etcd_endpoint)
    base = f"/txmq/t/groups/{_group()}/"
    etcd.put(base + "insync", b"old")
    read = etcd.get(base + "insync")
    assert read is not None
    etcd.put(base + "insync", b"newer")  # a leader stored a set since
    assert not etcd.put_if_unchanged(base + "insync", b"op", read.mod_revision, base + "leader")
    again = etcd.get(base + "insync")
    assert again is not None
    lease, _ = etcd.grant(TTL)
    assert etcd.put_if_absent(base + "leader", b"r0", lease).won  # a leader now
    assert not etcd.put_if_unchanged(base + "insync", b"op", again.mod_revision, base + "leader")
    etcd.revoke(lease)  # its key goes with its lease
    assert etcd.put_if_unchanged(base + "insync", b"op", again.mod_revision, base + "leader")
    assert etcd.delete_prefix(base) == 1 and etcd.get(base + "insync") is None


def test_kept_alive_connections_are_reused_and_survive_an_etcd_restart(
    etcd_binary: Path, tmp_path: Path
) -> None:
    """A replica's client keeps its connections to etcd (no TCP connection, over TLS no
    handshake, per call); one etcd closed while it sat idle is replaced at the next call, which
    succeeds. White box: the idle connections' sockets are compared."""
    proc, endpoint = start_local_etcd(tmp_path / "etcd")
    etcd = Etcd(endpoint, keep_alive=True)
    try:
        etcd.put("/txmq-test/k", b"1")
        first = etcd._idle[0].sock
        assert etcd.get("/txmq-test/k") is not None
        assert [c.sock for c in etcd._idle] == [first], "the same connection, reused"
        proc.terminate()
        proc.wait(timeout=30)
        with open(tmp_path / "etcd" / "etcd.log", "ab") as log:
            proc = subprocess.Popen(proc.args, stdout=log, stderr=log)  # same port, same data
        wait_ready(endpoint, proc)
        found = etcd.get("/txmq-test/k")  # on the connection the old etcd closed, then anew
        assert found is not None and found.value == b"1"
        assert [c.sock for c in etcd._idle] != [first]
    finally:
        etcd.close()
        proc.terminate()
        proc.wait(timeout=30)
