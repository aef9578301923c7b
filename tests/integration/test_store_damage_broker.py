"""A damaged commit-log record in a running broker, end to end.

Goal: a byte flipped in a cleanly closed segment, below the checkpoint, does not stall its queue:
a consumer gets every other message, and the damage is reported loudly: the broker's log, the
Prometheus gauge, the admin status and ``txmq store status`` (exit code 1).
Method: a real broker process; records written with the store itself between runs, the byte
flipped on the real file, messages consumed with the official client through ``txmq consume``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.cli.test_cli import ok, txmq
from tests.integration.conftest import BrokerProcess, wait_until
from txmq.client.admin import call
from txmq.model import RecordDraft
from txmq.store.log.segment import segment_name
from txmq.store.store import Store


def test_damaged_record_is_skipped_and_reported(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker")
    b.start()
    ok("topic", "create", "t", "--queues", "1", "--endpoints", b.endpoints)
    assert b.stop() == 0
    store = Store.open(b.data_dir / "store", now_ms=lambda: time.time_ns() // 1_000_000)
    offsets = [
        store.append(
            RecordDraft(topic="t", queue_id=0, body=f"body-{i}".encode() * 50, message_id=f"m{i}")
        ).physical_offset
        for i in range(6)
    ]
    store.close()
    with (b.data_dir / "store" / "commitlog" / segment_name(0)).open("r+b") as f:
        f.seek(offsets[2] + 150)
        f.write(b"\xee")
    b.start()
    try:
        out = ok(
            "consume",
            "t",
            "--group",
            "g",
            "--max",
            "5",
            "--wait-s",
            "10",
            "--endpoints",
            b.endpoints,
        )
        bodies = [json.loads(line)["body"] for line in out.splitlines() if line.strip()]
        assert sorted(x[: len("body-0")] for x in bodies) == [f"body-{i}" for i in (0, 1, 3, 4, 5)]
        status = txmq("store", "status", "--json", "--endpoints", b.endpoints)
        assert status.returncode == 1, status.stderr
        report = json.loads(status.stdout)
        assert report["damaged_records"] == 1 and report["damaged"][0]["offset"] == offsets[2]
        metrics = call(b.endpoints, "Status", {})["metrics"]
        assert "txmq_store_damaged_records 1.0" in metrics
        wait_until(lambda: "damaged commit-log record" in b.log_tail(200), 10, "the log line")
    finally:
        assert b.stop() == 0
