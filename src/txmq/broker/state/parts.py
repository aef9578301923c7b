"""The broker's parts, opened together from one data directory and closed in order.

Owns: opening (store, topics, transactions, consumer positions, delay schedule, metrics,
client sessions, the send path) and closing them so the store checkpoints last; the
broker's wall clock is clock.py's ``wall_ms`` (re-exported). Must not: speak gRPC (server.py),
run loops (app.py), or implement any part's logic.

Directory layout under ``data_dir``: ``broker.lock`` (held while running), ``store/`` (commit
log, consume queues, index), ``topics.json``, ``delay.json``, the transaction snapshot and the
consumer positions file.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.consume.lag import LagCollector, LagSource
from txmq.broker.consume.positions import ConsumerPositions
from txmq.broker.metrics.prometheus import DiskCollector, Metrics
from txmq.broker.produce.delay import DELAY_FILE, DelaySchedule
from txmq.broker.produce.send_path import SendPath
from txmq.broker.rpc.sessions import Clients
from txmq.broker.topics.registry import TopicRegistry
from txmq.errors import ConfigError
from txmq.store.files.disk import make_private_dirs, open_private, tighten_tree
from txmq.store.store import Store
from txmq.txn.coordinator import Resolver, Transactions
from txmq.txn.ledger import LEDGER_TOPIC, SinkLedger

log = logging.getLogger("txmq.broker")


def wall_ms() -> int:
    """The broker's wall clock, in milliseconds since the epoch (cores get it as ``now_ms``)."""
    return time.time_ns() // 1_000_000


LOCK_FILE = "broker.lock"


def lock_data_dir(data_dir: Path) -> int:
    """Take the data directory for this process (created 0700 if missing); returns the lock's
    file descriptor. Then take group and other permissions away from everything in it (a
    directory made by an older broker, or by hand): one log line says what changed.

    Two brokers on one directory would interleave appends to one commit log. The lock is an
    advisory ``flock`` that the kernel drops when the process dies, so a SIGKILLed broker never
    leaves a stale lock behind.

    Raises:
        ConfigError: another process holds the directory, or an entry in it belongs to another
            user (its permissions cannot be tightened).
    """
    make_private_dirs(data_dir)
    fd = open_private(data_dir / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"data directory {data_dir} is in use by another broker (pid {holder})"
        ) from None
    try:
        _tighten(data_dir)
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _tighten(data_dir: Path) -> None:
    changed = tighten_tree(data_dir)
    if changed is not None:
        log.warning("data directory %s", changed)


class Parts:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        resolvers: list[Resolver] | None = None,
        now_ms: Callable[[], int] = wall_ms,
        visible_end: int | None = None,
    ) -> None:
        self.config = config
        # The broker's one clock, injected into every part that reads time.
        self.now_ms = now_ms
        d = config.data_dir
        self._lock_fd = lock_data_dir(d)
        try:
            # ``visible_end``: a SYNC leader's read hold starts there (Store.open, ADR 0005).
            self.store = Store.open(
                d / "store", config.store, now_ms=now_ms, visible_end=visible_end
            )
        except BaseException:
            os.close(self._lock_fd)
            raise
        try:
            self._open_rest(config, resolvers)
        except BaseException:
            # Recovery of a later part failed: still close the store, so its checkpoint and
            # abort marker say what really happened.
            self._close_store()
            raise

    def _open_rest(self, config: BrokerConfig, resolvers: list[Resolver] | None) -> None:
        d = config.data_dir
        self.disk = self.store.disk
        self.metrics = Metrics()
        self.topics = TopicRegistry(
            d / "topics.json",
            self.disk,
            auto_create=config.auto_create_topics,
            default_queues=config.default_queue_count,
            # The Spark sink's ledger belongs to the broker (its check-back reads it): created
            # on first use whether or not other topics are.
            implicit=frozenset({LEDGER_TOPIC}),
        )
        # The sink ledger's resolver; in a cluster ``app.serve`` tells it where the others are.
        self.ledger = SinkLedger(self.store.find_by_key)
        self.tx = Transactions(
            self.store,
            d,
            timeout_ms=config.transaction_timeout_ms,
            check_interval_ms=config.transaction_check_interval_ms,
            check_max=config.transaction_check_max,
            now_ms=self.now_ms,
            resolvers=resolvers if resolvers is not None else [self.ledger],
        )
        self.deliveries = ConsumerPositions(
            self.store,
            d,
            self.disk,
            attempts_max=config.delivery_attempts_max,
            backoff_initial_ms=config.retry_backoff_initial_ms,
            backoff_max_ms=config.retry_backoff_max_ms,
            now_ms=self.now_ms,
        )
        self.clients = Clients()
        self.lag = LagSource(
            self.deliveries.positions,
            lambda: self.clients.subscribed,
            lambda topic: self.topics.get(topic).queue_count,
            self.store.queue_offsets,
        )
        self.metrics.registry.register(LagCollector(self.lag))
        self.metrics.registry.register(DiskCollector(self.store))
        self.delay = DelaySchedule(self.store, d / DELAY_FILE, self.disk)
        self.sends = SendPath(
            store=self.store,
            tx=self.tx,
            topics=self.topics,
            delay=self.delay,
            metrics=self.metrics,
            now_ms=self.now_ms,
            body_size_max=config.store.body_size_max,
        )

    def grow_topics_to_log(self) -> None:
        """Give each topic at least the queues its log holds records in. For a replica group's
        leader (node/serve.py): one promoted before it copied its old leader's growth of a
        topic (``txmq topic update``, copied within REPLICA_TOPICS_PERIOD_MS) takes the count
        from the records the old leader wrote to the new queues, which would otherwise be out
        of every receive and route."""
        for name, seen in self.store.queues().items():
            if self.topics.exists(name) and seen > self.topics.get(name).queue_count:
                self.topics.grow(name, seen)

    def close(self) -> None:
        """Save every part's state, then close the store (flush + checkpoint) last.

        The store's disk reserve is given back first, so these saves fit on a full disk and the
        broker still stops cleanly (ADR 0003)."""
        try:
            self.store.release_reserve()
            self.deliveries.save(force=True)
            self.delay.save()
            self.tx.close()
        finally:
            self._close_store()

    def _close_store(self) -> None:
        try:
            self.store.close()
        finally:
            # Released only after the checkpoint, so a successor never sees a half-closed store.
            os.close(self._lock_fd)
