"""The cluster as the Spark sink sees it: which members take a task's bundles, and where a
batch's ledger record lives.

Owns: ``SinkCluster`` (every member's name, endpoint and liveness, asked of any member once per
task and once per driver commit), ``Spread`` (a task's bundles round-robin over the members
believed live, starting at the task's partition, skipping a member that failed) and
``Brokers`` (one client per endpoint, opened on first use: the driver's ledger and decisions go
to the member that holds each).
Must not: decide anything (sink.py and txn/ledger.py do) or outlive the task or commit that
opened it (Spark pickles writers; clients stay out of them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from txmq import errors
from txmq.protocol.client_security import PLAINTEXT, ClientSecurity
from txmq.spark.client import BrokerClient
from txmq.txn.ledger import ledger_home, ledger_key

# The member name of a cluster the sink could not ask about (no ledger home is named then).
UNNAMED = ""


@dataclass(frozen=True)
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
            with BrokerClient(endpoints, security=security) as broker:
                view = broker.cluster_view()
        except (errors.ForbiddenError, errors.UnauthorizedError):
            return cls(((UNNAMED, endpoints, True),))
        if len(view) == 1:
            view = [(view[0][0], endpoints, True)]
        return cls(tuple(view))

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
