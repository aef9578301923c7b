"""Store configuration, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from txmq import limits
from txmq.errors import ConfigError
from txmq.model import FlushMode


@dataclass(frozen=True, slots=True)
class StoreConfig:
    segment_size_bytes: int = limits.SEGMENT_SIZE_DEFAULT
    body_size_max: int = limits.BODY_SIZE_MAX_DEFAULT
    # SYNC is the default: an acknowledged write survives power loss.
    flush_mode: FlushMode = FlushMode.SYNC
    flush_interval_ms: int = limits.FLUSH_INTERVAL_MS_DEFAULT
    retention_ms: int = limits.RETENTION_MS_DEFAULT
    disk_watermark: float = limits.DISK_WATERMARK_DEFAULT
    consume_queue_entries_per_file: int = limits.CONSUME_QUEUE_ENTRIES_PER_FILE
    # SYNC group commit: see limits.GROUP_COMMIT_LINGER_US_DEFAULT.
    group_commit_linger_us: int = limits.GROUP_COMMIT_LINGER_US_DEFAULT

    def __post_init__(self) -> None:
        if not limits.SEGMENT_SIZE_MIN <= self.segment_size_bytes <= limits.SEGMENT_SIZE_MAX:
            raise ConfigError(
                f"segment_size_bytes must be {limits.SEGMENT_SIZE_MIN}..{limits.SEGMENT_SIZE_MAX},"
                f" got {self.segment_size_bytes}"
            )
        if not 1 <= self.body_size_max <= limits.BODY_SIZE_MAX_LIMIT:
            raise ConfigError(
                f"body_size_max must be 1..{limits.BODY_SIZE_MAX_LIMIT}, got {self.body_size_max}"
            )
        if self.body_size_max + limits.PROPERTIES_SIZE_MAX + 4096 > self.segment_size_bytes:
            raise ConfigError(
                f"segment_size_bytes must hold at least one maximum-size record: got"
                f" {self.segment_size_bytes}, at least"
                f" {self.body_size_max + limits.PROPERTIES_SIZE_MAX + 4096} with body_size_max"
                f" {self.body_size_max}"
            )
        if not 1 <= self.flush_interval_ms <= 60_000:
            raise ConfigError(f"flush_interval_ms must be 1..60000, got {self.flush_interval_ms}")
        if self.retention_ms < 60_000:
            raise ConfigError(
                f"retention_ms must be at least 60000 (one minute), got {self.retention_ms}"
            )
        if not 0.0 < self.disk_watermark <= 1.0:
            raise ConfigError(
                f"disk_watermark must be in (0, 1] (a fraction of the disk), got"
                f" {self.disk_watermark}"
            )
        if not 0 <= self.group_commit_linger_us <= limits.GROUP_COMMIT_LINGER_US_MAX:
            raise ConfigError(
                f"group_commit_linger_us must be 0..{limits.GROUP_COMMIT_LINGER_US_MAX},"
                f" got {self.group_commit_linger_us}"
            )
        if self.consume_queue_entries_per_file < 16:
            raise ConfigError(
                "consume_queue_entries_per_file must be >= 16, got"
                f" {self.consume_queue_entries_per_file}"
            )
