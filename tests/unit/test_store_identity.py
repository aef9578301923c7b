"""A replica store's incarnation (txmq.store.replica.identity): made once, kept, new after
a wipe."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from txmq.store.files.disk import OsDisk
from txmq.store.replica.identity import FILE_NAME, incarnation, read_incarnation, renew_incarnation
from txmq.store.store import Store


def test_an_empty_directory_gets_an_incarnation_that_every_later_open_finds(
    tmp_path: Path,
) -> None:
    disk, store_dir = OsDisk(), tmp_path / "data" / "store"
    assert read_incarnation(disk, store_dir) is None
    first = incarnation(disk, store_dir)
    assert len(first) == 32 and (store_dir / FILE_NAME).exists()
    # The store opens beside it and keeps it; a later open finds the same id.
    Store.open(store_dir, now_ms=lambda: 0).close()
    assert incarnation(disk, store_dir) == first == read_incarnation(disk, store_dir)
    assert json.loads((store_dir / FILE_NAME).read_text()) == {"version": 1, "incarnation": first}


def test_a_wiped_directory_gets_a_new_incarnation(tmp_path: Path) -> None:
    disk, store_dir = OsDisk(), tmp_path / "store"
    first = incarnation(disk, store_dir)
    shutil.rmtree(tmp_path)
    assert incarnation(disk, store_dir) != first


def test_an_unreadable_file_counts_as_none(tmp_path: Path) -> None:
    disk, store_dir = OsDisk(), tmp_path / "store"
    first = incarnation(disk, store_dir)
    (store_dir / FILE_NAME).write_bytes(b'{"incarn')
    assert read_incarnation(disk, store_dir) is None
    second = incarnation(disk, store_dir)
    assert second != first and read_incarnation(disk, store_dir) == second


def test_a_renewed_incarnation_replaces_the_one_kept(tmp_path: Path) -> None:
    """A store whose log lost records it had confirmed (leadership.py) is another member."""
    disk, store_dir = OsDisk(), tmp_path / "store"
    first = incarnation(disk, store_dir)
    second = renew_incarnation(disk, store_dir)
    assert second != first and incarnation(disk, store_dir) == second
