"""Broker configuration: one frozen value, validated on construction.

Owns: the BrokerConfig dataclass and its validation. Loading from a TOML file, ``TXMQ_*``
environment variables and flags lives in config_sources.py, which builds this value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from txmq import limits
from txmq.coordination.etcd import EtcdTls
from txmq.errors import ConfigError
from txmq.store.config import StoreConfig


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    # 0 picks a free port; the server prints and returns the one it bound.
    port: int = 8081
    # The endpoint QueryRoute advertises; defaults to host:bound-port.
    advertised_host: str = ""
    metrics_port: int | None = None
    # The metrics page has no authentication: it stays on this machine unless set otherwise,
    # whatever ``host`` the gRPC port binds (docs/security.md).
    metrics_host: str = "127.0.0.1"
    # Off, as RocketMQ's autoCreateTopicEnable in production: any caller could otherwise create
    # topics (and their files) just by naming them.
    auto_create_topics: bool = False
    default_queue_count: int = 4
    store: StoreConfig = field(default_factory=StoreConfig)
    # Transactions (RocketMQ defaults: 6 s, 30 s, 15).
    transaction_timeout_ms: int = limits.TRANSACTION_TIMEOUT_MS_DEFAULT
    transaction_check_interval_ms: int = limits.TRANSACTION_CHECK_INTERVAL_MS_DEFAULT
    transaction_check_max: int = limits.TRANSACTION_CHECK_MAX_DEFAULT
    # Consumers.
    delivery_attempts_max: int = limits.DELIVERY_ATTEMPTS_MAX_DEFAULT
    # First redelivery backoff; doubles per attempt up to retry_backoff_max_ms.
    retry_backoff_initial_ms: int = 1_000
    retry_backoff_max_ms: int = 60_000
    long_polling_timeout_ms: int = limits.LONG_POLLING_TIMEOUT_MS_MAX
    # How often background loops (check-back, redelivery, delay) wake up.
    tick_ms: int = 200
    # Security (docs/security.md). Without an ACL file every caller may do everything.
    acl_file: Path | None = None
    # How far a signature's x-mq-date-time may be from this broker's clock (UTC), either side:
    # how long a captured header stays usable. Wider only for clients that sign their local
    # time as UTC (rocketmq-python-client 5.1.2 outside UTC).
    auth_date_skew_s: int = limits.AUTH_DATE_SKEW_S_DEFAULT
    # PEM files: with a certificate and its key the port serves TLS only; with a client CA it
    # also requires a client certificate signed by it (mutual TLS).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    # A cluster of brokers (txmq.coordination.cluster_file): this broker is the member named
    # broker_name, or the one whose endpoint is host:port; it then binds its member's port.
    cluster_file: Path | None = None
    broker_name: str = ""
    # A secured cluster (docs/security.md): the ACL user (an admin) whose secret signs this
    # member's calls to its peers, and the CA that signed the peers' TLS certificates.
    cluster_access_key: str = ""
    cluster_ca_file: Path | None = None
    # The client certificate (and key) this member presents to its peers when they require one
    # (tls_client_ca); default: its own tls_cert/tls_key, which then need the clientAuth
    # extended key usage besides serverAuth (docs/security.md).
    tls_peer_cert: Path | None = None
    tls_peer_key: Path | None = None
    # Replication (docs/adr/0005-replication-leadership.md): with an etcd endpoint this broker
    # is one replica of the group replica_group (default: its broker name), led through etcd;
    # a write is acknowledged once min_insync_replicas replicas (the leader included) have it.
    etcd: str = ""
    # etcd over TLS (docs/security.md): the CA that signed etcd's certificate, and the client
    # certificate and key this replica presents when etcd runs with --client-cert-auth.
    etcd_ca_file: Path | None = None
    etcd_cert_file: Path | None = None
    etcd_key_file: Path | None = None
    replica_group: str = ""
    min_insync_replicas: int = 1

    @property
    def etcd_tls(self) -> EtcdTls | None:
        """How to reach etcd: over TLS when a CA is given, else plaintext (None)."""
        return EtcdTls.of(self.etcd_ca_file, self.etcd_cert_file, self.etcd_key_file)

    def __post_init__(self) -> None:
        if not 1 <= self.min_insync_replicas <= limits.REPLICAS_MAX:
            raise ConfigError(
                f"min_insync_replicas must be 1..{limits.REPLICAS_MAX},"
                f" got {self.min_insync_replicas}"
            )
        if self.etcd and not (self.replica_group or self.broker_name):
            raise ConfigError("a replica needs --replica-group or --broker-name (its group)")
        EtcdTls.of(self.etcd_ca_file, self.etcd_cert_file, self.etcd_key_file)  # both or none
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be 0..65535, got {self.metrics_port}")
        if not 1 <= self.default_queue_count <= limits.QUEUES_PER_TOPIC_MAX:
            raise ConfigError(
                f"default_queue_count must be 1..{limits.QUEUES_PER_TOPIC_MAX}, "
                f"got {self.default_queue_count}"
            )
        if self.transaction_timeout_ms < 0:
            raise ConfigError(
                f"transaction_timeout_ms must be >= 0, got {self.transaction_timeout_ms}"
            )
        interval_max = limits.TRANSACTION_CHECK_INTERVAL_MS_MAX
        interval_min = limits.TRANSACTION_CHECK_INTERVAL_MS_MIN
        if not interval_min <= self.transaction_check_interval_ms <= interval_max:
            raise ConfigError(
                f"transaction_check_interval_ms must be between {interval_min} and "
                f"{interval_max}, got {self.transaction_check_interval_ms}"
            )
        if not 1 <= self.transaction_check_max <= limits.TRANSACTION_CHECK_MAX_LIMIT:
            raise ConfigError(
                f"transaction_check_max must be 1..{limits.TRANSACTION_CHECK_MAX_LIMIT},"
                f" got {self.transaction_check_max}"
            )
        if not 1 <= self.delivery_attempts_max <= limits.DELIVERY_ATTEMPTS_MAX_LIMIT:
            raise ConfigError(
                f"delivery_attempts_max must be 1..{limits.DELIVERY_ATTEMPTS_MAX_LIMIT},"
                f" got {self.delivery_attempts_max}"
            )
        if not 0 < self.retry_backoff_initial_ms <= self.retry_backoff_max_ms:
            raise ConfigError(
                "need 0 < retry_backoff_initial_ms <= retry_backoff_max_ms, got"
                f" {self.retry_backoff_initial_ms} and {self.retry_backoff_max_ms}"
            )
        if not limits.TICK_MS_MIN <= self.tick_ms <= limits.TICK_MS_LIMIT:
            raise ConfigError(
                f"tick_ms must be {limits.TICK_MS_MIN}..{limits.TICK_MS_LIMIT}, got {self.tick_ms}"
            )
        if not 1 <= self.auth_date_skew_s <= limits.AUTH_DATE_SKEW_S_MAX:
            raise ConfigError(
                f"auth_date_skew_s must be 1..{limits.AUTH_DATE_SKEW_S_MAX} (14 h 15 min: any"
                f" time zone's offset and 15 minutes), got {self.auth_date_skew_s}"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("tls_cert and tls_key go together (a certificate and its key)")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ConfigError("tls_client_ca needs tls_cert and tls_key (mutual TLS is TLS)")
        if (self.tls_peer_cert is None) != (self.tls_peer_key is None):
            raise ConfigError("tls_peer_cert and tls_peer_key go together (a certificate, its key)")
        if self.tls_peer_cert is not None and self.tls_cert is None:
            raise ConfigError("tls_peer_cert needs tls_cert and tls_key (peer calls use TLS)")
