"""The disk interface: every file operation the store performs goes through a ``Disk``.

Owns: ``Disk``/``FileHandle`` (the protocols), ``OsDisk`` (real files, real fdatasync) and
``FaultyDisk`` (real files with seeded faults: failing fsync, reported usage). The in-memory
simulated disk that loses unsynced data on a simulated crash is ``store/files/sim_disk.py``. The
store never calls ``open``/``os.*`` on data files directly, so faults can be injected
deterministically. Must not: hold store logic, cache data, or retry a failed fsync.

Permissions: the files hold every topic's message bodies, so ``OsDisk`` creates directories
``DIR_MODE`` (0700) and files ``FILE_MODE`` (0600), set explicitly whatever the process's
umask; ``make_private_dirs`` and ``tighten_tree`` (an existing tree, at a broker's start) serve
the broker's and ``txmq cluster up``'s other files the same way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import random
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from txmq.errors import ConfigError

# Owner only: group and others get nothing (docs/security.md).
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
_GROUP_OTHER: Final = 0o077


class FileHandle(Protocol):
    def pwrite(self, data: bytes, offset: int) -> None: ...
    def pread(self, size: int, offset: int) -> bytes: ...
    def allocate(self, offset: int, length: int) -> bool: ...
    def sync(self) -> None: ...
    def truncate(self, size: int) -> None: ...
    def size(self) -> int: ...
    def close(self) -> None: ...


class Disk(Protocol):
    def open(self, path: Path) -> FileHandle: ...
    def list(self, directory: Path) -> list[str]: ...
    def makedirs(self, directory: Path) -> None: ...
    def remove(self, path: Path) -> None: ...
    def sync_dir(self, directory: Path) -> None: ...
    def rename(self, source: Path, target: Path) -> None: ...
    def exists(self, path: Path) -> bool: ...
    def write_atomic(self, path: Path, data: bytes) -> None: ...
    def read_all(self, path: Path) -> bytes: ...
    def used_ratio(self, directory: Path) -> float: ...
    def space(self, directory: Path) -> tuple[int, int]: ...


class OsFile:
    """A real file opened read/write, created if missing.

    The descriptor is closed by ``close()`` or when the last reference goes: a reader that looked
    up a segment just before retention removed it keeps a valid descriptor (the unlinked file's
    data stays readable), instead of reading a descriptor number the OS has reused.
    """

    def __init__(self, path: Path) -> None:
        make_private_dirs(path.parent)
        self.path = path
        self._fd = open_private(path, os.O_RDWR)

    def pwrite(self, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            # os.pwrite may write less than asked; loop so a record is never silently short.
            written = os.pwrite(self._fd, view, offset)
            view = view[written:]
            offset += written

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def allocate(self, offset: int, length: int) -> bool:
        """Reserve disk blocks for ``[offset, offset + length)`` without changing the file's
        size (fallocate with FALLOC_FL_KEEP_SIZE), so later writes there cannot hit ENOSPC.

        Returns False where the file system cannot reserve (no fallocate): the caller then
        relies on undoing a write that ENOSPC cut short.

        Raises:
            OSError: ENOSPC (or EDQUOT) when the space is not there.
        """
        return fallocate_keep_size(self._fd, offset, length)

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class OsDisk:
    """Real files. ``write_atomic`` is write-temp, fsync, rename, fsync directory."""

    def open(self, path: Path) -> FileHandle:
        return OsFile(path)

    def list(self, directory: Path) -> list[str]:
        if not directory.exists():
            return []
        return sorted(os.listdir(directory))

    def makedirs(self, directory: Path) -> None:
        make_private_dirs(directory)

    def remove(self, path: Path) -> None:
        path.unlink()

    def sync_dir(self, directory: Path) -> None:
        """Make removals and creations in ``directory`` durable (a power loss keeps them)."""
        sync_directory(directory)

    def rename(self, source: Path, target: Path) -> None:
        os.replace(source, target)
        sync_directory(target.parent)

    def exists(self, path: Path) -> bool:
        return path.exists()

    def write_atomic(self, path: Path, data: bytes) -> None:
        make_private_dirs(path.parent)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # a temporary file a crash left keeps its old mode
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except OSError:
            # ENOSPC (or worse) part-way: the old file is untouched; the partial copy must not
            # keep holding space on a full disk.
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        else:
            os.close(fd)
        os.replace(tmp, path)
        sync_directory(path.parent)

    def read_all(self, path: Path) -> bytes:
        return path.read_bytes()

    def used_ratio(self, directory: Path) -> float:
        total, free = self.space(directory)
        return 0.0 if total == 0 else 1.0 - free / total

    def space(self, directory: Path) -> tuple[int, int]:
        """(total bytes, bytes free for this process) of the file system holding ``directory``."""
        st = os.statvfs(directory)
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def make_private_dirs(directory: Path) -> None:
    """``mkdir -p directory``, each directory it creates ``DIR_MODE`` whatever the umask (an
    existing one is left as it is: ``tighten_tree`` tightens a tree at start)."""
    missing: list[Path] = []
    for d in (directory, *directory.parents):  # bounded by the path's depth
        if d.is_dir():
            break
        missing.append(d)
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another thread or process: theirs to set
        os.chmod(d, DIR_MODE)  # the umask may have taken bits from the owner too


def open_private(path: Path, flags: int) -> int:
    """Open ``path`` with ``flags``, creating it ``FILE_MODE`` (exactly, whatever the umask) if
    missing; an existing file keeps its mode. Returns the descriptor."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return os.open(path, flags)
    try:
        os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd


