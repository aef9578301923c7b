"""An operator's change of consumer positions on a SYNC replica group outlives its leader.

Goal: ``group reset`` and ``group delete`` answer OK only once every follower of the stored
in-sync set wrote the change, so a leader killed (SIGKILL) the instant after the OK leaves a
follower that leads with the change in place: the reset group is rewound, the deleted group is
gone. A follower that cannot confirm (paused with SIGSTOP, in a group of 2 with
min_insync_replicas 2: the stored set cannot drop it) makes the verb answer the replication
timeout status within the call's deadline, naming the follower and saying the change is applied
on the leader; the CLI shows that as one ``txmq:`` line with exit 1. In a group of 3 with
min_insync_replicas 2 the stored set drops the paused follower first, and the verb answers OK
once it did. With ``--async`` (min_insync_replicas 1) the reset answers at once, as before.
Method: real broker processes through a real etcd; the unmodified official Python client
acknowledges every message first, and the test waits until the follower's copy of the positions
holds those acks (else a follower with no copy at all would start the group from the earliest
message and a lost reset would look kept); the verbs through the admin client (in process, so
the kill follows the OK at once) and the CLI as a subprocess.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from tests.cli.test_cli import ok, txmq
from tests.integration.clients import consumer
from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.test_group_delete import listed, saved_groups
from tests.integration.test_group_reset import acked_to, receive, send
from tests.integration.test_replication import (
    follower_has_topic,
    leader_of,
    replica_group,
    route,
    status,
)
from txmq.client.admin import call

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

MESSAGES = 6


def copied_acks(b: BrokerProcess, group: str) -> dict[int, int]:
    """Queue -> ack offset of ``group`` in ``b``'s positions file ({} if none)."""
    path = b.data_dir / "consumer-positions.json"
    rows = json.loads(path.read_bytes())["positions"] if path.exists() else []
    return {int(r["queue"]): int(r["ack"]) for r in rows if r["group"] == group}


def consumed(
    tmp_path: Path, etcd: str, name: str, n: int = 2, insync: int = 2
) -> list[BrokerProcess]:
    """A replica group ``name`` of ``n`` (min_insync ``insync``) whose topic ``t`` group ``c``
    has read and acknowledged to the end, and whose followers' copies hold those acks."""
    names = tuple(f"{name}{i}" for i in range(n))
    group = replica_group(tmp_path, etcd, name, names, insync)
    try:
        read_to_the_end(group)
    except BaseException:
        stop_all(group)  # the test's own ``finally`` is not reached
        raise
    return group


def read_to_the_end(group: list[BrokerProcess]) -> None:
    leader, _ = leader_of(group)
    followers = [b for b in group if b is not leader]
    every = sorted(b.port for b in group)
    wait_until(lambda: route(leader.endpoints, "t") == every, 10, "every replica in the route")
    for f in followers:
        wait_until(lambda f=f: follower_has_topic(f, "t"), 10, "the topic copied")
        wait_until(lambda f=f: route(f.endpoints, "t") == every, 10, "the follower lists all")
    everyone = ";".join(b.endpoints for b in group)
    send(everyone, "t", [f"m{i}" for i in range(MESSAGES)])
    c = consumer(everyone, "c", "t")
    try:
        assert len(receive(c, MESSAGES)) == MESSAGES
    finally:
        c.shutdown()

    def copied() -> bool:
        return all(copied_acks(f, "c") == copied_acks(leader, "c") != {} for f in followers)

    wait_until(copied, 20, "the followers' copies of the acks")
    assert sum(copied_acks(leader, "c").values()) == MESSAGES


def stop_all(group: list[BrokerProcess]) -> None:
    for b in group:
        if b.proc is not None and b.running:
            b.proc.send_signal(signal.SIGCONT)
            b.stop()


def promoted(group: list[BrokerProcess], killed: BrokerProcess) -> BrokerProcess:
    survivor = next(b for b in group if b is not killed)
    wait_until(lambda: status(survivor.endpoints).get("role") == "leader", 30, "a new leader")
    return survivor


def test_a_reset_answered_ok_is_kept_by_the_follower_that_leads_when_the_leader_dies_at_once(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = consumed(tmp_path, etcd_endpoint, "pcr")
    try:
        leader, _ = leader_of(group)
        started = time.monotonic()
        call(leader.endpoints, "GroupReset", {"group": "c", "topic": "t", "to": "earliest"})
        answered_s = time.monotonic() - started
        leader.kill9()  # no pause: the OK itself must mean the follower has it
        survivor = promoted(group, leader)
        assert set(acked_to(survivor.endpoints, "c").values()) == {0}, answered_s
    finally:
        stop_all(group)


def test_a_delete_answered_ok_is_kept_by_the_follower_that_leads_when_the_leader_dies_at_once(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = consumed(tmp_path, etcd_endpoint, "pcd")
    try:
        leader, follower = leader_of(group)
        assert "c" in saved_groups(follower.data_dir)
        call(leader.endpoints, "GroupDelete", {"group": "c", "force": True})
        leader.kill9()
        survivor = promoted(group, leader)
        assert "c" not in listed(survivor.endpoints)
        assert "c" not in saved_groups(survivor.data_dir)
    finally:
        stop_all(group)


def test_a_paused_follower_makes_the_reset_answer_the_timeout_naming_it(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = consumed(tmp_path, etcd_endpoint, "pcp")
    try:
        leader, follower = leader_of(group)
        assert follower.proc is not None
        follower.proc.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        r = txmq("group", "reset", "c", "--topic", "t", "--to", "earliest",
                 "--endpoints", leader.endpoints)  # fmt: skip
        took_s = time.monotonic() - started
        assert r.returncode == 1, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("txmq: "), r.stderr
        assert follower.data_dir.name in lines[0] and "applied" in lines[0], lines[0]
        assert took_s < 10, took_s  # the admin client's deadline, refused before it
        assert set(acked_to(leader.endpoints, "c").values()) == {0}  # applied on the leader
        follower.proc.send_signal(signal.SIGCONT)
        # Back: the same reset answers OK once the follower wrote it.
        call(leader.endpoints, "GroupReset", {"group": "c", "topic": "t", "to": "earliest"})
        assert set(copied_acks(follower, "c").values()) == {0}
    finally:
        stop_all(group)


def test_in_a_group_of_three_the_stored_set_drops_a_paused_follower_and_the_reset_answers_ok(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = consumed(tmp_path, etcd_endpoint, "pc3", n=3)
    try:
        leader, _ = leader_of(group)
        paused, other = (b for b in group if b is not leader)
        assert paused.proc is not None
        paused.proc.send_signal(signal.SIGSTOP)
        ok("group", "reset", "c", "--topic", "t", "--to", "earliest",
           "--endpoints", leader.endpoints)  # fmt: skip
        assert set(copied_acks(other, "c").values()) == {0}  # the member it waited for
        in_sync = status(leader.endpoints)["in_sync"]
        assert isinstance(in_sync, list) and paused.data_dir.name not in in_sync, in_sync
    finally:
        stop_all(group)


def test_with_async_replication_a_reset_does_not_wait_for_a_paused_follower(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = consumed(tmp_path, etcd_endpoint, "pca", insync=1)
    try:
        leader, follower = leader_of(group)
        assert follower.proc is not None
        follower.proc.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        call(leader.endpoints, "GroupReset", {"group": "c", "topic": "t", "to": "earliest"})
        took_s = time.monotonic() - started
        assert took_s < 1, took_s  # the leader alone, as before (nothing waits 5 s)
        assert set(acked_to(leader.endpoints, "c").values()) == {0}
    finally:
        stop_all(group)
