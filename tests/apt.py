"""One apt-get at a time among test processes: `make test` runs two pytest-xdist workers (and
other checkouts may run tests too), and a second apt-get would fail on dpkg's lock, so its tests
would skip instead of running. Holders re-check for the package once they have the lock."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = Path("/tmp/txmq-tests-apt.lock")


@contextmanager
def apt_lock() -> Iterator[None]:
    with LOCK.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield
