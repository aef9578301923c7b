"""What every peer module shares: the running-server handle, free ports, waiting for a port,
finding binaries, running a server as an unprivileged user, and server CPU from /proc.

Owns: process plumbing for servers the benchmark starts itself. Must not: touch system
services, pick fixed ports, or read anything but /proc for CPU (no psutil).

A peer module (benchmarks/peers/<peer>.py) provides:
    TITLE: str
    start(work: Path) -> Running          # raises Absent(reason) when the peer is not installed
    prepare(endpoint: str, name: str) -> None
    class Producer(endpoint, name): send(key: bytes, body: bytes) -> None; close() -> None
    consume(endpoint, name, ready, stop, got) -> None   # ready() once subscribed
``send`` returns only once the message is durable and committed with the system's own
durability setting; ``got`` is called with each delivered body after the consumer acked it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Absent(Exception):
    """The peer cannot run here; the message says why (shown as a skip note)."""


@dataclass
class Running:
    endpoint: str
    pid: int  # root of the server's process tree, for CPU accounting
    version: str
    durability: str  # how acks relate to fsync, printed in the results
    stop: Callable[[], None]
    notes: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_port(port: int, proc: subprocess.Popen[bytes] | None, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise Absent(f"{what} exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise Absent(f"{what} did not listen on port {port} within {seconds:.0f} s")


def which(name: str, *extra_dirs: str) -> str | None:
    """Prefer the venv's bin (PyPI-shipped servers), then extra dirs, then PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), *extra_dirs, os.environ["PATH"]])
    return shutil.which(name, path=path)


def service_user() -> str | None:
    """Servers that refuse root (PostgreSQL) run as this user when we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise Absent("running as root and no unprivileged user to run the server as")


def give_to(user: str | None, *paths: Path) -> None:
    if user is None:
        return
    entry = pwd.getpwnam(user)
    for p in paths:
        os.chown(p, entry.pw_uid, entry.pw_gid)


def _stat(pid: int) -> tuple[int, list[str]] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    rest = raw[raw.rindex(")") + 2 :].split()
    return int(rest[1]), rest  # ppid, fields from 'state' on


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                kids.setdefault(st[0], []).append(int(entry))
    return kids


def tree_cpu_seconds(root: int, *extra_roots: int) -> float:
    """utime+stime of every live process under the roots, plus the roots' reaped children
    (cutime+cstime), in seconds. Take both snapshots while the clients are still connected so
    that no process dies in between (its time would be counted twice)."""
    kids = _children_map()
    total = 0
    for r in (root, *extra_roots):
        st = _stat(r)
        if st is None:
            continue
        total += int(st[1][13]) + int(st[1][14])  # cutime, cstime of the root
        todo = [r]
        while todo:
            pid = todo.pop()
            s = _stat(pid)
            if s is not None:
                total += int(s[1][11]) + int(s[1][12])  # utime, stime
            todo.extend(kids.get(pid, []))
    return total / CLK_TCK


def terminate(proc: subprocess.Popen[bytes], seconds: float = 20.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def version_of(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else "unknown"
