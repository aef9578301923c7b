"""Owner-only data files (store/files/disk.py): OsDisk creates directories 0700 and files 0600
whatever the umask, and ``tighten_tree`` takes group and other permissions away from an existing
tree, leaving symbolic links and what they point to alone. Real files."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from txmq.store.files.disk import OsDisk, make_private_dirs, tighten_tree


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o277], ids=["none", "usual", "owner-write"])
def test_created_directories_and_files_are_owner_only_whatever_the_umask(
    tmp_path: Path, mask: int
) -> None:
    disk = OsDisk()
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "positions.json.tmp").write_bytes(b"left by a crash")
    (tmp_path / "e" / "positions.json.tmp").chmod(0o666)
    with umask(mask):
        handle = disk.open(tmp_path / "a" / "b" / "segment")
        handle.pwrite(b"x", 0)
        handle.close()
        disk.makedirs(tmp_path / "c" / "d")
        disk.write_atomic(tmp_path / "e" / "positions.json", b"{}")
        make_private_dirs(tmp_path / "f" / "g")
    for d in ("a", "a/b", "c", "c/d", "f", "f/g"):
        assert mode(tmp_path / d) == 0o700, d
    assert mode(tmp_path / "a" / "b" / "segment") == 0o600
    assert mode(tmp_path / "e" / "positions.json") == 0o600
    assert (tmp_path / "e" / "positions.json").read_bytes() == b"{}"


def test_an_existing_tree_is_tightened_and_links_are_left_alone(tmp_path: Path) -> None:
    outside = tmp_path / "shared.txt"
    outside.write_text("not the broker's")
    outside.chmod(0o644)
    root = tmp_path / "data"
    (root / "store").mkdir(parents=True)
    for d in (root, root / "store"):
        d.chmod(0o755)
    (root / "topics.json").write_text("{}")
    (root / "topics.json").chmod(0o664)
    (root / "store" / "run.sh").write_text("")
    (root / "store" / "run.sh").chmod(0o750)
    (root / "store" / "mine").write_text("")
    (root / "store" / "mine").chmod(0o600)
    (root / "link").symlink_to(outside)
    said = tighten_tree(root)
    assert said is not None
    assert said.startswith(f"{root}: took group and other permissions away from 2 directories")
    assert "and 2 files, now owner only (e.g. data (was 0755)" in said
    assert [mode(p) for p in (root, root / "store")] == [0o700, 0o700]
    assert mode(root / "topics.json") == 0o600 and mode(root / "store" / "run.sh") == 0o700
    assert mode(outside) == 0o644  # a link's target is not the broker's to change
    assert tighten_tree(root) is None  # nothing left to say
