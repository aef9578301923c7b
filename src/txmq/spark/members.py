"""The cluster as the Spark sink sees it: which members take a task's bundles, and where a
batch's ledger record lives.

Owns: ``cluster_view`` (every member's name, address and liveness, asked of any member; a
replica group's address names all its replicas, so its client follows the group's failover,
spark/client.py), ``SinkCluster`` (that view, asked once per task and once per driver commit),
``Spread`` (a task's bundles round-robin over the members believed live, starting at the task's
partition, skipping a member that failed) and ``Brokers`` (one client per address, opened on
first use: the driver's ledger and decisions go to the member that holds each).
Must not: decide anything (sink.py and txn/ledger.py do) or outlive the task or commit that
opened it (Spark pickles writers; clients stay out of them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from txmq import errors
from txmq.protocol.client_security import PLAINTEXT, ClientSecurity
from txmq.spark.addresses import group_address, replicas_of
from txmq.spark.client import BrokerClient
from txmq.txn.ledger import ledger_home, ledger_key

# The member name of a cluster the sink could not ask about (no ledger home is named then).
UNNAMED = ""


@dataclass(frozen=True, slots=True)
class SinkCluster:
    """(name, endpoint, live) of every member, in cluster-file order."""

    members: tuple[tuple[str, str, bool], ...]

    @classmethod
    def discover(cls, endpoints: str, security: ClientSecurity = PLAINTEXT) -> SinkCluster:
        """Ask a member at ``endpoints``. A broker alone is used at the address the user gave.
        Credentials without the admin right may not ask (ClusterInfo is an admin call on a
        broker with an ACL): then everything goes to ``endpoints`` as to one broker, with no
        ledger home named, so the broker that holds the halves reads its own ledger."""
        try:
            return cls(tuple(cluster_view(endpoints, security)))
        except (errors.ForbiddenError, errors.UnauthorizedError):
            return cls(((UNNAMED, endpoints, True),))

    def home(self, query: str, batch: str) -> tuple[str, str]:
        """(name, endpoint) of the member whose ledger holds the batch (txn/ledger.py); the
        name is UNNAMED when the cluster could not be asked."""
        name = ledger_home(ledger_key(query, batch), [n for n, _, _ in self.members])
        return name, next(ep for n, ep, _ in self.members if n == name)


class Brokers:
    """Clients by endpoint, opened on first use and closed together; thread-safe."""

    def __init__(self, security: ClientSecurity = PLAINTEXT) -> None:
        self.security = security
        self._open: dict[str, BrokerClient] = {}
        self._lock = threading.Lock()

    def get(self, endpoint: str) -> BrokerClient:
        with self._lock:
            client = self._open.get(endpoint)
            if client is None:
                client = self._open[endpoint] = BrokerClient(endpoint, security=self.security)
            return client

    def __enter__(self) -> Brokers:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            for client in self._open.values():
                client.close()
            self._open.clear()


class Spread:
    """Where a task's next bundle goes: the members believed live in turn. A member that failed
    is skipped until every member has failed (then all are tried again)."""

    def __init__(
        self, endpoints: list[str], get: Callable[[str], BrokerClient], *, down: Any, start: int
    ) -> None:
        assert endpoints, "a spread needs a member"
        self.endpoints = endpoints
        self.get = get
        self.down: set[str] = set(down)
        self._turn = start
        self._lock = threading.Lock()

    @classmethod
    def over(cls, cluster: SinkCluster, brokers: Brokers, start: int) -> Spread:
        down = {ep for _, ep, live in cluster.members if not live}
        return cls([ep for _, ep, _ in cluster.members], brokers.get, down=down, start=start)

    @classmethod
    def single(cls, broker: BrokerClient) -> Spread:
        return cls([broker.endpoints], lambda _: broker, down=(), start=0)

    def next(self) -> BrokerClient:
        with self._lock:
            live = [ep for ep in self.endpoints if ep not in self.down]
            if not live:
                self.down.clear()
                live = self.endpoints
            endpoint = live[self._turn % len(live)]
            self._turn += 1
        return self.get(endpoint)

    def failed(self, endpoint: str) -> bool:
        """Skip ``endpoint`` from now on; whether another member is still believed live."""
        with self._lock:
            self.down.add(endpoint)
            return any(ep not in self.down for ep in self.endpoints)


def cluster_view(
    endpoints: str, security: ClientSecurity = PLAINTEXT
) -> list[tuple[str, str, bool]]:
    """(name, address, live as the member asked sees it) of every member of the cluster behind
    ``endpoints``, in cluster-file order (a replica group's address: ``member_address``), asked of
    each of the user's endpoints in turn until one answers (any member answers ClusterInfo).
    A broker alone is used at the address the user gave; a cluster of one group is addressed
    by its replicas and every endpoint the user gave (a replica that just started may not list
    the others yet: etcd's list is read every REPLICA_LIST_PERIOD_MS)."""
    user = [e.strip() for e in endpoints.split(";") if e.strip()]
    with BrokerClient(group_address(user), security=security) as broker:
        view = [(str(m["name"]), member_address(m), bool(m["live"])) for m in broker.cluster_info()]
    if len(view) != 1:
        return view
    name, address, _ = view[0]
    leader, *others = replicas_of(address)
    if not others and len(user) == 1:
        return [(name, endpoints, True)]
    return [(name, group_address([leader, *sorted({*others, *user} - {leader})]), True)]


def member_address(member: Mapping[str, Any]) -> str:
    """A ClusterInfo member's address: its endpoint (the group's leader), then its other
    replicas (``endpoints``: every replica the member knows of, etcd's list included)."""
    leader = str(member["endpoint"])
    replicas = {str(e) for e in member.get("endpoints") or ()}
    replicas.update(str(r["endpoint"]) for r in member.get("replicas") or ())
    return group_address([leader, *sorted(replicas - {leader})])
