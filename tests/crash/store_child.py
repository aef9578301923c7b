"""Child process for the kill -9 crash test: appends from several threads and prints the id of
each record only after append() returned (i.e. after the fsync that covers it)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from txmq.model import RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.store import Store


def main() -> None:
    data_dir, round_no, threads = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    cfg = StoreConfig(segment_size_bytes=256 * 1024, body_size_max=64 * 1024)
    store = Store.open(data_dir, cfg, now_ms=lambda: time.time_ns() // 1_000_000)
    out_lock = threading.Lock()
    print("ready", flush=True)

    def writer(n: int) -> None:
        for i in range(100_000):
            mid = f"r{round_no}-w{n}-{i}"
            body = (mid * 20).encode()[: 200 + (i * 37) % 1500]
            store.append(
                RecordDraft(topic="crash", queue_id=n % 3, body=body, message_id=mid, keys=(mid,))
            )
            with out_lock:
                sys.stdout.write(mid + "\n")
                sys.stdout.flush()

    for n in range(threads):
        threading.Thread(target=writer, args=(n,), daemon=True).start()
    time.sleep(60)


if __name__ == "__main__":
    main()
