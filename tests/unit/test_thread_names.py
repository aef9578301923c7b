"""txmq.thread_names: the OS name of a thread (what /proc, top -H and perf show, and what
bench_broker's per-thread CPU split reads) is set from its threading name, and the store's
flusher thread carries it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq.model import RecordDraft
from txmq.store.files.sim_disk import SimDisk
from txmq.store.store import Store
from txmq.thread_names import name_os_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl, /proc")


def _comm(tid: int) -> str:
    return Path(f"/proc/self/task/{tid}/comm").read_text().strip()


def test_a_thread_gets_its_threading_name_cut_to_15_bytes() -> None:
    seen: list[tuple[bool, str]] = []

    def run() -> None:
        seen.append((name_os_thread(), _comm(threading.get_native_id())))

    t = threading.Thread(target=run, name="txmq-a-rather-long-name")
    t.start()
    t.join(10)
    assert seen == [(True, "txmq-a-rather-l")]


def test_the_store_flusher_thread_is_named_in_proc(clock: Clock) -> None:
    store = Store.open(Path("/sim/store"), SMALL, now_ms=clock, disk=SimDisk())
    try:
        flusher = store.writes.group._flusher
        assert flusher.native_id is not None
        # The flusher names itself first thing: once it has synced a write, it is named.
        store.append_many([RecordDraft(topic="t", queue_id=0, body=b"x", message_id="m0")])
        assert _comm(flusher.native_id) == "txmq-flusher"
    finally:
        store.close()