def tighten_tree(root: Path) -> str | None:
    """Take group and other permissions away from ``root`` and every directory and regular file
    under it (symbolic links are neither followed nor changed). Returns one sentence saying what
    changed, for the log, or None when nothing had to.

    Raises:
        ConfigError: an entry this process may not change (another user's).
    """
    changed = [0, 0]
    examples: list[str] = []

    def tighten(path: Path) -> None:
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        kind = 0 if stat.S_ISDIR(info.st_mode) else 1 if stat.S_ISREG(info.st_mode) else -1
        if kind < 0 or not mode & _GROUP_OTHER:
            return
        try:
            os.chmod(path, mode & ~_GROUP_OTHER)
        except PermissionError as exc:
            raise ConfigError(
                f"{path}: mode {mode:04o} lets group or others in, and this user may not change "
                f"it ({exc.strerror}): the broker's user must own its data directory"
            ) from exc
        changed[kind] += 1
        if len(examples) < 3:
            examples.append(f"{path.relative_to(root.parent)} (was {mode:04o})")

    tighten(root)
    # Bounded by the tree; links not followed; an unreadable directory raises, not skipped.
    for directory, dirs, files in os.walk(root, onerror=_raise):
        for name in (*dirs, *files):
            tighten(Path(directory) / name)
    if not any(changed):
        return None
    directories = f"{changed[0]} director{'y' if changed[0] == 1 else 'ies'}"
    regular = f"{changed[1]} file{'' if changed[1] == 1 else 's'}"
    return (
        f"{root}: took group and other permissions away from {directories} and {regular}, "
        f"now owner only (e.g. {', '.join(examples)})"
    )


def _raise(exc: OSError) -> None:
    raise exc


_FALLOC_FL_KEEP_SIZE = 0x01
_libc: ctypes.CDLL | None = None


def fallocate_keep_size(fd: int, offset: int, length: int) -> bool:
    """fallocate(2) with FALLOC_FL_KEEP_SIZE through libc (Python's os module has only
    posix_fallocate, which grows the file and so would hide where the written data ends).
    False when the call or the file system does not support it."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    func = getattr(_libc, "fallocate", None)
    if func is None or length <= 0:
        return False
    func.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    if func(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err))


def sync_directory(directory: Path) -> None:
    """fsync a directory so a new or renamed entry survives power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Faults:
    """Seeded fault plan for ``FaultyDisk``.

    fsync_error_after: the n-th sync call (0-based) and every later one raise OSError(EIO), as
    a failing disk would. used_ratio: reported disk usage, to exercise the watermark.
    """

    seed: int = 0
    fsync_error_after: int | None = None
    used_ratio: float = 0.0
    rng: random.Random = field(init=False)
    syncs: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def on_sync(self) -> None:
        n = self.syncs
        self.syncs += 1
        if self.fsync_error_after is not None and n >= self.fsync_error_after:
            raise OSError(5, "injected fsync failure (EIO)")


class WrappedFile:
    """A file that passes every call to ``inner``: the base of a file that changes one call
    (an injected fault, a test's gate) and leaves the rest as the real file does them."""

    def __init__(self, inner: FileHandle) -> None:
        self._inner = inner

    def pwrite(self, data: bytes, offset: int) -> None:
        self._inner.pwrite(data, offset)

    def pread(self, size: int, offset: int) -> bytes:
        return self._inner.pread(size, offset)

    def allocate(self, offset: int, length: int) -> bool:
        return self._inner.allocate(offset, length)

    def sync(self) -> None:
        self._inner.sync()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()


class FaultyFile(WrappedFile):
    def __init__(self, inner: FileHandle, faults: Faults) -> None:
        super().__init__(inner)
        self._faults = faults

    def sync(self) -> None:
        self._faults.on_sync()
        self._inner.sync()


class FaultyDisk(OsDisk):
    """Real files with injected faults; see ``Faults``."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    def open(self, path: Path) -> FileHandle:
        return FaultyFile(super().open(path), self.faults)

    def used_ratio(self, directory: Path) -> float:
        return self.faults.used_ratio

    def space(self, directory: Path) -> tuple[int, int]:
        total, free = super().space(directory)
        return total, min(free, int(total * (1.0 - self.faults.used_ratio)))


def tear_tail(path: Path, *, keep_bytes: int, seed: int) -> None:
    """Simulate a torn write on a real file: keep ``keep_bytes`` and overwrite the rest with
    seeded garbage up to the original length (what a crash mid-write can leave on disk)."""
    data = path.read_bytes()
    rng = random.Random(seed)
    garbage = rng.randbytes(len(data) - keep_bytes)
    path.write_bytes(data[:keep_bytes] + garbage)
