"""Transaction ids: 32 hex digits of OS randomness, cut from a pool that is refilled in bulk.

Owns: ``new_transaction_id``. Why a pool: ``os.urandom`` (and so ``uuid.uuid4``) makes a
getrandom system call, which releases the GIL. On the broker's event loop every release lets the
flusher or gRPC's poller thread take the GIL, and taking it back costs the loop a futex wait and
a context switch (one per prepared transaction). One call per
``limits.TRANSACTION_ID_POOL_IDS`` ids makes that rare. The ids are as hard to guess as uuid4's
(128 random bits, uuid4 has 122) and each pool byte is handed out once.
Must not: hand out an id twice, also across a fork (the child refills its own pool).
"""

from __future__ import annotations

import os
import threading

from txmq import limits

_ID_BYTES = 16
_lock = threading.Lock()
_pool = b""
_at = 0
_pid = -1


def new_transaction_id() -> str:
    """A fresh transaction id: 32 lowercase hex digits, like ``uuid.uuid4().hex``."""
    global _pool, _at, _pid
    with _lock:
        if _at + _ID_BYTES > len(_pool) or _pid != os.getpid():
            _pool = os.urandom(_ID_BYTES * limits.TRANSACTION_ID_POOL_IDS)
            _at, _pid = 0, os.getpid()
        raw = _pool[_at : _at + _ID_BYTES]
        _at += _ID_BYTES
    return raw.hex()
