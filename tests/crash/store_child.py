"""Child process for the store's kill -9 crash tests.

Several threads append in SYNC mode (single records and 3-record batches) and print, on stdout:

    b <id> <id> <id>   before a batch is appended (its intent; it may or may not survive)
    A <id>             after append() returned: the record is acknowledged
    B <id> <id> <id>   after append_many() returned: the batch is acknowledged

Usage: store_child.py DATA_DIR ROUND THREADS
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from txmq.model import RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.store import Store

CONFIG = StoreConfig(segment_size_bytes=256 * 1024, body_size_max=64 * 1024)
QUEUES = 3


def body_of(message_id: str, i: int) -> bytes:
    """The body is a function of the id, so the parent can check it is intact."""
    return (message_id * 40).encode()[: 100 + (i * 37) % 1500]


def draft(message_id: str, i: int, writer: int) -> RecordDraft:
    return RecordDraft(
        topic="crash",
        queue_id=writer % QUEUES,
        body=body_of(message_id, i),
        message_id=message_id,
        keys=(f"key-{message_id}",),
        tag="even" if i % 2 == 0 else "odd",
    )


def main() -> None:
    data_dir, round_no, threads = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    store = Store.open(data_dir, CONFIG, now_ms=lambda: time.time_ns() // 1_000_000)
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def writer(n: int) -> None:
        for i in range(100_000):
            mid = f"r{round_no}-w{n}-{i}"
            if i % 5 == 4:
                ids = [f"{mid}-{j}" for j in range(3)]
                say("b " + " ".join(ids))
                store.append_many([draft(x, i, n) for x in ids])
                say("B " + " ".join(ids))
            else:
                store.append(draft(mid, i, n))
                say("A " + mid)

    say("ready")
    for n in range(threads):
        threading.Thread(target=writer, args=(n,), daemon=True).start()
    time.sleep(60)  # sleep: the writers run until the parent's SIGKILL lands


if __name__ == "__main__":
    main()
