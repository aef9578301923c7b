"""A member restarted on an empty data directory never leads before it caught up (ADR 0005).

Two SYNC replicas (``--min-insync-replicas 2``): both hold every acknowledged message and etcd
stores both as the in-sync set, each with its data directory's incarnation. The follower is
killed (-9), its data directory deleted, and, with the leader paused (SIGSTOP: it can copy
nothing back), it is restarted under the same name: a new incarnation, holding nothing. The
leader's lease lapses; the stored set names the follower's name, but not this incarnation, so
it must not lead (by name alone, it would, and every acknowledged message would be lost). The
old leader, killed and restarted on its own directory, leads again; nothing acknowledged is
lost; the emptied member catches up and is stored again under its new incarnation.

Then the operator's way out when every stored member lost its data: no replica may lead until
``txmq cluster unclean-election`` stores the set as the replica the operator picks.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

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
from txmq import limits
from txmq.coordination.etcd import Etcd
from txmq.coordination.keys import decode_insync, insync_key, leader_key

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

MESSAGES = 20


def stored(etcd: str) -> set[tuple[str, str | None]]:
    return set(decode_insync(Etcd(etcd).get(insync_key("txmq", "g"))) or [])


def test_a_member_restarted_empty_never_leads_before_it_caught_up(group, etcd_endpoint) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    leader, follower = leader_of(group)
    create_topic(leader, follower, "inc")
    acked = []
    for i in range(MESSAGES):
        body = f"m-{i}".encode()
        code, text = _send_raw(leader.endpoints, "inc", body, f"{i:032X}")
        assert code == pb.OK, text
        acked.append(body)
    lead, follow = status(leader.endpoints), status(follower.endpoints)
    mine = (str(lead["name"]), str(lead["incarnation"]))
    old = (str(follow["name"]), str(follow["incarnation"]))
    both = {mine, old}
    wait_until(lambda: stored(etcd_endpoint) == both, 15, f"{both} stored")

    follower.kill9()
    shutil.rmtree(follower.data_dir)
    assert leader.proc is not None
    leader.proc.send_signal(signal.SIGSTOP)  # the emptied member can copy nothing back
    try:
        follower.start()
        reborn = str(status(follower.endpoints)["incarnation"])
        assert reborn != old[1]
        etcd = Etcd(etcd_endpoint)
        lapse_s = (limits.REPLICA_LEASE_TTL_MS + 5_000) / 1000
        wait_until(lambda: etcd.get(leader_key("txmq", "g")) is None, lapse_s, "lease lapsed")
        # No leader now: the emptied member observes that four times and abstains each time.
        first = int(status(follower.endpoints)["abstained"])  # type: ignore[call-overload]

        def abstained_four_more() -> bool:
            assert etcd.get(leader_key("txmq", "g")) is None, "someone leads: the emptied member"
            assert status(follower.endpoints).get("role") == "follower"
            return int(status(follower.endpoints)["abstained"]) >= first + 4  # type: ignore[call-overload]

        observe_s = limits.REPLICA_OBSERVE_PERIOD_MS / 1000
        wait_until(abstained_four_more, 20 + 8 * observe_s, "four observations abstained")
        assert etcd.get(leader_key("txmq", "g")) is None, "someone leads: the emptied member"
        assert "may lead only once it caught up" in follower.log_tail(400)
    finally:
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait(timeout=10)
    leader.start()  # its own data directory: the incarnation the stored set names
    wait_until(lambda: status(leader.endpoints).get("role") == "leader", 20, "the old leader leads")
    assert status(follower.endpoints).get("role") != "leader"
    c = consumer(leader.endpoints, "reader", "inc")
    try:
        got = {bytes(m.body) for m in drain(c, len(acked), timeout_s=20)}
    finally:
        c.shutdown()
    assert set(acked) <= got, f"lost {set(acked) - got}"
    # The emptied member catches up and is stored again, under its new incarnation.
    again = {mine, (old[0], reborn)}
    wait_until(lambda: stored(etcd_endpoint) == again, 20, f"{again} stored")
    code, text = _send_raw(leader.endpoints, "inc", b"after", "F" * 32)
    assert code == pb.OK, text


def members(*replicas: BrokerProcess) -> set[tuple[str, str]]:
    """Each replica as (name, incarnation), by its Replica/Status."""
    docs = [status(r.endpoints) for r in replicas]
    return {(str(d["name"]), str(d["incarnation"])) for d in docs}


def test_an_operator_picks_a_leader_once_every_member_lost_its_data(group, etcd_endpoint) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    leader, follower = leader_of(group)
    both = members(leader, follower)
    wait_until(lambda: stored(etcd_endpoint) == both, 15, f"{both} stored")
    for b in (leader, follower):
        b.kill9()
        shutil.rmtree(b.data_dir)
    for b in (leader, follower):
        b.start()
    # Neither is a member the set names: both wait (and say why), no one leads.
    for b in (leader, follower):
        wait_until(lambda b=b: "may lead only once" in b.log_tail(400), 15, "the refusal logged")
    etcd = Etcd(etcd_endpoint)
    lapse_s = (limits.REPLICA_LEASE_TTL_MS + 5_000) / 1000  # the killed leader's lease
    wait_until(lambda: etcd.get(leader_key("txmq", "g")) is None, lapse_s, "lease lapsed")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "unclean-election",
           "--etcd", etcd_endpoint, "--replica", leader.endpoints]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0 and "now names only" in done.stdout, done
    wait_until(lambda: status(leader.endpoints).get("role") == "leader", 15, "the picked one leads")
    assert status(follower.endpoints).get("role") == "follower"
    # The other one follows, is stored, and acks go on; a second run is refused: a leader.
    again = members(leader, follower)
    assert not again & both
    wait_until(lambda: stored(etcd_endpoint) == again, 20, f"{again} stored")
    assert _send_raw(leader.endpoints, "after", b"after", "E" * 32)[0] == pb.OK
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode != 0 and "leads its group" in done.stderr, done
