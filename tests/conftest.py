"""Shared fixtures: a seeded RNG (replay with TXMQ_SEED=...), a manual clock, small store config."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from txmq.store.config import StoreConfig

SMALL = StoreConfig(segment_size_bytes=256 * 1024, body_size_max=64 * 1024)


class Clock:
    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def seed() -> Iterator[int]:
    value = int(os.environ.get("TXMQ_SEED", random.randrange(1 << 30)))
    print(f"TXMQ_SEED={value}")
    yield value
