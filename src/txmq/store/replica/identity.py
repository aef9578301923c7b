"""A replica's store incarnation: which life of its data directory this is (ADR 0005).

Owns: ``incarnation.json`` in a replica's store directory, ``{"version": 1, "incarnation":
"<hex>"}``: a random id created (durable: written to a temporary file, fsynced, renamed, the
directory fsynced) the first time a replica opens the directory and found there at every later
open. A directory that was wiped (or a store this replica wiped itself, follower.py) has none, so
it gets a new one; a store whose log ends below what the replica confirmed to its group (a
restored backup, a lost tail: leadership.py checks it) gets a new one too (``renew_incarnation``):
the id changes exactly when the data may have been lost. The leader stores
each in-sync member as (name, incarnation) and only a replica whose pair is stored may lead
(Kafka's broker epochs in the eligible-leader-replica set, KIP-966), so a member restarted on an
empty disk under its old name is not mistaken for the one that held the acknowledged records.
Must not: decide anything about leadership (broker/leadership/election.py does).

An unreadable file counts as none (a new id): the safe direction, since a new incarnation only
has to catch up again before it counts or may lead. ``write_atomic`` never leaves a torn file.
"""

from __future__ import annotations

import json
import logging
import secrets
from pathlib import Path
from typing import Final

from txmq import limits
from txmq.store.files.disk import Disk

FILE_NAME: Final = "incarnation.json"
log = logging.getLogger(__name__)


def new_incarnation() -> str:
    return secrets.token_hex(limits.REPLICA_INCARNATION_BYTES)


def read_incarnation(disk: Disk, store_dir: Path) -> str | None:
    """The incarnation stored in ``store_dir`` (None: none, or unreadable)."""
    path = store_dir / FILE_NAME
    if not disk.exists(path):
        return None
    raw = disk.read_all(path)
    try:
        found = json.loads(raw)["incarnation"]
    except (ValueError, KeyError, TypeError):
        log.warning("%s is unreadable (%r): this store gets a new incarnation", path, raw[:80])
        return None
    if not isinstance(found, str) or not found:
        log.warning("%s holds no incarnation: this store gets a new one", path)
        return None
    return found


def incarnation(disk: Disk, store_dir: Path) -> str:
    """This store directory's incarnation: the one it holds, else a new one made durable
    before it is returned (so no one ever hears of an id a crash could lose)."""
    found = read_incarnation(disk, store_dir)
    if found is not None:
        return found
    return renew_incarnation(disk, store_dir)


def renew_incarnation(disk: Disk, store_dir: Path) -> str:
    """A new incarnation for ``store_dir``, durable before it is returned, replacing any it
    held: its log lost records this replica had confirmed (a restored backup, a lost tail;
    ADR 0005), so it is not the member the in-sync set names any more."""
    made = new_incarnation()
    fresh = not disk.exists(store_dir)
    disk.makedirs(store_dir)
    if fresh:  # the store directory's own entry, so a power loss cannot drop file and id
        disk.sync_dir(store_dir.parent)
    doc = {"version": 1, "incarnation": made}
    disk.write_atomic(store_dir / FILE_NAME, json.dumps(doc, separators=(",", ":")).encode())
    log.info("store %s: new incarnation %s", store_dir, made)
    return made
