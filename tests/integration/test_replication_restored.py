"""A member whose data directory comes back older under the same incarnation (ADR 0005,
"restored backups").

Two SYNC replicas (``--min-insync-replicas 2``). The follower's data directory is copied while
it is stopped (a backup: its ``incarnation.json`` included), then more messages are
acknowledged on both. In the first test both replicas die (kill -9) and the follower comes back
on the backup: by its (name, incarnation) the stored in-sync set names it, so on the code before
it led alone, and the old leader, restarted, followed it and cut the acknowledged messages as a
divergent tail. It must instead find that its log ends below what the set says its members held,
take a new incarnation and wait; the old leader leads, nothing acknowledged is lost, and the
restored member catches up and is stored again under its new incarnation. In the second, the
follower is restored while its leader runs: it is not counted as the member it was until it has
caught up under a new incarnation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.integration.clients import consumer, drain
from tests.integration.conftest import ROOT, BrokerProcess, wait_until
from tests.integration.test_replication import (
    _send_raw,
    create_topic,
    group,  # noqa: F401  (fixture: 2 replicas, SYNC 2)
    leader_of,
    status,
)
from tests.integration.test_replication_incarnation import members, stored
from txmq.coordination.etcd import Etcd
from txmq.coordination.keys import insync_key

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

BEFORE, AFTER = 5, 20
LOST = "data directory lost records"


def send(leader: BrokerProcess, topic: str, prefix: str, n: int) -> list[bytes]:
    """``n`` acknowledged sends to ``topic``; their bodies."""
    acked = []
    for i in range(n):
        body = f"{prefix}-{i}".encode()
        code, text = _send_raw(leader.endpoints, topic, body, body.hex().upper()[-32:])
        assert code == pb.OK, text
        acked.append(body)
    return acked


def confirmed_stored(etcd: str) -> int | None:
    """The end the stored in-sync set says its members held (None: it says none)."""
    kv = Etcd(etcd).get(insync_key("txmq", "g"))
    found = json.loads(kv.value).get("confirmed") if kv is not None else None
    return int(found[0]) if found else None


def backed_up(
    replicas: list[BrokerProcess], etcd: str, topic: str
) -> tuple[BrokerProcess, BrokerProcess, list[bytes], set[tuple[str, str]], Path]:
    """BEFORE messages acknowledged on both replicas, both stored; then the follower stopped,
    its data directory copied (a backup), started again and caught up; then AFTER more
    acknowledged. Returns (leader, follower, acknowledged bodies, stored members, backup)."""
    leader, follower = leader_of(replicas)
    create_topic(leader, follower, topic)
    acked = send(leader, topic, "before", BEFORE)
    both = members(leader, follower)
    wait_until(lambda: stored(etcd) == both, 15, f"{both} stored")
    backup = back_up(follower, leader)
    acked += send(leader, topic, "after", AFTER)
    return leader, follower, acked, both, backup


def delivered(endpoints: str, topic: str, want: int) -> set[bytes]:
    """The bodies a new consumer group receives from ``topic`` (up to ``want``, 20 s)."""
    c = consumer(endpoints, "reader", topic)
    try:
        return {bytes(m.body) for m in drain(c, want, timeout_s=20)}
    finally:
        c.shutdown()


def back_up(follower: BrokerProcess, leader: BrokerProcess) -> Path:
    """Stop the follower, copy its data directory (a backup), start it again and wait until
    it caught up."""
    follower.stop()
    backup = follower.data_dir.with_name("backup")
    shutil.copytree(follower.data_dir, backup)
    follower.start()
    end = int(status(leader.endpoints)["end"])
    wait_until(lambda: status(follower.endpoints).get("end") == end, 15, "follower caught up")
    return backup


def restore(follower: BrokerProcess, backup: Path) -> None:
    shutil.rmtree(follower.data_dir)
    shutil.copytree(backup, follower.data_dir)


def wait_confirmed(etcd: str, leader: BrokerProcess) -> None:
    """Until the stored set's confirmed end covers the leader's log. The leader stores it with
    the set, raising it at most once a second (replication/leader.CONFIRMED_EVERY_MS), so a set
    read just after the last acks may record none yet: that is a set still to be updated, not
    one that will never record an end. Killing both replicas before it covers the log tests the
    window the leader has not recorded yet, which the restored member cannot see."""
    end = int(status(leader.endpoints)["end"])
    wait_until(
        lambda: (c := confirmed_stored(etcd)) is not None and c >= end, 10, "confirmed end stored"
    )


def test_a_member_restored_from_a_backup_never_leads_with_less(group, etcd_endpoint) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    leader, follower, acked, both, backup = backed_up(group, etcd_endpoint, "bk")
    wait_confirmed(etcd_endpoint, leader)

    roles = {b.data_dir.name: status(b.endpoints).get("role") for b in (leader, follower)}
    for b in (leader, follower):
        b.kill9()
    at_kill = confirmed_stored(etcd_endpoint)
    restore(follower, backup)
    follower.start()

    def decided() -> bool:
        return status(follower.endpoints).get("role") == "leader" or LOST in follower.log_tail(400)

    wait_until(decided, 15, "the restored member leads or says it lost records")
    restored_led = status(follower.endpoints).get("role") == "leader"
    leader.start()
    now, _ = leader_of(group)
    got = delivered(now.endpoints, "bk", len(acked))
    assert set(acked) <= got, (
        f"lost {sorted(set(acked) - got)} (restored member led: {restored_led}; stored"
        f" confirmed end at the kill: {at_kill}; roles then: {roles}); its log:\n"
        + follower.log_tail(60)
    )
    assert not restored_led and now is leader
    doc = status(follower.endpoints)
    assert doc["incarnation"] not in {i for _, i in both}, doc
    assert LOST in str(doc.get("renewed")), doc
    again = members(leader, follower)
    wait_until(lambda: stored(etcd_endpoint) == again, 20, f"{again} stored")
    assert _send_raw(leader.endpoints, "bk", b"later", "C" * 32)[0] == pb.OK
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "status", "--endpoints",
           f"{leader.endpoints};{follower.endpoints}"]  # fmt: skip
    shown = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert shown.returncode == 0 and f"{doc['name']} renewed its incarnation" in shown.stdout, shown


def test_a_member_restored_while_its_leader_runs_counts_only_once_caught_up(
    group,  # noqa: F811
    etcd_endpoint,  # noqa: F811
) -> None:  # type: ignore[no-untyped-def]
    leader, follower, acked, both, backup = backed_up(group, etcd_endpoint, "bl")
    follower.kill9()
    restore(follower, backup)
    follower.start()
    wait_until(
        lambda: LOST in follower.log_tail(400), 15, "the restored member says it lost records"
    )
    again = members(leader, follower)
    assert not again & both - members(leader), f"the restored member kept its incarnation: {again}"
    wait_until(lambda: stored(etcd_endpoint) == again, 20, f"{again} stored")
    acked += send(leader, "bl", "later", 3)
    got = delivered(leader.endpoints, "bl", len(acked))
    assert set(acked) <= got, f"lost {sorted(set(acked) - got)}"
