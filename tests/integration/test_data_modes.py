"""A broker's data directory is its user's only: what a fresh broker creates has no group or other
permission whatever the umask, and a directory left readable (an older broker, a copy, a hand
edit) is tightened at start, said in one log line, with its data kept.

Method: a real broker started under umask 0 (the most permissive), used by the official client
(a send, a committed transaction, a receive and an ack: the commit log, the queues, the index,
topics.json, the consumer positions), stopped cleanly (checkpoint, transaction snapshot); its
tree walked. Then every entry opened up to 0755/0644 and the broker started again.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rocketmq import TransactionResolution

from tests.integration.clients import Checker, consumer, drain, message, producer
from tests.integration.conftest import FAST, BrokerProcess

TOPIC = "private-data"


def loose(root: Path) -> list[str]:
    """Entries at or under ``root`` that group or others may use, as ``path mode`` (symbolic
    links are not followed: their own mode means nothing)."""
    found = []
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISLNK(info.st_mode) and mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {mode:04o}")
    return found


def _use(b: BrokerProcess) -> None:
    p = producer(b.endpoints, (TOPIC,), Checker(lambda m: TransactionResolution.COMMIT))
    try:
        p.send(message(TOPIC, b"plain"))
        tx = p.begin_transaction()
        p.send(message(TOPIC, b"committed"), tx)
        tx.commit()
    finally:
        p.shutdown()
    c = consumer(b.endpoints, "private-group", TOPIC)
    try:
        assert len(drain(c, 2, 30)) == 2
    finally:
        c.shutdown()


def test_broker_data_is_owner_only_when_created_and_tightened_at_start(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker", list(FAST))
    old = os.umask(0)  # inherited by the broker: what it creates would be 0777/0666
    try:
        b.start()
    finally:
        os.umask(old)
    try:
        _use(b)
    finally:
        assert b.stop() == 0
    names = {p.name for p in b.data_dir.rglob("*")}
    assert {"broker.lock", "topics.json", "store"} <= names, names
    assert len(names) > 8, names  # segments, queues, index, positions, checkpoint, snapshot
    assert loose(b.data_dir) == []

    # Opened up, as an older broker (or cp -r under umask 022) left it.
    dirs = files = 0
    for path in [b.data_dir, *b.data_dir.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
            dirs += 1
        else:
            path.chmod(0o644)
            files += 1
    assert len(loose(b.data_dir)) == dirs + files
    b.start()
    try:
        c = consumer(b.endpoints, "second-group", TOPIC)  # the data is all there
        try:
            assert {m.body for m in drain(c, 2, 30)} == {b"plain", b"committed"}
        finally:
            c.shutdown()
    finally:
        assert b.stop() == 0
    said = [line for line in b.log_path.read_text().splitlines() if "permissions away" in line]
    assert len(said) == 1, said
    assert f"broker: took group and other permissions away from {dirs} directories and " in said[0]
    assert f" and {files} files, now owner only (e.g. broker (was 0755)" in said[0], said[0]
    assert loose(b.data_dir) == []
