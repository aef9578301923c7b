"""Deleting a consumer group (``txmq group delete``) that the official client consumed with.

Goal: an operator deletes a group: its positions and messages in flight are gone from the
broker (``group list``, the positions file) and stay gone after a SIGKILL and a restart, so a
consumer of that name starts again at the earliest message; its dead letters stay; a group with
a connected consumer is refused without --force; an unknown group is one ``txmq:`` line with
exit 2; on a cluster every broker forgets it; a replica group's followers get the deletion in
their copy of the positions.
Method: real broker processes (one; a 2-broker cluster; a replica group of 2 through etcd);
the unmodified official Python client; the CLI as a subprocess; positions read back from
``group list --json`` and from the positions files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import ok, txmq
from tests.integration.clients import consumer
from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.test_cluster import Cluster, definitions
from tests.integration.test_group_redrive import fail_until_dead, take
from tests.integration.test_group_reset import receive, send
from tests.integration.test_replication import create_topic, leader_of, replicas, status
from tests.integration.test_topic_update import one_line_error
from txmq.client.admin import call

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)


def listed(endpoints: str) -> set[str]:
    """Every group ``group list --all --json`` shows."""
    shown = json.loads(ok("group", "list", "--all", "--json", "--endpoints", endpoints))
    return {str(g["group"]) for g in shown["groups"]}


def saved_groups(data_dir: Path) -> set[str]:
    """The groups the broker's positions file holds."""
    path = data_dir / "consumer-positions.json"
    rows = json.loads(path.read_bytes())["positions"] if path.exists() else []
    return {str(r["group"]) for r in rows}


def test_a_deleted_group_stays_gone_through_a_kill_and_keeps_its_dead_letters(
    broker: BrokerProcess,
) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "gd", "--queues", "2", *ep)
    send(broker.endpoints, "gd", ["ok-0", "ok-1", "ok-2", "poison"])
    c = consumer(broker.endpoints, "g-del", "gd")
    keep = consumer(broker.endpoints, "g-keep", "gd")
    try:
        assert len(receive(keep, 4)) == 4
        assert fail_until_dead(broker, c, "g-del", 1) == {"ok-0", "ok-1", "ok-2"}
        send(broker.endpoints, "gd", ["held"])
        held = take(c, 1)
        assert [m.body for m in held] == [b"held"]
        line = one_line_error(txmq("group", "delete", "g-del", *ep), 2)
        assert "live consumers" in line and "force" in line
        assert "g-del" in listed(broker.endpoints) and "g-del" in saved_groups(broker.data_dir)
        r = json.loads(ok("group", "delete", "g-del", "--force", "--json", *ep))
        assert r["group"] == "g-del" and r["failed"] == {} and r["dlq_kept"] is True
        (mine,) = r["brokers"]
        assert {q["topic"] for q in mine["queues"]} == {"gd"} and mine["dead_letters"] == 1
        assert sum(q["inflight"] for q in mine["queues"]) == 1 and len(mine["live"]) == 1
        assert "g-del" not in saved_groups(broker.data_dir), "durable when it answered"
        with pytest.raises(Exception, match="stale"):
            c.ack(held[0])
    finally:
        c.shutdown()
        keep.shutdown()
    wait_until(lambda: "g-del" not in listed(broker.endpoints), 10, "the group gone")
    broker.kill9()
    broker.start()
    assert "g-del" not in listed(broker.endpoints) and "g-keep" in listed(broker.endpoints)
    assert saved_groups(broker.data_dir) == {"g-keep"}
    dlq = call(broker.endpoints, "TopicDescribe", {"name": "%DLQ%g-del"})["queues"]
    assert sum(q["max"] - q["min"] for q in dlq) == 1, "dead letters are kept"
    assert "does not exist" in one_line_error(txmq("group", "delete", "g-del", *ep), 2)
    # The name again is a new group: it starts at the earliest retained message.
    again = consumer(broker.endpoints, "g-del", "gd")
    try:
        got = receive(again, 5)
        assert sorted(got) == ["held", "ok-0", "ok-1", "ok-2", "poison"]
    finally:
        again.shutdown()


def test_a_cluster_forgets_the_group_on_every_broker(tmp_path: Path) -> None:
    cl = Cluster(tmp_path, 2)
    cl.start()
    try:
        b0, b1 = cl.brokers
        ok("topic", "create", "cd", "--queues", "1", "--endpoints", b0.endpoints)
        wait_until(lambda: "cd" in definitions(b1), 15, "the topic on b1")
        for b in cl.brokers:
            send(b.endpoints, "cd", [f"{b.data_dir.name}-{i}" for i in range(2)])
        c = consumer(cl.endpoints, "g-cd", "cd")
        try:
            assert len(receive(c, 4)) == 4
        finally:
            c.shutdown()
        wait_until(lambda: all("g-cd" in saved_groups(b.data_dir) for b in cl.brokers), 10, "saved")
        r = call(b1.endpoints, "GroupDelete", {"group": "g-cd", "force": True})
        assert sorted(b["broker"] for b in r["brokers"]) == ["b0", "b1"] and not r["failed"]
        assert all(len(b["queues"]) == 1 for b in r["brokers"])
        assert not any("g-cd" in saved_groups(b.data_dir) for b in cl.brokers)
    finally:
        cl.stop()


def test_a_replica_groups_follower_gets_the_deletion_and_keeps_it_as_leader(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = replicas(tmp_path, etcd_endpoint, "--min-insync-replicas", "2")
    try:
        leader, follower = leader_of(group)
        create_topic(leader, follower, "rd")
        both = f"{leader.endpoints};{follower.endpoints}"
        send(both, "rd", [f"r{i}" for i in range(4)])
        c = consumer(both, "g-rd", "rd")
        try:
            assert len(receive(c, 4)) == 4
        finally:
            c.shutdown()
        wait_until(lambda: "g-rd" in saved_groups(follower.data_dir), 10, "the follower's copy")
        ok("group", "delete", "g-rd", "--force", "--endpoints", both)
        wait_until(
            lambda: "g-rd" not in saved_groups(follower.data_dir), 10, "the follower's deletion"
        )
        leader.kill9()
        wait_until(lambda: status(follower.endpoints).get("role") == "leader", 20, "lead")
        assert "g-rd" not in listed(follower.endpoints)
    finally:
        for b in group:
            if b.running:
                b.stop()
