"""Which endpoints a replica group advertises in routes (Membership.advertised, ADR 0006): every
replica without TLS, so the official client follows a failover without a new route; the leader
alone over TLS (``one_address``), because the official Python client dials a multi-address
route as one target whose TLS hostname check fails (docs/security.md)."""

from __future__ import annotations

from txmq.broker.cluster.membership import Membership
from txmq.coordination.cluster_file import ClusterFile, Group, Member
from txmq.coordination.keys import Leader
from txmq.protocol.client_security import ClientSecurity

R0, R1 = Member("r0", "127.0.0.1", 7001), Member("r1", "127.0.0.1", 7002)
GROUP = Group("g0", (R0, R1))
CLUSTER = ClusterFile.of_groups("c", (GROUP,), etcd="127.0.0.1:2379")


def membership(leader: Member | None, *, tls: bool = False) -> Membership:
    def leader_of(group: str) -> Leader | None:  # etcd's answer, as GroupLeaders gives it
        assert group == "g0"
        return None if leader is None else Leader(leader.name, leader.endpoint, 7)

    security = ClientSecurity(tls=tls)  # the member's peer security: TLS when it serves TLS
    return Membership(CLUSTER, R0, now_ms=lambda: 0, leader_of=leader_of, security=security)


def test_without_tls_a_group_advertises_every_replica() -> None:
    found = membership(R1).advertised(GROUP)
    assert found is not None
    assert found.endpoints == (("127.0.0.1", 7001), ("127.0.0.1", 7002))


def test_over_tls_a_group_advertises_its_leader_alone() -> None:
    found = membership(R1, tls=True).advertised(GROUP)
    assert found is not None
    assert found.name == "g0" and found.endpoints == (("127.0.0.1", 7002),)


def test_over_tls_a_group_without_a_leader_advertises_its_first_replica() -> None:
    found = membership(None, tls=True).advertised(GROUP)
    assert found is not None
    assert found.endpoints == (("127.0.0.1", 7001),)
