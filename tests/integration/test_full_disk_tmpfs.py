"""A real full disk under a real broker, on a small tmpfs: slow, root only.

Goal: with the data directory on a 48 MiB tmpfs, `disk_watermark = 1.0`, 8 MiB segments and
four writers of 200 KiB messages, the disk fills: sends are refused with
MASTER_PERSISTENCE_TIMEOUT (never an internal error), receives keep working, SIGTERM stops
the broker cleanly (exit 0, no abort marker), it restarts on the still-full disk, accepts
sends again once space is freed, and a rebuild from the log alone (checkpoint removed) finds
every acknowledged message.
Method: mount a tmpfs (needs root; skipped otherwise), raw gRPC with the official client's stubs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.cli.test_cli import ok, txmq
from tests.integration.conftest import BrokerProcess
from txmq import errors
from txmq.client.admin import call

pytestmark = pytest.mark.slow
META = [("x-mq-client-id", "full-disk-test")]
BODY = 200 * 1024


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], check=False)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def send(stub: Any, i: int) -> Any:
    msg = pb.Message(body=bytes([i % 251]) * BODY)
    msg.topic.name = "full"
    msg.system_properties.message_id = f"m{i}"
    msg.system_properties.message_type = pb.NORMAL
    return stub.SendMessage(sv.SendMessageRequest(messages=[msg]), metadata=META, timeout=30)


def stored(endpoints: str) -> int:
    return sum(
        q["max"] - q["min"] for q in call(endpoints, "TopicDescribe", {"name": "full"})["queues"]
    )


def test_full_disk_refuses_stops_cleanly_restarts_and_loses_nothing(tmpfs: Path) -> None:
    filler = tmpfs / "filler"
    filler.write_bytes(bytes(4 << 20))  # freed later, as an operator would
    os.environ["TXMQ_STORE_DISK_WATERMARK"] = "1.0"
    b = BrokerProcess(tmpfs / "d", ["--segment-size-bytes", str(8 << 20)])
    try:
        b.start()
        ok("topic", "create", "full", "--queues", "2", "--endpoints", b.endpoints)
        channel = grpc.insecure_channel(b.endpoints)
        stub = sg.MessagingServiceStub(channel)

        # Several writers at once, as in the report: each stops at its first refusal.
        def writer(w: int) -> tuple[int, Any]:
            for i in range(200):
                reply = send(stub, w * 1000 + i)
                if reply.status.code != errors.CODE_OK:
                    return i, reply.status
            return 200, None

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(writer, range(4)))
        acked = sum(n for n, _ in results)
        refusals = [st for _, st in results if st is not None]
        refusal = refusals[0] if refusals else None
        assert all(st.code == errors.CODE_MASTER_PERSISTENCE_TIMEOUT for st in refusals)
        assert refusal is not None, "the disk never filled"
        assert refusal.code == errors.CODE_MASTER_PERSISTENCE_TIMEOUT, refusal.message
        assert "disk full (out of space)" in refusal.message, "a 100% watermark never refuses"
        assert stored(b.endpoints) == acked, "reads keep working"
        channel.close()
        assert b.stop() == 0, b.log_tail()
        assert not (tmpfs / "d" / "store" / "abort").exists(), "a clean stop"
        b.start()  # on the still-full disk
        assert stored(b.endpoints) == acked
        filler.unlink()
        channel = grpc.insecure_channel(b.endpoints)
        stub = sg.MessagingServiceStub(channel)
        assert send(stub, 9999).status.code == errors.CODE_OK, "writable once space is freed"
        channel.close()
        assert b.stop() == 0, b.log_tail()
        (tmpfs / "d" / "store" / "checkpoint.json").unlink()
        b.start()
        assert stored(b.endpoints) == acked + 1, "a rebuild from the log finds every message"
        assert b.stop() == 0
        report = txmq("store", "verify", "--data-dir", str(tmpfs / "d"), "--json")
        assert report.returncode == 0, report.stdout
    finally:
        os.environ.pop("TXMQ_STORE_DISK_WATERMARK", None)
        b.stop()
