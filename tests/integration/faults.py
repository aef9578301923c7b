"""Fault helpers for the replication tests: what a process cost, and cuttable TCP links.

``cpu_seconds(pid)``: user + system CPU time a live process used so far, from /proc/PID/stat
(every thread counted), to bound what a replica spends while it cannot reach etcd.
``TcpProxy``: a proxy between a replica and what it dials (etcd, its leader) that refuses or
black-holes connections on demand: a network partition without root or iptables.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid``, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command name (which may hold spaces, inside parentheses): state is
    # field 3, utime field 14 and stime field 15 (proc(5)).
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def line_count(path: Path) -> int:
    """Lines in the file at ``path`` (0 when it does not exist)."""
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(1 for _ in f)


class TcpProxy:
    """A TCP proxy from ``host:port`` (0: a free port) to ``target`` (HOST:PORT) that a test
    cuts and heals, one thread per direction of each connection (at most CONNECTIONS_MAX).

    - ``cut("refuse")``: the listening port closes and every connection is closed, as when the
      process behind it died: connects are refused until ``heal``.
    - ``cut("blackhole")``: nothing is forwarded any more, either way, on the connections
      open and on new ones (still accepted: the kernel completes the handshake), as when
      packets are dropped: callers wait for their own deadlines. ``heal`` closes the
      connections held meanwhile (their callers reconnect) and forwards again.
    """

    CONNECTIONS_MAX = 256
    _LOOK_S = 0.05  # how often a blocked thread looks at the mode (bounds close's wait too)
    _CONNECT_S = 2.0

    def __init__(self, target: str, host: str = "127.0.0.1", port: int = 0) -> None:
        th, _, tp = target.rpartition(":")
        self.target = (th, int(tp))
        self.host = host
        self.mode = "pass"
        self._lock = threading.Lock()
        self._conns: set[_Link] = set()
        self._closed = threading.Event()
        self._listener = self._listen(port)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def _listen(self, port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.host, port))
        s.listen(64)
        s.settimeout(self._LOOK_S)
        return s

    def cut(self, how: str) -> None:
        assert how in ("refuse", "blackhole"), how
        with self._lock:
            self.mode = how
            conns = list(self._conns)
            if how == "refuse":
                self._listener.close()
        for c in conns:
            if how == "refuse":
                c.reset()
            else:
                c.held = True

    def heal(self) -> None:
        with self._lock:
            if self.mode == "refuse":
                self._listener = self._listen(self.port)
            self.mode = "pass"
            held = [c for c in self._conns if c.held]
        for c in held:
            c.reset()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._listener.close()
            conns = list(self._conns)
        for c in conns:
            c.reset()
        self._acceptor.join(5)
        for c in conns:
            c.join(5)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                listener, mode = self._listener, self.mode
            if mode == "refuse":
                self._closed.wait(self._LOOK_S)
                continue
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):  # no connect within the look, or closed by cut
                continue
            self._adopt(client)

    def _adopt(self, client: socket.socket) -> None:
        with self._lock:
            full = len(self._conns) >= self.CONNECTIONS_MAX
            held = self.mode == "blackhole"
        if full:
            client.close()
            return
        upstream = None
        if not held:
            try:
                upstream = socket.create_connection(self.target, timeout=self._CONNECT_S)
            except OSError:
                client.close()  # nothing behind: the caller sees its connection end
                return
        link = _Link(self, client, upstream, held)
        with self._lock:
            self._conns.add(link)
        link.start()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._conns.discard(link)


class _Link:
    """One proxied connection: a thread per direction."""

    def __init__(
        self,
        proxy: TcpProxy,
        client: socket.socket,
        upstream: socket.socket | None,
        held: bool,
    ) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.held = held  # black-holed: nothing forwarded until reset
        self._gone = threading.Event()
        self._lock = threading.Lock()
        for s in (client, upstream):
            if s is not None:
                s.settimeout(None)
        self._threads = [
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True),
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def _pump(self, src: socket.socket | None, dst: socket.socket | None) -> None:
        try:
            while not self._gone.is_set():
                if self.held or src is None or dst is None:
                    self._gone.wait(TcpProxy._LOOK_S)  # black-holed: read nothing
                    continue
                readable, _, _ = select.select([src], [], [], TcpProxy._LOOK_S)
                if not readable:
                    continue
                data = src.recv(65536)
                if not data:
                    break  # closed by its side
                if not self.held:  # else cut while it was read: dropped
                    dst.sendall(data)
        except (OSError, ValueError):
            pass  # the other side or a reset closed it (ValueError: select on a closed fd)
        finally:
            self.reset()

    def reset(self) -> None:
        """Close both sides (a blocked read or send on them returns at once)."""
        with self._lock:
            if self._gone.is_set():
                return
            self._gone.set()
        for s in (self.client, self.upstream):
            if s is None:
                continue
            with contextlib.suppress(OSError):  # not connected any more
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self.proxy._forget(self)

    def join(self, timeout_s: float) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout_s)
